//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

var _ = Describe("Scaling 1->N through KEDA and the HPA", Ordered, func() {
	const scaledown = 15 * time.Second
	sc := setUpScenario("busy", hostApp("app", 0, scaledownAfter(scaledown), concurrencyTarget(5)))

	It("scales out under sustained concurrency and back to zero when it stops", func(ctx SpecContext) {
		// 40 requests in flight (each held 1s by the app) against a target of 5 per replica: the
		// HPA, reading the metric through KEDA's adapter, should want the maximum of 4.
		loadCtx, stop := context.WithCancel(ctx)
		done := make(chan localcluster.LoadResult, 1)
		go func() {
			defer GinkgoRecover()
			done <- f.Cluster.Load(loadCtx, proxyURL(sc.h, 0, "/busy?sleep=1s"), sc.host, 40, 40*90, 2*time.Minute)
		}()
		start := time.Now()
		Eventually(func() (int32, error) { return replicas(ctx, sc.ns, "app") }).
			WithTimeout(80 * time.Second).WithPolling(time.Second).Should(BeNumerically(">=", 3))
		AddReportEntry("1->N: load start to replicas >= 3", time.Since(start).String())

		var hpas autoscalingv2.HorizontalPodAutoscalerList
		Expect(f.Client.List(ctx, &hpas, client.InNamespace(sc.ns))).To(Succeed())
		Expect(hpas.Items).To(HaveLen(1))
		Expect(hpas.Items[0].Status.CurrentMetrics).NotTo(BeEmpty(), "the HPA read no metric from the adapter")
		stop()
		r := <-done
		GinkgoWriter.Println("load:", r)
		Expect(r.Codes).To(HaveKey(200))
		for code, n := range r.Codes {
			// Requests cut off by stopping the load are counted apart (Cancelled); everything else,
			// including a transport error while the load ran, must be a 200.
			Expect(code).To(Equal(200), fmt.Sprintf("%d answers with status %d (0: transport error: %v)", n, code, r.Errors))
		}

		last := time.Now()
		Eventually(func() (int32, error) { return replicas(ctx, sc.ns, "app") }).
			WithTimeout(scaledown + 2*time.Minute).WithPolling(time.Second).Should(BeEquivalentTo(0))
		AddReportEntry("N->0: last request to replicas 0", time.Since(last).String())
	})
})
