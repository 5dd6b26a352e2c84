//go:build e2e

package e2e

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

var _ = Describe("Routing propagation status", Ordered, func() {
	var (
		h    *localcluster.HTTPScale
		ns   string
		host string
		hso  *httpscalev1alpha1.HTTPScaledObject
	)

	BeforeAll(func(ctx SpecContext) { h, ns, host = scenario(ctx, "propagation") })

	routing := func(ctx SpecContext) func() (string, error) {
		return func() (string, error) {
			if err := f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso); err != nil {
				return "", err
			}
			if hso.Status.Routing == nil {
				return "none", nil
			}
			return fmtRouting(hso.Status.Routing), nil
		}
	}

	It("reaches every interceptor", func(ctx SpecContext) {
		// routedApp waits for ready == total == number of interceptors.
		hso = scaledApp(ctx, ns, "app", host, 300)
		Expect(fmtRouting(hso.Status.Routing)).To(Equal("2/2"))
	})

	It("counts a stopped interceptor out, and in again once it is back", func(ctx SpecContext) {
		ic := h.Addresses.Interceptors[1]
		Expect(f.Cluster.StopComponent(h.Components[ic.Name])).To(Succeed())
		Eventually(routing(ctx)).WithContext(ctx).Should(Equal("1/2"))
		Expect(f.Cluster.StartComponent(ctx, ic.Name, h.Components[ic.Name])).To(Succeed())
		Eventually(routing(ctx)).WithContext(ctx).Should(Equal("2/2"))
	})
})

func fmtRouting(r *httpscalev1alpha1.RoutingStatus) string {
	return fmt.Sprintf("%d/%d", r.InterceptorsReady, r.InterceptorsTotal)
}
