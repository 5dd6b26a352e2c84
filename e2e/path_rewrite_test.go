//go:build e2e

package e2e

import (
	"fmt"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/proxy"
)

// spec.pathRewrites on the chart's pods: /shop/x reaches an app that serves / as /x, with
// X-Forwarded-Prefix, through either interceptor and through the interceptor Service; a path that
// climbs out of the prefix is refused.
var _ = Describe("Path rewrite", func() {
	It("sends /shop/x to the app as /x with X-Forwarded-Prefix: /shop", func(ctx SpecContext) {
		h, ns, host := scenario(ctx, "rewrite")
		routedApp(ctx, ns, "shop", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.PathPrefixes = []httpscalev1alpha1.PathPrefix{"/shop", "/api"}
			s.PathRewrites = []httpscalev1alpha1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "/"}}
			s.Replicas.Min = ptr.To[int32](1)
		})
		urls := map[string]func(path string) string{
			"interceptor service": func(p string) string {
				return fmt.Sprintf("http://%s:%d%s", h.InterceptorService, localcluster.ProxyPort, p)
			},
		}
		for z := range h.Interceptors {
			urls[fmt.Sprintf("interceptor %s", h.Interceptors[z].Zone)] = func(p string) string { return proxyURL(h, z, p) }
		}
		for via, url := range urls {
			for _, c := range []struct{ path, want, prefix string }{
				{"/shop/x", "/x", "/shop"},
				{"/shop", "/", "/shop"},
				{"/shop/a/b/", "/a/b/", "/shop"},
				{"/sh%6Fp/a%20b", "/a b", "/shop"}, // the app decodes what it gets
				{"/api/v1", "/api/v1", ""},         // another prefix of the app, not rewritten
			} {
				Eventually(func(g Gomega) {
					resp, err := f.Get(ctx, url(c.path), host)
					g.Expect(err).NotTo(HaveOccurred())
					a, err := readAnswer(resp)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(a.Status).To(Equal(http.StatusOK))
					g.Expect(a.Path).To(Equal(c.want), "%s via %s", c.path, via)
					g.Expect(a.Headers[proxy.HeaderForwardedPrefix]).To(Equal(c.prefix), "%s via %s", c.path, via)
				}).WithContext(ctx).Should(Succeed()) // the Service's endpoints may still be programmed
			}
			resp, err := f.Get(ctx, url("/shop/../admin"), host)
			Expect(err).NotTo(HaveOccurred())
			a, _ := readAnswer(resp)
			Expect(a.Status).To(Equal(http.StatusBadRequest), "/shop/../admin via %s must not reach the app", via)
		}
	})
})
