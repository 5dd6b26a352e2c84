package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HostClaimSpec records which namespace owns a host.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="a HostClaim cannot be changed: delete it to release the host (the namespace that claims it next owns it)"
type HostClaimSpec struct {
	// Host is the claimed host: an exact name, a wildcard (*.example.com) or *.
	Host Host `json:"host"`

	// Namespace that owns the host: only HTTPScaledObjects in it may route it.
	Namespace NamespaceName `json:"namespace"`
}

// HostClaimStatus says who uses a claim, as the operators of the fleets see it.
type HostClaimStatus struct {
	// Fleets whose operators route the host for the owning namespace now.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	Fleets []string `json:"fleets,omitempty"`

	// ReleasedAt is when the last fleet stopped routing the host (no object of the owning namespace
	// claims it any more). The operator deletes a claim it created once the retention period
	// (--host-claim-retention) has passed since then with no new user; until then the host stays the
	// namespace's, so a GitOps replace or a helm uninstall/install of its objects keeps it.
	// +optional
	ReleasedAt *metav1.Time `json:"releasedAt,omitempty"`
}

// HostClaim records that a host belongs to one namespace, on every fleet of the cluster. The elected
// operator creates one when a namespace first routes a host and keeps it while objects of that
// namespace use it and for a retention period after the last one is gone; objects of other
// namespaces claiming the host are refused. It is cluster-scoped, so tenants with namespace roles
// cannot write it; a platform admin may create one (it then never expires) or delete one to release
// the host. See docs/security.md.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=hclaim,categories=httpscale
// +kubebuilder:printcolumn:name="Host",type=string,JSONPath=`.spec.host`
// +kubebuilder:printcolumn:name="Namespace",type=string,JSONPath=`.spec.namespace`
// +kubebuilder:printcolumn:name="Fleets",type=string,JSONPath=`.status.fleets`
// +kubebuilder:printcolumn:name="Released",type=date,JSONPath=`.status.releasedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HostClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   HostClaimSpec   `json:"spec"`
	Status HostClaimStatus `json:"status,omitempty"`
}

// HostClaimList is a list of HostClaims.
// +kubebuilder:object:root=true
type HostClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HostClaim `json:"items"`
}

// HostClaimName is the name of the HostClaim of host: "host-" and 40 hex digits of the host's
// SHA-256 (a host is not always a valid object name: * and *.example.com are not).
func HostClaimName(host string) string {
	sum := sha256.Sum256([]byte(host))
	return "host-" + hex.EncodeToString(sum[:20])
}

// LabelClaimManagedBy marks the HostClaims an operator created (value ClaimManagedByOperator); only
// those expire. A claim an admin creates without it keeps the host for its namespace until deleted.
const (
	LabelClaimManagedBy    = "app.kubernetes.io/managed-by"
	ClaimManagedByOperator = "httpscale-operator"
)

func init() {
	SchemeBuilder.Register(&HostClaim{}, &HostClaimList{})
}
