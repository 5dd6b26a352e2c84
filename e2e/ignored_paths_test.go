//go:build e2e

package e2e

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/scaling"
)

// A load balancer's health checks on an ignored path must neither wake an app at zero nor keep it
// from returning to zero; a static route is answered whatever the app's state.
var _ = Describe("Ignored paths and static routes", Ordered, func() {
	const scaledown = 20 * time.Second
	sc := setUpScenario("ignored",
		func(_ SpecContext, e *scenarioEnv) { e.host = "hc." + e.ns + ".example" },
		hostApp("hc", 0, scaledownAfter(scaledown), func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.IgnoredPaths = []httpscalev1alpha1.PathPrefix{"/healthz"}
			s.StaticRoutes = []httpscalev1alpha1.StaticRoute{{PathPrefix: "/ping", Response: &httpscalev1alpha1.StaticResponse{Body: "pong"}}}
		}))

	get := func(ctx context.Context, path string) (int, string, http.Header) {
		resp, err := f.Get(ctx, proxyURL(sc.h, 0, path), sc.host)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}

	It("answers health checks at zero without waking the app, and lets it return to zero while they go on", func(ctx SpecContext) {
		By("at zero: the ignored path is answered 503 idle at once, the static route by the interceptor")
		for range 10 {
			start := time.Now()
			code, _, hdr := get(ctx, "/healthz")
			Expect(code).To(Equal(http.StatusServiceUnavailable))
			Expect(hdr.Get(proxy.HeaderIdle)).To(Equal("true"))
			Expect(hdr.Get("Retry-After")).NotTo(BeEmpty())
			Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second), "an ignored path must not be held")
			code, body, _ := get(ctx, "/ping")
			Expect(code).To(Equal(http.StatusOK))
			Expect(body).To(Equal("pong"))
			time.Sleep(500 * time.Millisecond)
		}
		Consistently(func() (int32, error) { return replicas(ctx, sc.ns, "hc") }).
			WithTimeout(kedaPollingInterval / 3).WithPolling(time.Second).Should(BeEquivalentTo(0))

		By("a health check every 500 ms from now on")
		hcCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[int]int{}
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			for hcCtx.Err() == nil {
				if resp, err := f.Get(hcCtx, proxyURL(sc.h, 0, "/healthz"), sc.host); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					mu.Lock()
					codes[resp.StatusCode]++
					mu.Unlock()
				}
				select {
				case <-hcCtx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
		DeferCleanup(func() { stop(); wg.Wait() })

		By("waking it with a real request, then one warm request after the wake hold")
		code, _, hdr := get(ctx, "/work")
		Expect(code).To(Equal(http.StatusOK))
		Expect(hdr.Get(proxy.HeaderColdStart)).To(Equal("true"))
		time.Sleep(wakeHold + time.Second)
		code, _, _ = get(ctx, "/last")
		Expect(code).To(Equal(http.StatusOK))
		last := time.Now()

		By("staying up for the scaledown period, then reaching zero within KEDA's polling interval despite the health checks")
		Consistently(func() (int32, error) { return replicas(ctx, sc.ns, "hc") }).
			WithTimeout(scaledown - time.Since(last)).WithPolling(500 * time.Millisecond).
			Should(BeNumerically(">=", 1))
		Eventually(func() (int32, error) { return replicas(ctx, sc.ns, "hc") }).
			WithTimeout(scaledown + scaling.DefaultActiveHold + kedaPollingInterval + slack - time.Since(last)).
			WithPolling(250 * time.Millisecond).Should(BeEquivalentTo(0))
		took := time.Since(last)
		AddReportEntry("ignored paths: last request to replicas 0 under health checks", took.String())
		GinkgoWriter.Printf("hc: last request -> replicas 0 under health checks every 500 ms: %s (scaledownPeriod %s)\n", took, scaledown)

		mu.Lock()
		defer mu.Unlock()
		Expect(codes[http.StatusOK]).To(BeNumerically(">", 0), "health checks while warm are forwarded to the app")
		GinkgoWriter.Printf("health-check answers by status: %v\n", codes)
	})
})
