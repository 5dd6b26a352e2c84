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
		ns := suite.NewNamespace(ctx, "ep-")
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

	It("keeps only pods listed ready before, never a starting one; after the grace the cold-start probes decide", func() {
		ctx := context.Background()
		ns := suite.NewNamespace(ctx, "ep-")
		k := endpoints.ServiceKey{Namespace: ns, Service: "api", PortName: "web"}
		clk := clocktesting.NewFakeClock(time.Now())
		c, _ := startCache(endpoints.CacheOptions{ReadinessGrace: 15 * time.Second, Clock: clk})
		c.Track([]endpoints.ServiceKey{k})
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())
		pod := func(e epSpec, name string) epSpec { e.pod = name; return e }
		a := endpoints.Endpoint{IP: "198.18.0.1", Port: 8080, Pod: "api-a", PodUID: "uid-api-a"}
		b2 := endpoints.Endpoint{IP: "198.18.0.2", Port: 8080, Pod: "api-b2", PodUID: "uid-api-b2"}
		starting := endpoints.Endpoint{IP: "198.18.0.3", Port: 8080, Pod: "api-c", PodUID: "uid-api-c"}
		s := create(ctx, sliceFor(ns, "api-1", "api", "web", 8080, pod(ready(a.IP), "api-a"), pod(ready(b2.IP), "api-b")))
		Eventually(addrs(c, k), 30*time.Second).Should(Equal([]string{"198.18.0.1:8080", "198.18.0.2:8080"}))

		By("every pod turns not ready while a new pod starts and another pod took a kept address: only the pod listed ready before is kept")
		setEndpoints(s, pod(notReady(a.IP), "api-a"), pod(notReady(b2.IP), "api-b2"), pod(notReady(starting.IP), "api-c"))
		s = update(ctx, s)
		Eventually(func() []endpoints.Endpoint { return c.Listed(k).Pending }, 30*time.Second).Should(Equal([]endpoints.Endpoint{a, b2, starting}))
		Expect(addrs(c, k)()).To(Equal([]string{"198.18.0.1:8080"}), "not the starting pod, nor the new pod at an old address")
		Expect(c.Ready(k).Probed).To(BeFalse())
		l := c.Listed(k)
		Expect(l.Ready).To(BeNil(), "the kubelet's readiness is not faked")
		Expect(l.Answered).To(BeNil(), "kept endpoints are not reported as answered by a probe")

		By("the grace is over: requests wait, and a cold-start probe's answer serves a pod")
		clk.Step(15 * time.Second)
		Eventually(addrs(c, k), 30*time.Second).Should(BeEmpty())
		Expect(c.Answered(k, starting)).To(BeTrue())
		Expect(addrs(c, k)()).To(Equal([]string{"198.18.0.3:8080"}))
		Expect(c.Ready(k).Probed).To(BeTrue())
		Expect(c.Listed(k).Answered.Endpoints).To(Equal([]endpoints.Endpoint{starting}))

		By("the kubelet finds the new pod ready, then it turns not ready: kept, the old pods are not")
		setEndpoints(s, pod(notReady(a.IP), "api-a"), pod(notReady(b2.IP), "api-b2"), pod(ready(starting.IP), "api-c"))
		s = update(ctx, s)
		Eventually(func() *endpoints.Set { return c.Listed(k).Ready }, 30*time.Second).ShouldNot(BeNil())
		Expect(c.Ready(k).Probed).To(BeFalse())
		setEndpoints(s, pod(notReady(a.IP), "api-a"), pod(notReady(b2.IP), "api-b2"), pod(notReady(starting.IP), "api-c"))
		s = update(ctx, s)
		Eventually(func() *endpoints.Set { return c.Listed(k).Ready }, 30*time.Second).Should(BeNil())
		Expect(addrs(c, k)()).To(Equal([]string{"198.18.0.3:8080"}))
		Expect(c.Ready(k).Probed).To(BeFalse())

		By("a rollout: the old pod terminates while a new one starts: nothing kept, requests wait")
		setEndpoints(s, pod(ready(starting.IP), "api-c"))
		s = update(ctx, s)
		Eventually(addrs(c, k), 30*time.Second).Should(Equal([]string{"198.18.0.3:8080"}))
		setEndpoints(s, pod(stopping(starting.IP), "api-c"), pod(notReady("198.18.0.4"), "api-d"))
		update(ctx, s)
		Eventually(addrs(c, k), 30*time.Second).Should(BeEmpty())
		Expect(c.Listed(k).Pending).To(Equal([]endpoints.Endpoint{{IP: "198.18.0.4", Port: 8080, Pod: "api-d", PodUID: "uid-api-d"}}))
	})

	It("has no grace unless asked", func() {
		ctx := context.Background()
		ns := suite.NewNamespace(ctx, "ep-")
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
