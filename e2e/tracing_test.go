//go:build e2e

package e2e

import (
	"net"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/tracing/tracingtest"
)

// Tracing as users turn it on: `interceptor.tracing.endpoint` in the chart's values points the
// interceptor pods at an OTLP/HTTP receiver (here in this process, listening inside the cluster's
// network namespace on the API server's address, which pods reach); a request carrying a caller's
// traceparent yields a span of the interceptor pod that served it, child of the caller's span.
var _ = Describe("Tracing", Ordered, func() {
	It("exports the interceptor's span of a request, linked to the caller's trace, to the endpoint the chart's values name", func(ctx SpecContext) {
		l, err := localcluster.Listen(f.Cluster.NetNS, net.JoinHostPort(f.Cluster.HostIP, "0"))
		Expect(err).NotTo(HaveOccurred())
		col := tracingtest.ServeHTTP(GinkgoT(), l)
		DeferCleanup(func(ctx SpecContext) {
			Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter)).To(Succeed())
			rebalanceInterceptors(ctx)
		})
		Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter, "--set", "interceptor.tracing.endpoint="+col.HTTPEndpoint())).To(Succeed())
		rebalanceInterceptors(ctx)

		h, ns, host := scenario(ctx, "tracing")
		routedApp(ctx, ns, "traced", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.Replicas.Min = ptr.To[int32](1)
		})
		const traceID, parent = "5bf92f3577b34da6a3ce929d0e0e4736", "10f067aa0ba902b7"
		Eventually(func() (int, error) {
			a, err := ask(ctx, h, 0, host, "/traced", map[string]string{"Traceparent": "00-" + traceID + "-" + parent + "-01"})
			return a.Status, err
		}).WithContext(ctx).Should(Equal(http.StatusOK))

		var span tracingtest.Span
		Eventually(func() bool {
			for _, s := range col.Spans() {
				if s.TraceID() == traceID && s.ParentID() == parent {
					span = s
					return true
				}
			}
			return false
		}).WithContext(ctx).WithTimeout(time.Minute).Should(BeTrue(), "received %d spans, none of trace %s", len(col.Spans()), traceID)
		Expect(span.Resource).To(HaveKeyWithValue("k8s.pod.name", h.Interceptors[0].Name))
		Expect(span.Resource).To(HaveKeyWithValue("service.name", "httpscale-interceptor"))
		GinkgoWriter.Printf("span %s %q attributes %v\n", span.SpanID(), span.GetName(), span.Attrs())
	})
})
