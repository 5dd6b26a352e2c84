//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/httpscale/httpscale/e2e/framework"
)

var _ = Describe("Scale from zero", Ordered, func() {
	var (
		h    *framework.HTTPScale
		ns   string
		host string
	)

	BeforeAll(func(ctx SpecContext) {
		h, ns, host = scenario(ctx, "cold")
		scaledApp(ctx, ns, "app", host, 600)
	})

	It("answers every one of 200 concurrent requests sent at zero exactly once", func(ctx SpecContext) {
		Expect(replicas(ctx, ns, "app")).To(BeEquivalentTo(0))

		watchCtx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		start := time.Now()
		scaled := watchReplicas(watchCtx, ns, "app", 1)

		const n = 200
		codes := make([]int, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := f.Get(ctx, proxyURL(h, i%len(h.Interceptors), fmt.Sprintf("/cold?rid=%d", i)), host)
				if err != nil {
					errs[i] = err
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				codes[i] = resp.StatusCode
			}()
		}
		wg.Wait()
		answered := time.Since(start)

		for i := range n {
			Expect(errs[i]).NotTo(HaveOccurred(), "request %d", i)
			Expect(codes[i]).To(Equal(http.StatusOK), "request %d", i)
		}
		var scaledAt time.Time
		Eventually(scaled).Should(Receive(&scaledAt))
		// Every pod counted what it saw; the app was scaled up and never down (scaledown 600 s).
		counts := requestCounts(ctx, ns, "app")
		Expect(counts).To(HaveLen(n), "requests that reached the app")
		for rid, c := range counts {
			Expect(c).To(BeEquivalentTo(1), "request %s reached the app %d times", rid, c)
		}
		AddReportEntry("scale from zero: first request to Deployment replicas >= 1", scaledAt.Sub(start).String())
		AddReportEntry("scale from zero: all 200 answered after", answered.String())
		GinkgoWriter.Printf("first request -> replicas>=1: %s; all %d answered after %s\n", scaledAt.Sub(start), n, answered)
	})
})
