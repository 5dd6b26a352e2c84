//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/sessioncookie"
)

// spec.sessionPersistence on the chart's pods: a client that keeps its cookie stays on one pod of a
// 3-pod app whichever interceptor it reaches (the interceptors keep no state; the key is the fleet's,
// from the Secret the operator filled), and moves to another pod, with a new cookie, when its pod is
// deleted.
var _ = Describe("Session persistence", func() {
	It("keeps a client on one of three pods across 100 requests through both interceptors, and moves it when that pod is deleted", func(ctx SpecContext) {
		h, ns, host := scenario(ctx, "session")
		const cookieName = "cart-pod"
		routedApp(ctx, ns, "cart", 3, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.PathPrefixes = []httpscalev1alpha1.PathPrefix{"/cart"}
			s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](3), Max: ptr.To[int32](3)}
			s.SessionPersistence = &httpscalev1alpha1.SessionPersistence{CookieName: cookieName, Lifetime: ptr.To(httpscalev1alpha1.Duration("1h"))}
		})
		// A pod has its IP from its sandbox on, before its readiness probe passes: the spec waits for
		// the three endpoints to be ready in the EndpointSlice, and then (below) for each interceptor
		// to balance over them, before it looks at where requests go. (Sent within a second of the
		// pods' start, requests all reach the one pod ready so far: a pin proves nothing, and the
		// check that requests without a cookie are spread fails.)
		Eventually(func() []string { return podIPs(ctx, ns, "cart") }).WithContext(ctx).Should(HaveLen(3))
		withIPs := time.Now()
		Eventually(func() []endpoints.Endpoint { return readyEndpoints(ctx, ns, "cart").Endpoints }).WithContext(ctx).WithPolling(50 * time.Millisecond).Should(HaveLen(3))
		AddReportEntry("three pod IPs -> three ready endpoints in the EndpointSlice", time.Since(withIPs).Round(time.Millisecond).String())
		// try is one GET through the interceptor of zone z (a new connection each time), with the
		// cookie when it is not empty; it returns the app's answer and the session cookie set, if any.
		try := func(g Gomega, z int, cookie string) (answer, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL(h, z, "/cart/items"), nil)
			g.Expect(err).NotTo(HaveOccurred())
			req.Host, req.Close = host, true
			if cookie != "" {
				req.Header.Set("Cookie", cookie)
			}
			resp, err := f.HTTP.Do(req)
			g.Expect(err).NotTo(HaveOccurred())
			set := ""
			for _, sc := range resp.Header.Values("Set-Cookie") {
				if strings.HasPrefix(sc, cookieName+"=") {
					set, _, _ = strings.Cut(sc, ";")
					g.Expect(sc).To(HaveSuffix("; Path=/cart; Max-Age=3600; HttpOnly; SameSite=Lax"))
				}
			}
			a, err := readAnswer(resp)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Status).To(Equal(http.StatusOK))
			return a, set
		}
		send := func(z int, cookie string) (answer, string) {
			GinkgoHelper()
			return try(Default, z, cookie)
		}

		By("the operator wrote the fleet's session key into the chart's Secret")
		Eventually(func(g Gomega) {
			var s corev1.Secret
			g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: localcluster.Namespace, Name: "httpscale-session-keys"}, &s)).To(Succeed())
			_, err := sessioncookie.ParseKeys(s.Data[sessioncookie.SecretKey])
			g.Expect(err).NotTo(HaveOccurred())
		}).WithContext(ctx).Should(Succeed())
		By("both interceptors honour each other's cookies (the kubelet has refreshed the mounted Secret)")
		start := time.Now()
		Eventually(func(g Gomega) {
			for z := range h.Interceptors {
				a, cookie := try(g, z, "")
				g.Expect(cookie).NotTo(BeEmpty())
				b, renewed := try(g, 1-z, cookie)
				g.Expect(b.PodIP).To(Equal(a.PodIP), "a cookie of interceptor %d at interceptor %d", z, 1-z)
				g.Expect(renewed).To(BeEmpty())
			}
		}).WithContext(ctx).WithTimeout(4 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		AddReportEntry("session keys shared by both interceptors after", time.Since(start).Round(time.Second).String())

		By("each interceptor balances over the ready endpoints it should")
		listed := time.Now()
		// Without a cookie an interceptor balances over Candidates of the app's ready endpoints for
		// its zone (the chart's interceptors are zone-aware): its zone's, or all when its zone has
		// none. Until then a request may go to an endpoint a cold-start probe found answering before
		// the kubelet's readiness reached the EndpointSlice. The watch brings the EndpointSlice to an
		// interceptor within milliseconds; 30 s is far beyond that, so an endpoint watch that did not
		// recover (after an API server outage, say) fails here rather than being waited out.
		Eventually(func(g Gomega) {
			set := readyEndpoints(ctx, ns, "cart")
			g.Expect(set.Endpoints).To(HaveLen(3))
			for z, ic := range h.Interceptors {
				cands, _ := endpoints.Candidates(set, ic.Zone, true)
				var want []string
				for _, e := range cands {
					want = append(want, e.IP)
				}
				seen := map[string]bool{}
				for range 6 { // round robin: at least twice over at most three candidates
					a, _ := try(g, z, "")
					seen[a.PodIP] = true
				}
				g.Expect(slices.Sorted(maps.Keys(seen))).To(ConsistOf(want), "interceptor %d (%s) balanced over these, not over its candidates", z, ic.Zone)
			}
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		AddReportEntry("three ready endpoints -> every interceptor balances over its candidates", time.Since(listed).Round(time.Millisecond).String())

		By("100 requests with the cookie, alternating between the interceptors: one pod")
		first, cookie := send(0, "")
		Expect(cookie).NotTo(BeEmpty())
		pinned := first.PodIP
		for i := range 100 {
			a, set := send(i%2, cookie)
			Expect(a.PodIP).To(Equal(pinned), "request %d left the pinned pod", i)
			Expect(set).To(BeEmpty(), "request %d got a new cookie although its own named a ready pod", i)
		}
		By("without the cookie requests are spread: the pin is the cookie's doing")
		spread := map[string]bool{}
		for i := range 12 {
			a, _ := send(i%2, "")
			spread[a.PodIP] = true
		}
		Expect(len(spread)).To(BeNumerically(">=", 2), "requests without a cookie all reached %v", spread)

		By("deleting the pinned pod: the client moves to another pod with a new cookie, and stays there")
		var pod corev1.Pod
		var pods corev1.PodList
		Expect(f.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "cart"})).To(Succeed())
		for _, p := range pods.Items {
			if p.Status.PodIP == pinned {
				pod = p
			}
		}
		Expect(pod.Name).NotTo(BeEmpty())
		deleted := time.Now()
		Expect(f.Client.Delete(ctx, &pod)).To(Succeed())
		var moved answer
		var newCookie string
		Eventually(func(g Gomega) {
			a, set := try(g, 0, cookie)
			g.Expect(a.PodIP).NotTo(Equal(pinned))
			g.Expect(set).NotTo(BeEmpty())
			moved, newCookie = a, set
		}).WithContext(ctx).WithPolling(100 * time.Millisecond).Should(Succeed())
		AddReportEntry("pinned pod deleted -> client on another pod", time.Since(deleted).Round(time.Millisecond).String())
		Expect(newCookie).NotTo(Equal(cookie))
		for i := range 20 {
			a, set := send(i%2, newCookie)
			Expect(a.PodIP).To(Equal(moved.PodIP), "after the move, request %d left the new pod", i)
			Expect(set).To(BeEmpty())
		}
		fmt.Fprintf(GinkgoWriter, "pinned to %s, moved to %s after %s was deleted\n", pinned, moved.PodIP, pod.Name)
	})
})
