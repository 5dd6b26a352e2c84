//go:build e2e

package e2e

import (
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
)

var _ = Describe("Conflicting claims on one host", Ordered, func() {
	sc := setUpScenario("conflict")

	conflict := func(ctx SpecContext, name string) func() (metav1.ConditionStatus, error) {
		return func() (metav1.ConditionStatus, error) {
			var o httpscalev1alpha1.HTTPScaledObject
			if err := f.Client.Get(ctx, client.ObjectKey{Namespace: sc.ns, Name: name}, &o); err != nil {
				return "", err
			}
			c := meta.FindStatusCondition(o.Status.Conditions, httpscalev1alpha1.ConditionConflict)
			if c == nil {
				return metav1.ConditionUnknown, nil
			}
			return c.Status, nil
		}
	}
	servedBy := func(ctx SpecContext, app string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			a, err := ask(ctx, sc.h, 0, sc.host, "/", nil)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Status).To(Equal(http.StatusOK))
			g.Expect(podIPs(ctx, sc.ns, app)).To(ContainElement(a.PodIP))
		}).WithContext(ctx).Should(Succeed())
	}
	one := func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
		s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(sc.host)}
		s.Replicas.Min = ptr.To[int32](1)
	}

	It("keeps the older object and marks the younger Conflict=True", func(ctx SpecContext) {
		routedApp(ctx, sc.ns, "older", 1, one)
		dep, svc := f.SampleApp(sc.ns, "younger", 1)
		Expect(f.Client.Create(ctx, dep)).To(Succeed())
		Expect(f.Client.Create(ctx, svc)).To(Succeed())
		younger := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: "younger", Namespace: sc.ns}}
		younger.Spec.ScaleTargetRef = httpscalev1alpha1.ScaleTargetRef{
			APIVersion: "apps/v1", Kind: "Deployment", Name: "younger", Service: "younger", Port: ptr.To[int32](80)}
		younger.Spec.Replicas = &httpscalev1alpha1.ReplicaBounds{Max: ptr.To[int32](4)}
		one(&younger.Spec)
		Expect(f.Client.Create(ctx, younger)).To(Succeed())

		Eventually(conflict(ctx, "younger")).WithContext(ctx).Should(Equal(metav1.ConditionTrue))
		Expect(conflict(ctx, "older")()).NotTo(Equal(metav1.ConditionTrue))
		servedBy(ctx, "older")
	})

	It("hands the host to the younger object once the older is deleted", func(ctx SpecContext) {
		older := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: "older", Namespace: sc.ns}}
		Expect(f.Client.Delete(ctx, older)).To(Succeed())
		Eventually(conflict(ctx, "younger")).WithContext(ctx).Should(Equal(metav1.ConditionFalse))
		servedBy(ctx, "younger")
	})
})
