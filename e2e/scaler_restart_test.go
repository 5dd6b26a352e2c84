//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

var _ = Describe("Scaler restart under load", Ordered, func() {
	const scaledown = 10 * time.Second
	sc := setUpScenario("restart", hostApp("app", 0, scaledownAfter(scaledown), concurrencyTarget(5)))

	It("does not scale the app down while the scaler is away or just back", func(ctx SpecContext) {
		loadCtx, stop := context.WithCancel(ctx)
		defer stop()
		go func() {
			defer GinkgoRecover()
			f.Cluster.Load(loadCtx, proxyURL(sc.h, 0, "/steady?sleep=1s"), sc.host, 20, 20*180, 2*time.Minute)
		}()
		Eventually(func() (int32, error) { return replicas(ctx, sc.ns, "app") }).
			WithTimeout(80 * time.Second).WithPolling(time.Second).Should(BeNumerically(">=", 2))

		By("scaling the scaler's Deployment to zero for longer than the scaledown period, then back to the chart's two")
		scaleScaler := func(n int) {
			_, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "scale", "deployment/httpscale-scaler", fmt.Sprintf("--replicas=%d", n))
			Expect(err).NotTo(HaveOccurred())
		}
		DeferCleanup(func(ctx SpecContext) {
			_, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "scale", "deployment/httpscale-scaler", "--replicas=2")
			Expect(err).NotTo(HaveOccurred())
		})
		scaleScaler(0)
		Eventually(func() ([]localcluster.Pod, error) {
			return f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=scaler")
		}).WithContext(ctx).Should(BeEmpty(), "no scaler pod left")
		Consistently(func() (int32, error) { return replicas(ctx, sc.ns, "app") }).
			WithTimeout(scaledown + 2*time.Second).WithPolling(500 * time.Millisecond).Should(BeNumerically(">=", 1))
		scaleScaler(2)
		Expect(f.Cluster.WaitChart(ctx)).To(Succeed())
		Consistently(func() (int32, error) { return replicas(ctx, sc.ns, "app") }).
			WithTimeout(scaledown + 10*time.Second).WithPolling(500 * time.Millisecond).Should(BeNumerically(">=", 1))

		By("restarting the scaler with kubectl rollout restart")
		_, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "rollout", "restart", "deployment/httpscale-scaler")
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Cluster.WaitChart(ctx)).To(Succeed())
		Consistently(func() (int32, error) { return replicas(ctx, sc.ns, "app") }).
			WithTimeout(scaledown + 10*time.Second).WithPolling(500 * time.Millisecond).Should(BeNumerically(">=", 1))
	})
})
