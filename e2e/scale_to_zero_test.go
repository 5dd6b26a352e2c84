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
	"github.com/httpscale/httpscale/pkg/scaling"
)

// The bound on time to zero that docs/scaler.md ("Time to zero") states: from the end of the last
// request, not before scaledownPeriod + the scaler's active hold, and within that plus KEDA's
// pollingInterval (30 s by default; the ScaledObject leaves it unset). slack covers the scaler's
// poll cycle, KEDA's work at its tick and the Deployment controller.
const (
	kedaPollingInterval = 30 * time.Second
	slack               = 5 * time.Second
	// wakeHold is the scaler's --wake-hold default: a cold start keeps its app active this long.
	wakeHold = 5 * time.Second
)

var _ = Describe("Scale to zero", Ordered, func() {
	const scaledown = 20 * time.Second
	apps := []struct {
		name   string
		metric *httpscalev1alpha1.ScalingMetric
	}{
		{"conc", &httpscalev1alpha1.ScalingMetric{Concurrency: &httpscalev1alpha1.ConcurrencyMetric{TargetValue: 10}}},
		// A one-minute rate window: the app must not stay up for the window after its last request.
		{"rate", &httpscalev1alpha1.ScalingMetric{RequestRate: &httpscalev1alpha1.RequestRateMetric{TargetValue: 10, Window: "1m", Granularity: "1s"}}},
	}

	sc := setUpScenario("idle", func(ctx SpecContext, e *scenarioEnv) {
		for _, a := range apps {
			routedApp(ctx, e.ns, a.name, 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
				s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(a.name + "." + e.ns + ".example")}
				scaledownAfter(scaledown)(s)
				s.ScalingMetric = a.metric
			})
		}
	})

	It("keeps each app for the scaledown period after its last request, then scales it to zero within KEDA's polling interval", func(ctx SpecContext) {
		get := func(ctx context.Context, app, path string) {
			resp, err := f.Get(ctx, proxyURL(sc.h, 0, path), app+"."+sc.ns+".example")
			Expect(err).NotTo(HaveOccurred())
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(http.StatusOK))
		}
		var wg sync.WaitGroup
		for _, a := range apps {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				By(a.name + ": waking it from zero, then one warm request after the wake hold")
				get(ctx, a.name, "/wake")
				time.Sleep(wakeHold + time.Second)
				get(ctx, a.name, "/last")
				last := time.Now()
				Expect(replicas(ctx, sc.ns, a.name)).To(BeNumerically(">=", 1))

				By(a.name + ": staying up for the whole scaledown period")
				Consistently(func() (int32, error) { return replicas(ctx, sc.ns, a.name) }).
					WithTimeout(scaledown - time.Since(last)).WithPolling(500 * time.Millisecond).
					Should(BeNumerically(">=", 1))

				By(a.name + ": reaching zero within KEDA's polling interval after it")
				Eventually(func() (int32, error) { return replicas(ctx, sc.ns, a.name) }).
					WithTimeout(scaledown + scaling.DefaultActiveHold + kedaPollingInterval + slack - time.Since(last)).
					WithPolling(250 * time.Millisecond).
					Should(BeEquivalentTo(0))
				took := time.Since(last)
				AddReportEntry("scale to zero ("+a.name+"): last request to replicas 0", took.String())
				GinkgoWriter.Printf("%s: last request -> replicas 0: %s (scaledownPeriod %s, bound %s..%s)\n", a.name, took,
					scaledown, scaledown+scaling.DefaultActiveHold, scaledown+scaling.DefaultActiveHold+kedaPollingInterval+slack)
			}()
		}
		wg.Wait()
	})
})
