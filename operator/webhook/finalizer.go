package webhook

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// MutatePath is where the mutating webhook that puts the fleet's finalizer on new objects is served.
const MutatePath = "/mutate-httpscale-dev-v1alpha1-httpscaledobject"

// The generated config/webhook/manifests.yaml; the chart renders the same configuration. Ignore: when
// the webhook cannot be reached, the routing controller adds the finalizer itself, one write later.
// +kubebuilder:webhookconfiguration:mutating=true,name=httpscale-operator-webhook
// +kubebuilder:webhook:path=/mutate-httpscale-dev-v1alpha1-httpscaledobject,mutating=true,failurePolicy=ignore,sideEffects=None,groups=httpscale.dev,resources=httpscaledobjects,verbs=create,versions=v1alpha1,name=finalizers.httpscaledobjects.httpscale.dev,admissionReviewVersions=v1,serviceName=httpscale-operator-webhook,serviceNamespace=httpscale-system,servicePort=443,timeoutSeconds=5,reinvocationPolicy=Never

// FinalizerOnCreate puts the operator's finalizer on each HTTPScaledObject of its fleet as it is
// created, in the create itself. The finalizer keeps an object in the API until the routing table
// without it is written; without this webhook the routing controller adds it with a patch before it
// routes a new object, a write in series with the table's two (see docs/architecture.md). The
// routing controller still adds it when it is missing (webhook down, object created before the
// webhook was installed), so this only saves that write.
//
// It is a plain admission.Handler answering with one JSON patch operation rather than a
// controller-runtime Defaulter: a Defaulter decodes, re-encodes and diffs the whole object on every
// create, and could rewrite fields this operator's Go types do not know.
type FinalizerOnCreate struct {
	// Finalizer is the fleet's finalizer.
	Finalizer string
	// Fleet is the operator's fleet ("" means v1.DefaultFleet); objects of other fleets are left as
	// they are (their operator removes only its own finalizer).
	Fleet string
	// Namespaces are the namespaces the operator watches; empty means all. An object elsewhere gets
	// no finalizer: no reconcile of this operator would ever remove it.
	Namespaces []string
}

var _ admission.Handler = FinalizerOnCreate{}

// Handle implements admission.Handler.
func (f FinalizerOnCreate) Handle(_ context.Context, req admission.Request) admission.Response {
	if req.Operation != admissionv1.Create {
		return admission.Allowed("")
	}
	if len(f.Namespaces) > 0 && !slices.Contains(f.Namespaces, req.Namespace) {
		return admission.Allowed("namespace not watched by this operator")
	}
	var obj struct {
		Metadata struct {
			Finalizers []string `json:"finalizers"`
		} `json:"metadata"`
		Spec struct {
			Fleet string `json:"fleet"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
		// Not this webhook's to reject (an error here would be a denial, whatever the failure
		// policy): the schema validation that follows answers a malformed object with its own message.
		return admission.Allowed("not decodable here; left to the schema")
	}
	if cmp.Or(obj.Spec.Fleet, v1.DefaultFleet) != cmp.Or(f.Fleet, v1.DefaultFleet) {
		return admission.Allowed("another fleet's object")
	}
	if slices.Contains(obj.Metadata.Finalizers, f.Finalizer) {
		return admission.Allowed("")
	}
	op := jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/finalizers/-", Value: f.Finalizer}
	if obj.Metadata.Finalizers == nil {
		op = jsonpatch.JsonPatchOperation{Operation: "add", Path: "/metadata/finalizers", Value: []string{f.Finalizer}}
	}
	return admission.Patched("", op)
}
