package endpoints_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

var _ = Describe("Cache readiness grace", func() {
	It("keeps a Service port's endpoints for the grace when all of them turn not ready at once, none terminating", func() {
		ctx := context.Background()
		ns := newNamespace(ctx)
		api := endpoints.ServiceKey{Namespace: ns, Service: "api", PortName: "web"}
		marker := endpoints.ServiceKey{Namespace: ns, Service: "marker", PortName: "web"}
		clk := clocktesting.NewFakeClock(time.Now())
		c, _ := startCache(endpoints.CacheOptions{ReadinessGrace: 15 * time.Second, Clock: clk})
		c.Track([]endpoints.ServiceKey{api, marker})
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())
		both := []string{"198.18.0.1:8080", "198.18.0.2:8080"}
		s := create(ctx, sliceFor(ns, "api-1", "api", "web", 8080, ready("198.18.0.1"), ready("198.18.0.2")))
		Eventually(addrs(c, api), 30*time.Second).Should(Equal(both))
		m := create(ctx, sliceFor(ns, "marker-1", "marker", "web", 8080))
		// seen waits until the watch delivered every change made before it: the marker's next change
		// comes after them on the same watch.
		markers := 0
		seen := func() {
			GinkgoHelper()
			markers++
			ip := []string{"198.18.1.1", "198.18.1.2", "198.18.1.3", "198.18.1.4"}[markers%4]
			setEndpoints(m, ready(ip))
			m = update(ctx, m)
			Eventually(addrs(c, marker), 30*time.Second).Should(Equal([]string{ip + ":8080"}))
		}

		By("the node controller marks every pod not ready (after an API server outage): kept")
		setEndpoints(s, notReady("198.18.0.1"), notReady("198.18.0.2"))
		s = update(ctx, s)
		seen()
		Expect(addrs(c, api)()).To(Equal(both))
		set, err := c.WaitReady(ctx, api)
		Expect(err).NotTo(HaveOccurred(), "a request does not wait")
		Expect(set.Endpoints).To(HaveLen(2))

		By("the kubelets report again: ready as before")
		clk.Step(5 * time.Second)
		setEndpoints(s, ready("198.18.0.1"), ready("198.18.0.2"))
		s = update(ctx, s)
		seen()
		Expect(addrs(c, api)()).To(Equal(both))

		By("not ready again, and still after the grace: none")
		setEndpoints(s, notReady("198.18.0.1"), notReady("198.18.0.2"))
		s = update(ctx, s)
		seen()
		Expect(addrs(c, api)()).To(Equal(both), "a new grace from this change")
		clk.Step(14 * time.Second)
		Consistently(addrs(c, api), 500*time.Millisecond).Should(Equal(both))
		clk.Step(time.Second)
		Eventually(addrs(c, api), 30*time.Second).Should(BeEmpty(), "the grace is over")

		By("a pod that leaves the slice or terminates is never kept")
		setEndpoints(s, ready("198.18.0.1"), ready("198.18.0.2"))
		s = update(ctx, s)
		Eventually(addrs(c, api), 30*time.Second).Should(Equal(both))
		setEndpoints(s, stopping("198.18.0.1"), notReady("198.18.0.2"))
		s = update(ctx, s)
		seen()
		Expect(addrs(c, api)()).To(Equal([]string{"198.18.0.2:8080"}), "only the one still listed and not terminating")
		setEndpoints(s, stopping("198.18.0.1"), stopping("198.18.0.2"))
		update(ctx, s)
		Eventually(addrs(c, api), 30*time.Second).Should(BeEmpty(), "scaled to zero: no grace")
	})

	It("has no grace unless asked", func() {
		ctx := context.Background()
		ns := newNamespace(ctx)
		api := endpoints.ServiceKey{Namespace: ns, Service: "api", PortName: "web"}
		c, _ := startCache(endpoints.CacheOptions{})
		c.Track([]endpoints.ServiceKey{api})
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())
		s := create(ctx, sliceFor(ns, "api-1", "api", "web", 8080, ready("198.18.0.1")))
		Eventually(addrs(c, api), 30*time.Second).Should(HaveLen(1))
		setEndpoints(s, notReady("198.18.0.1"))
		update(ctx, s)
		Eventually(addrs(c, api), 30*time.Second).Should(BeEmpty())
	})
})
