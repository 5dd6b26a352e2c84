package webhook

import (
	"context"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The answers the API server cannot show in the envtest suite: what is never patched, and that a
// body this handler cannot read is left to the schema rather than denied (a denial is final,
// whatever the failure policy).
func TestFinalizerOnCreateLeavesAlone(t *testing.T) {
	f := FinalizerOnCreate{Finalizer: "httpscale.dev/routing-table", Namespaces: []string{"shop"}}
	for name, req := range map[string]admissionv1.AdmissionRequest{
		"an update":                {Operation: admissionv1.Update, Namespace: "shop", Object: runtime.RawExtension{Raw: []byte(`{"metadata":{}}`)}},
		"an unwatched namespace":   {Operation: admissionv1.Create, Namespace: "blog", Object: runtime.RawExtension{Raw: []byte(`{"metadata":{}}`)}},
		"another fleet":            {Operation: admissionv1.Create, Namespace: "shop", Object: runtime.RawExtension{Raw: []byte(`{"metadata":{},"spec":{"fleet":"blue"}}`)}},
		"a body it cannot read":    {Operation: admissionv1.Create, Namespace: "shop", Object: runtime.RawExtension{Raw: []byte(`{"spec":{"fleet":5}}`)}},
		"the finalizer already on": {Operation: admissionv1.Create, Namespace: "shop", Object: runtime.RawExtension{Raw: []byte(`{"metadata":{"finalizers":["httpscale.dev/routing-table"]}}`)}},
	} {
		resp := f.Handle(context.Background(), admission.Request{AdmissionRequest: req})
		if !resp.Allowed || len(resp.Patches) != 0 {
			t.Errorf("%s: allowed %v, patches %v; want allowed, unpatched", name, resp.Allowed, resp.Patches)
		}
	}
	resp := f.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Create, Namespace: "shop", Object: runtime.RawExtension{Raw: []byte(`{"metadata":{"finalizers":[]},"spec":{"fleet":"default"}}`)}}})
	if !resp.Allowed || len(resp.Patches) != 1 || resp.Patches[0].Path != "/metadata/finalizers/-" {
		t.Errorf("default fleet, empty finalizer list: allowed %v, patches %v; want one append", resp.Allowed, resp.Patches)
	}
}
