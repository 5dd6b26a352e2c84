//go:build e2e

package e2e

import (
	"io"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

var _ = Describe("Scale to zero", Ordered, func() {
	const scaledown = 20 * time.Second
	var (
		h    *localcluster.HTTPScale
		ns   string
		host string
	)

	BeforeAll(func(ctx SpecContext) {
		h, ns, host = scenario(ctx, "idle")
		scaledApp(ctx, ns, "app", host, int32(scaledown.Seconds()))
	})

	It("keeps the app for the scaledown period after the last request, then scales it to zero", func(ctx SpecContext) {
		resp, err := f.Get(ctx, proxyURL(h, 0, "/wake"), host)
		Expect(err).NotTo(HaveOccurred())
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		last := time.Now()
		Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1))

		By("staying up while the scaledown period runs")
		// A few seconds short of the period, so that scaling down right on time does not count as early.
		Consistently(func() (int32, error) { return replicas(ctx, ns, "app") }).
			WithTimeout(scaledown - time.Since(last) - 3*time.Second).WithPolling(500 * time.Millisecond).
			Should(BeNumerically(">=", 1))

		By("reaching zero after it")
		Eventually(func() (int32, error) { return replicas(ctx, ns, "app") }).
			WithTimeout(scaledown + 90*time.Second).WithPolling(500 * time.Millisecond).
			Should(BeEquivalentTo(0))
		AddReportEntry("scale to zero: last request to replicas 0", time.Since(last).String())
		GinkgoWriter.Printf("last request -> replicas 0: %s (scaledownPeriod %s)\n", time.Since(last), scaledown)
	})
})
