//go:build e2e

package e2e

import (
	"fmt"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
)

var _ = Describe("Zone-aware routing", Ordered, func() {
	var (
		h    *framework.HTTPScale
		ns   string
		host string
	)

	BeforeAll(func(ctx SpecContext) {
		h, ns, host = scenario(ctx, "zones")
		// The scaled Deployment "app" lives in zone-b; a second Deployment "app-a" with the same
		// app label (so behind the same Service) lives in zone-a and is not managed by httpscale.
		routedApp(ctx, ns, "app", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.Replicas.Min = ptr.To[int32](1)
			s.Replicas.Max = ptr.To[int32](1)
		})
		updateDeployment(ctx, ns, "app", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.NodeSelector["topology.kubernetes.io/zone"] = "zone-b"
			d.Spec.Template.Spec.TopologySpreadConstraints = nil
		})
		zoneA, _ := f.SampleApp(ns, "app-a", 1)
		zoneA.Spec.Selector.MatchLabels = map[string]string{"app": "app", "pin": "zone-a"}
		zoneA.Spec.Template.Labels = map[string]string{"app": "app", "pin": "zone-a"}
		zoneA.Spec.Template.Spec.NodeSelector["topology.kubernetes.io/zone"] = "zone-a"
		zoneA.Spec.Template.Spec.TopologySpreadConstraints = nil
		Expect(f.Client.Create(ctx, zoneA)).To(Succeed())
	})

	// zonesOf sends n requests through the interceptor of the given zone index and counts the zones
	// that answered ("error"/"status N" for failures).
	zonesOf := func(ctx SpecContext, zone, n int) map[string]int {
		seen := map[string]int{}
		for range n {
			a, err := ask(ctx, h, zone, host, "/", nil)
			switch {
			case err != nil:
				seen["error"]++
			case a.Status != http.StatusOK:
				seen[fmt.Sprintf("status %d", a.Status)]++
			default:
				seen[a.Zone]++
			}
		}
		return seen
	}

	It("sends requests through an interceptor to pods of its own zone", func(ctx SpecContext) {
		Eventually(func() map[string]int { return zonesOf(ctx, 0, 20) }).WithContext(ctx).
			Should(Equal(map[string]int{h.Interceptors[0].Zone: 20}))
		Eventually(func() map[string]int { return zonesOf(ctx, 1, 20) }).WithContext(ctx).
			Should(Equal(map[string]int{h.Interceptors[1].Zone: 20}))
	})

	It("falls back to another zone when its own has no ready pod", func(ctx SpecContext) {
		updateDeployment(ctx, ns, "app-a", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](0) })
		Eventually(func() map[string]int { return zonesOf(ctx, 0, 20) }).WithContext(ctx).
			Should(Equal(map[string]int{"zone-b": 20}))
	})
})
