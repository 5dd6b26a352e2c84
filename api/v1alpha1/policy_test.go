package v1alpha1_test

import (
	"context"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

var _ = Describe("HTTPScalePolicy and HostClaim admission", func() {
	ctx := context.Background()

	It("rejects a policy pattern that is not a host pattern and a namespace that is not a name", func() {
		for _, p := range []v1.HTTPScalePolicy{
			{ObjectMeta: metav1.ObjectMeta{Name: "bad-pattern"}, Spec: v1.HTTPScalePolicySpec{Hosts: []v1.HostRule{{Pattern: "shop.*.com"}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "bad-namespace"}, Spec: v1.HTTPScalePolicySpec{Hosts: []v1.HostRule{{Pattern: "*.example.com",
				Namespaces: v1.NamespaceSelection{Names: []v1.NamespaceName{"Team_A"}}}}}},
		} {
			err := k8s.Create(ctx, &p)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: want 422, got %v", p.Name, err)
		}
	})

	It("keeps a HostClaim's host and namespace as created: release a host by deleting its claim", func() {
		hc := &v1.HostClaim{ObjectMeta: metav1.ObjectMeta{Name: v1.HostClaimName("shop.example.com")},
			Spec: v1.HostClaimSpec{Host: "shop.example.com", Namespace: "shop"}}
		Expect(k8s.Create(ctx, hc)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, hc)).To(Succeed()) })
		hc.Spec.Namespace = "attacker"
		err := k8s.Update(ctx, hc)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422, got %v", err)
		Expect(err.Error()).To(ContainSubstring("a HostClaim cannot be changed"))
		Expect(v1.HostClaimName("shop.example.com")).To(MatchRegexp(`^host-[0-9a-f]{40}$`))
	})
})
