package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HTTPScalePolicySpec is what the platform team allows tenants (namespaces) to claim. Without any
// policy every namespace may claim exact hosts that no other namespace owns, and none may claim a
// wildcard host or the catch-all *; host rules widen or narrow that for the hosts their patterns
// cover, catchAll grants the catch-all. Several policies are read together, as if their rules
// were one list.
type HTTPScalePolicySpec struct {
	// Hosts are the host rules. For a host an object claims, the rules whose pattern covers it and
	// is the most specific among those that do decide (exact, then the longest wildcard, then *);
	// several rules with that same pattern are read together. The namespaces they select may claim
	// the host (a wildcard host or * only when one of them sets wildcards); no other namespace may.
	// A host no rule covers follows the default: any namespace may claim an exact host first,
	// nobody a wildcard. The catch-all host * is decided by catchAll alone.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	Hosts []HostRule `json:"hosts,omitempty"`

	// CatchAll selects the namespaces that may claim the catch-all host *, which receives every
	// request no other object routes (a platform's default backend, say). Without it (in every
	// policy) no namespace may.
	// +optional
	CatchAll *NamespaceSelection `json:"catchAll,omitempty"`

	// ClusterTriggerAuthentication selects the namespaces whose HTTPScaledObjects may name a KEDA
	// ClusterTriggerAuthentication in spec.scaling.triggers[].authenticationRef. Without it (in every
	// policy) no namespace may: a TriggerAuthentication lives in the object's own namespace, a
	// ClusterTriggerAuthentication holds credentials of the whole cluster.
	// +optional
	ClusterTriggerAuthentication *NamespaceSelection `json:"clusterTriggerAuthentication,omitempty"`
}

// HostRule says which namespaces may claim the hosts a pattern covers.
type HostRule struct {
	// Pattern is an exact host (shop.example.com), a wildcard (*.example.com: every name below
	// example.com at any depth, and wildcard hosts below it, not example.com itself) or * (every
	// host no more specific rule covers).
	Pattern Host `json:"pattern"`

	// Namespaces that may claim the hosts the pattern covers. Selecting none reserves them: no
	// namespace may claim them.
	// +optional
	Namespaces NamespaceSelection `json:"namespaces,omitempty"`

	// Wildcards lets the selected namespaces claim wildcard hosts the pattern covers (the pattern
	// itself included when it is a wildcard *.d; the catch-all * is granted by catchAll only).
	// Without it they may claim exact hosts only.
	// +optional
	Wildcards bool `json:"wildcards,omitempty"`
}

// NamespaceSelection selects namespaces by name, by label, or both (a namespace either selects is
// selected). Empty selects none.
type NamespaceSelection struct {
	// Names of namespaces.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	Names []NamespaceName `json:"names,omitempty"`

	// Selector selects namespaces by their labels. An empty selector ({}) selects every namespace.
	// +optional
	Selector *metav1.LabelSelector `json:"selector,omitempty"`
}

// NamespaceName is the name of a namespace.
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
type NamespaceName string

// HTTPScalePolicy is the platform team's say over what tenants may claim on the shared fleets:
// which namespaces may route which hosts, who may claim wildcard hosts and the catch-all *, and who
// may use cluster-wide KEDA credentials. It is cluster-scoped: tenants with namespace roles cannot
// write it. See docs/security.md.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=hsp,categories=httpscale
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HTTPScalePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec HTTPScalePolicySpec `json:"spec,omitempty"`
}

// HTTPScalePolicyList is a list of HTTPScalePolicies.
// +kubebuilder:object:root=true
type HTTPScalePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HTTPScalePolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HTTPScalePolicy{}, &HTTPScalePolicyList{})
}
