//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/proxy"
)

// browserAccept is what browsers send with a page navigation.
const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// spec.coldStart.waitingPage through the chart's interceptors: a browser navigating to an app at zero
// gets the page at once (503, Refresh) and the app wakes; an API client is held and answered by the
// app, as without the page.
var _ = Describe("Waiting page", func() {
	It("answers a browser at once with a self-refreshing page while the app wakes, and holds an API client as before", func(ctx SpecContext) {
		h, ns, host := scenario(ctx, "waitpage")
		routedApp(ctx, ns, "page", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.ScaledownPeriod = ptr.To[int32](300)
			s.ColdStart = &httpscalev1alpha1.ColdStart{WaitingPage: &httpscalev1alpha1.WaitingPage{Enabled: true, RefreshSeconds: 2}}
		})
		Expect(replicas(ctx, ns, "page")).To(BeEquivalentTo(0))
		get := func(ctx context.Context, accept string) (*http.Response, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL(h, 0, "/"), nil)
			Expect(err).NotTo(HaveOccurred())
			req.Host = host
			req.Header.Set("Accept", accept)
			resp, err := f.HTTP.Do(req)
			Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			Expect(err).NotTo(HaveOccurred())
			return resp, string(b)
		}

		By("a browser navigation at zero: the page at once")
		start := time.Now()
		resp, body := get(ctx, browserAccept)
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second), "the page is not held")
		Expect(resp.StatusCode).To(Equal(http.StatusServiceUnavailable))
		Expect(resp.Header.Get("Content-Type")).To(HavePrefix("text/html"))
		Expect(resp.Header.Get("Refresh")).To(Equal("2"))
		Expect(resp.Header.Get("Retry-After")).To(Equal("2"))
		Expect(resp.Header.Get("Cache-Control")).To(Equal("no-store"))
		Expect(body).To(ContainSubstring(`http-equiv="refresh"`))

		By("an API client right after: held until the app is up, then answered by it")
		type held struct {
			a    answer
			cold string
		}
		api := make(chan held, 1)
		go func() {
			defer GinkgoRecover()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL(h, 0, "/api"), nil)
			Expect(err).NotTo(HaveOccurred())
			req.Host = host
			req.Header.Set("Accept", "application/json")
			resp, err := f.HTTP.Do(req)
			Expect(err).NotTo(HaveOccurred())
			cold := resp.Header.Get(proxy.HeaderColdStart)
			a, err := readAnswer(resp)
			Expect(err).NotTo(HaveOccurred())
			api <- held{a, cold}
		}()
		Eventually(func() (int32, error) { return replicas(ctx, ns, "page") }).WithContext(ctx).
			Should(BeNumerically(">=", 1), "the page's request woke the app")
		var got held
		Eventually(api).WithTimeout(3 * time.Minute).Should(Receive(&got))
		Expect(got.a.Status).To(Equal(http.StatusOK))
		Expect(got.cold).To(Equal("true"), "the API client was held, not given the page")
		Expect(podIPs(ctx, ns, "page")).To(ContainElement(got.a.PodIP))

		By("the browser's refresh once the app is up: the app's own answer")
		Eventually(func(g Gomega) {
			resp, body := get(ctx, browserAccept)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			g.Expect(resp.Header.Get(proxy.HeaderColdStart)).To(BeEmpty())
			g.Expect(strings.Contains(body, `"podIP"`)).To(BeTrue(), body)
		}).WithContext(ctx).Should(Succeed())
		AddReportEntry("waiting page: first page -> app answers the browser", time.Since(start).String())
	})
})
