//go:build e2e

package e2e

import (
	"fmt"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

var _ = Describe("Routing propagation status", Ordered, func() {
	var (
		h    *framework.HTTPScale
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

	// An interceptor that stops answering while its EndpointSlice still lists it ready: its node's
	// kubelet is stopped (nothing probes the pod or reports its status; the node stays Ready for the
	// node monitor's grace period), and its process is stopped with SIGSTOP. Once the process runs on
	// and the kubelet is back, it is counted in again.
	It("counts an interceptor that stops answering out, and in again once it is back", func(ctx SpecContext) {
		ic := h.Interceptors[1]
		node, err := f.Cluster.RealNodeByZone(ic.Zone)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Cluster.StopKubelet(node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			_, _ = localcluster.SignalContainer(ic.ContainerID, syscall.SIGCONT)
			Expect(f.Cluster.StartKubelet(ctx, node)).To(Succeed())
		})
		_, err = localcluster.SignalContainer(ic.ContainerID, syscall.SIGSTOP)
		Expect(err).NotTo(HaveOccurred())
		Eventually(routing(ctx)).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal("1/2"))

		_, err = localcluster.SignalContainer(ic.ContainerID, syscall.SIGCONT)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Cluster.StartKubelet(ctx, node)).To(Succeed())
		Eventually(routing(ctx)).WithContext(ctx).Should(Equal("2/2"))
	})
})

func fmtRouting(r *httpscalev1alpha1.RoutingStatus) string {
	return fmt.Sprintf("%d/%d", r.InterceptorsReady, r.InterceptorsTotal)
}
