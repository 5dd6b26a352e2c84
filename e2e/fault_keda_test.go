//go:build e2e

package e2e

import (
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// KEDA's operator is away for a minute (stopped, then started again, as when its pod is rescheduled)
// while a warm app gets a request every 100 ms and two apps at zero get a request each. Nothing of
// httpscale's data path needs KEDA while an app is warm; a held request waits for KEDA to scale its
// app, so it is answered once KEDA is back, or at its readiness timeout with 504. Wakes work again
// afterwards.
var _ = Describe("Fault: KEDA's operator away for 60 s", Label("fault"), Ordered, func() {
	const (
		away       = 60 * time.Second
		shortReady = 15 * time.Second
		longReady  = 150 * time.Second
	)
	sc := setUpScenario("kedaaway",
		hostApp("warm", 2, warmBounds(2)),
		heldApps(shortReady, longReady))

	It("serves warm apps throughout, answers or times out held requests, and wakes apps once KEDA is back", func(ctx SpecContext) {
		svc := sc.h.InterceptorService
		Eventually(statusOf(ctx, serviceURL(svc, "/warmup"), sc.host)).WithContext(ctx).Should(Equal(http.StatusOK))
		load := startSteady(ctx, serviceURL(svc, "/steady"), sc.host, 100*time.Millisecond, 5*time.Second)
		time.Sleep(3 * time.Second)

		By("stopping KEDA's operator")
		stopped := time.Now()
		Expect(f.Cluster.StopProcess("keda-operator")).To(Succeed())
		restarted := false
		DeferCleanup(func() {
			if !restarted {
				_, _ = f.Cluster.StartKEDAOperator()
			}
		})
		time.Sleep(5 * time.Second)
		short, long := sendHeld(ctx, svc, sc.host)
		time.Sleep(away - time.Since(stopped))
		By("starting KEDA's operator again")
		_, err := f.Cluster.StartKEDAOperator()
		Expect(err).NotTo(HaveOccurred())
		restarted = true
		back := time.Now()

		expectHeld("KEDA away", short, long, shortReady, longReady, back)

		By("a new wake after KEDA is back")
		wake := getShot(ctx, f.HTTP, serviceURL(svc, "/after"), "after."+sc.host)
		report("KEDA away: a wake after it is back", "%s, %s after KEDA's operator started again", wake, wake.done.Sub(back).Round(time.Millisecond))
		Expect(wake.ok()).To(BeTrue(), "%s", wake)
		Expect(wake.coldStart).To(BeTrue())

		shots := load.stopSteady()
		_, summary := loadReport(shots)
		report("KEDA away: warm traffic through the interceptor Service", "%s (KEDA's operator away %s)", summary, back.Sub(stopped).Round(time.Millisecond))
		expectShotsOK("warm requests while KEDA's operator was away and after", shots)
	})
})
