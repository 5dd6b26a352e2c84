//go:build e2e

package e2e

import (
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
)

var _ = Describe("Cold-start limits", Ordered, func() {
	const readiness = 4 * time.Second
	var (
		h  *framework.HTTPScale
		ns string
	)

	// neverReady pins the app's pods to a zone without nodes: woken, it stays Pending, never ready.
	neverReady := func(ctx SpecContext, name string) {
		updateDeployment(ctx, ns, name, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.NodeSelector = map[string]string{"topology.kubernetes.io/zone": "nowhere"}
		})
	}

	BeforeAll(func(ctx SpecContext) { h, ns, _ = scenario(ctx, "limits") })

	It("answers 503 with Retry-After beyond the queue limit and 504 when readiness times out", func(ctx SpecContext) {
		host := "queue." + ns + ".example"
		routedApp(ctx, ns, "queue", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.ColdStart = &httpscalev1alpha1.ColdStart{QueueLimit: ptr.To[int32](2)}
			s.Timeouts = &httpscalev1alpha1.Timeouts{Readiness: ptr.To(httpscalev1alpha1.Duration(readiness.String()))}
		})
		neverReady(ctx, "queue")

		type result struct {
			code       int
			retryAfter string
			took       time.Duration
		}
		results := make([]result, 5)
		var wg sync.WaitGroup
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t0 := time.Now()
				resp, err := f.Get(ctx, proxyURL(h, 0, "/"), host)
				if err != nil {
					return
				}
				resp.Body.Close()
				results[i] = result{resp.StatusCode, resp.Header.Get("Retry-After"), time.Since(t0)}
			}()
		}
		wg.Wait()
		byCode := map[int][]result{}
		for _, r := range results {
			byCode[r.code] = append(byCode[r.code], r)
		}
		Expect(byCode[http.StatusServiceUnavailable]).To(HaveLen(3), "rejected beyond the queue limit: %v", results)
		for _, r := range byCode[http.StatusServiceUnavailable] {
			Expect(r.retryAfter).NotTo(BeEmpty())
			Expect(r.took).To(BeNumerically("<", readiness), "a rejected request must not be held")
		}
		Expect(byCode[http.StatusGatewayTimeout]).To(HaveLen(2), "held until the readiness timeout: %v", results)
		for _, r := range byCode[http.StatusGatewayTimeout] {
			Expect(r.took).To(BeNumerically(">=", readiness-500*time.Millisecond))
		}
	})

	It("lets the fallback Service answer when readiness times out", func(ctx SpecContext) {
		fb, fbSvc := f.SampleApp(ns, "fallback", 1)
		Expect(f.Client.Create(ctx, fb)).To(Succeed())
		Expect(f.Client.Create(ctx, fbSvc)).To(Succeed())
		host := "fb." + ns + ".example"
		routedApp(ctx, ns, "primary", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.ColdStart = &httpscalev1alpha1.ColdStart{Fallback: &httpscalev1alpha1.FallbackService{
				Service: "fallback", Port: ptr.To[int32](80),
			}}
			s.Timeouts = &httpscalev1alpha1.Timeouts{Readiness: ptr.To(httpscalev1alpha1.Duration(readiness.String()))}
		})
		neverReady(ctx, "primary")
		Eventually(func() []string { return podIPs(ctx, ns, "fallback") }).WithContext(ctx).Should(HaveLen(1))

		t0 := time.Now()
		a, err := ask(ctx, h, 0, host, "/fb", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Status).To(Equal(http.StatusOK))
		Expect(podIPs(ctx, ns, "fallback")).To(ContainElement(a.PodIP))
		Expect(time.Since(t0)).To(BeNumerically(">=", readiness-500*time.Millisecond))
	})
})
