package endpoints_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

var _ = Describe("Starting endpoints", func() {
	It("are listed with their pod, served once answered for, and never once terminating or ready", func() {
		ctx := context.Background()
		ns := suite.NewNamespace(ctx, "ep-")
		k := endpoints.ServiceKey{Namespace: ns, Service: "shop", PortName: "web"}
		c, _ := startCache(endpoints.CacheOptions{})
		c.Track([]endpoints.ServiceKey{k})
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())

		l := c.Listed(k)
		s := sliceFor(ns, "shop-1", "shop", "web", 8080, notReady("198.18.0.1"), notReady("198.18.0.2"))
		s.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "shop-a", UID: "ua"}
		s.Endpoints[1].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: "elsewhere", Name: "victim", UID: "uv"}
		s = create(ctx, s)
		Eventually(l.Changed, 30*time.Second).Should(BeClosed())
		starting := endpoints.Endpoint{IP: "198.18.0.1", Port: 8080, Pod: "shop-a", PodUID: "ua"}
		Eventually(func() []endpoints.Endpoint { return c.Listed(k).Pending }, 30*time.Second).Should(Equal([]endpoints.Endpoint{
			starting,
			{IP: "198.18.0.2", Port: 8080}, // a targetRef to another namespace names no pod
		}))
		Expect(c.Ready(k)).To(BeNil())

		waiter := make(chan *endpoints.Set, 1)
		go func() {
			set, _ := c.WaitReady(ctx, k)
			waiter <- set
		}()
		Expect(c.Answered(k, starting)).To(BeTrue())
		var got *endpoints.Set
		Eventually(waiter).Should(Receive(&got))
		Expect(got.Probed).To(BeTrue())
		Expect(got.Endpoints).To(Equal([]endpoints.Endpoint{starting}))

		By("dropping it the moment it turns terminating")
		s.Endpoints[0].Conditions.Terminating = ptr.To(true)
		s = update(ctx, s)
		Eventually(func() *endpoints.Set { return c.Ready(k) }, 30*time.Second).Should(BeNil())
		Expect(c.Listed(k).Pending).To(Equal([]endpoints.Endpoint{{IP: "198.18.0.2", Port: 8080}}))

		By("following the kubelet once an endpoint is listed ready")
		s.Endpoints[0].Conditions.Terminating = nil
		s = update(ctx, s)
		Eventually(func() []endpoints.Endpoint { return c.Listed(k).Pending }, 30*time.Second).Should(HaveLen(2))
		Expect(c.Answered(k, starting)).To(BeTrue())
		s.Endpoints[1].Conditions.Ready = ptr.To(true)
		update(ctx, s)
		Eventually(func() []string { return addrsOf(c.Ready(k)) }, 30*time.Second).Should(Equal([]string{"198.18.0.2:8080"}),
			"only the endpoint the kubelet found ready: the answered one is not served next to it")
		Expect(c.Ready(k).Probed).To(BeFalse())
		Expect(c.Answered(k, starting)).To(BeFalse(), "nothing is answered for while an endpoint is ready")
	})
})

func addrsOf(s *endpoints.Set) []string {
	if s == nil {
		return nil
	}
	out := make([]string, len(s.Endpoints))
	for i, e := range s.Endpoints {
		out[i] = e.Addr()
	}
	return out
}
