package endpoints_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/routing/routingtest"
	"github.com/httpscale/httpscale/pkg/testenv"
)

var _ = Describe("Cache", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = suite.NewNamespace(ctx, "ep-")
	})

	It("follows a routed Service's ready endpoints on the named port, down to zero", func() {
		web := endpoints.ServiceKey{Namespace: ns, Service: "shop", PortName: "web"}
		metrics := endpoints.ServiceKey{Namespace: ns, Service: "shop", PortName: "metrics"}
		c, _ := startCache(endpoints.CacheOptions{})
		c.Track([]endpoints.ServiceKey{web})
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())
		Expect(c.ReadyCheck(nil)).To(Succeed())

		waiter := make(chan *endpoints.Set, 1)
		go func() {
			s, _ := c.WaitReady(ctx, web)
			waiter <- s
		}()
		s := sliceFor(ns, "shop-1", "shop", "web", 8080, notReady("198.18.0.1"))
		s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr.To("metrics"), Port: ptr.To[int32](9090)})
		s = create(ctx, s)
		Consistently(waiter, 500*time.Millisecond).ShouldNot(Receive(), "no endpoint is ready yet")
		Expect(c.Ready(web)).To(BeNil())

		setEndpoints(s, ready("198.18.0.1"), notReady("198.18.0.2"))
		s = update(ctx, s)
		var got *endpoints.Set
		Eventually(waiter, 30*time.Second).Should(Receive(&got))
		Expect(got.Key).To(Equal(web))
		Expect(got.Endpoints).To(Equal([]endpoints.Endpoint{{IP: "198.18.0.1", Port: 8080}}))

		// A second slice of the same Service adds its endpoints; a slice of an untracked Service
		// does not.
		create(ctx, sliceFor(ns, "shop-2", "shop", "web", 8080, ready("198.18.0.3")))
		create(ctx, sliceFor(ns, "other-1", "other", "web", 8080, ready("198.18.0.4")))
		Eventually(addrs(c, web), 30*time.Second).Should(Equal([]string{"198.18.0.1:8080", "198.18.0.3:8080"}))

		// Tracking another port of the same Service reuses the watch and sees its port at once.
		c.Track([]endpoints.ServiceKey{web, metrics})
		Expect(addrs(c, metrics)()).To(Equal([]string{"198.18.0.1:9090"}))

		setEndpoints(s, notReady("198.18.0.1"))
		update(ctx, s)
		Expect(cs.DiscoveryV1().EndpointSlices(ns).Delete(ctx, "shop-2", metav1.DeleteOptions{})).To(Succeed())
		Eventually(addrs(c, web), 30*time.Second).Should(BeEmpty())
		Expect(c.Ready(metrics)).To(BeNil())
		Expect(c.CachedSlices()).To(Equal(1), "only shop-1: other-1 belongs to an untracked Service, shop-2 is gone")
	})

	It("keeps what routing reads of a slice: zones, hints and pods; a slice relabelled to another Service leaves the first", func() {
		shop := endpoints.ServiceKey{Namespace: ns, Service: "shop", PortName: "web"}
		cart := endpoints.ServiceKey{Namespace: ns, Service: "cart", PortName: "web"}
		c, _ := startCache(endpoints.CacheOptions{})
		c.Track([]endpoints.ServiceKey{shop, cart}) // one watch covers both
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())

		a := ready("198.18.0.1")
		a.zone, a.forZones, a.pod = "z1", []string{"z1", "z2"}, "shop-a"
		s := create(ctx, sliceFor(ns, "moving", "shop", "web", 8080, a, notReady("198.18.0.2"), stopping("198.18.0.3")))
		want := endpoints.Endpoint{IP: "198.18.0.1", Port: 8080, Zone: "z1", ForZones: []string{"z1", "z2"}, Pod: "shop-a", PodUID: "uid-shop-a"}
		Eventually(func() *endpoints.Set { return c.Ready(shop) }, 30*time.Second).Should(Equal(&endpoints.Set{Key: shop, Endpoints: []endpoints.Endpoint{want}}))
		Expect(c.Listed(shop).Pending).To(Equal([]endpoints.Endpoint{{IP: "198.18.0.2", Port: 8080}}), "the terminating one is neither")

		s.Labels[discoveryv1.LabelServiceName] = "cart"
		update(ctx, s)
		Eventually(addrs(c, cart), 30*time.Second).Should(Equal([]string{"198.18.0.1:8080"}))
		Expect(c.Ready(shop)).To(BeNil(), "the endpoints left with the slice")
		Expect(c.Listed(shop).Pending).To(BeEmpty())
		Expect(c.CachedSlices()).To(Equal(1))
	})

	It("never takes the operator's Serve-mode redirect slice for the app's endpoints", func() {
		k := endpoints.ServiceKey{Namespace: ns, Service: "shop", PortName: "http"}
		c, _ := startCache(endpoints.CacheOptions{})
		c.Track([]endpoints.ServiceKey{k})
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())

		// The redirect lists the interceptors on the Service's port name: were it read, a held request
		// would be forwarded to an interceptor, which would hold it again, in a loop.
		redirect := sliceFor(ns, "shop-httpscale", "shop", "http", 8080, ready("198.18.1.1"), ready("198.18.1.2"))
		redirect.Labels[discoveryv1.LabelManagedBy] = endpoints.RedirectManagedBy
		create(ctx, redirect)
		Consistently(addrs(c, k), time.Second).Should(BeEmpty(), "the redirect's interceptor addresses are not the app's")

		create(ctx, sliceFor(ns, "shop-abcde", "shop", "http", 8080, ready("198.18.0.1")))
		Eventually(addrs(c, k), 30*time.Second).Should(Equal([]string{"198.18.0.1:8080"}))
		Expect(c.CachedSlices()).To(Equal(1), "the redirect slice is not even watched")
	})

	It("wakes a waiter within milliseconds of an endpoint turning ready", func() {
		k := endpoints.ServiceKey{Namespace: ns, Service: "wake"}
		c, _ := startCache(endpoints.CacheOptions{})
		c.Track([]endpoints.ServiceKey{k})
		s := create(ctx, sliceFor(ns, "wake-1", "wake", "", 80, notReady("198.18.0.1")))
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())

		const rounds = 100
		var fromRequest, fromResponse []time.Duration
		for range rounds {
			setEndpoints(s, notReady("198.18.0.1"))
			s = update(ctx, s)
			Eventually(c.Ready).WithArguments(k).WithTimeout(30 * time.Second).WithPolling(time.Millisecond).Should(BeNil())

			woke := make(chan time.Time, 1)
			waiting := make(chan struct{})
			go func() {
				close(waiting)
				if _, err := c.WaitReady(ctx, k); err == nil {
					woke <- time.Now()
				}
			}()
			<-waiting
			setEndpoints(s, ready("198.18.0.1"))
			sent := time.Now()
			s = update(ctx, s)
			answered := time.Now()
			var at time.Time
			Eventually(woke, 30*time.Second).Should(Receive(&at))
			fromRequest = append(fromRequest, at.Sub(sent))
			fromResponse = append(fromResponse, at.Sub(answered))
		}
		slices.Sort(fromRequest)
		slices.Sort(fromResponse)
		report := fmt.Sprintf("%d rounds: slice update request -> waiter woken p50 %v p99 %v max %v; "+
			"relative to the update's response (negative: woken before the writer got its answer) p50 %v p99 %v",
			rounds, percentile(fromRequest, 0.5), percentile(fromRequest, 0.99), fromRequest[rounds-1],
			percentile(fromResponse, 0.5), percentile(fromResponse, 0.99))
		AddReportEntry("wake latency", report)
		GinkgoWriter.Println(report)
		Expect(percentile(fromRequest, 0.99)).To(BeNumerically("<", 2*time.Second))
	})

	It("holds only the slices of routed Services among 10,000 unrelated ones", func() {
		noiseNS := suite.NewNamespace(ctx, "ep-")
		keys := []endpoints.ServiceKey{{Namespace: ns, Service: "a"}, {Namespace: ns, Service: "b"}, {Namespace: ns, Service: "c"}}
		for i, k := range keys {
			create(ctx, sliceFor(ns, k.Service+"-1", k.Service, "", 80, ready(fmt.Sprintf("198.18.0.%d", i+1))))
		}
		c, reg := startCache(endpoints.CacheOptions{})
		c.Track(keys)
		for _, k := range keys {
			Eventually(c.Ready).WithArguments(k).WithTimeout(30 * time.Second).ShouldNot(BeNil())
		}
		before := testenv.HeapInUse()

		// 10,000 slices of 10,000 other Services: half beside the routed ones, half elsewhere.
		const noise = 10000
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				defer GinkgoRecover()
				for i := int(next.Add(1)) - 1; i < noise; i = int(next.Add(1)) - 1 {
					target := ns
					if i%2 == 1 {
						target = noiseNS
					}
					svc := fmt.Sprintf("unrelated-%d", i)
					ip := fmt.Sprintf("198.18.%d.%d", 1+i/250, 1+i%250)
					create(ctx, sliceFor(target, svc, svc, "http", 8080, ready(ip)))
				}
			})
		}
		wg.Wait()
		GinkgoWriter.Printf("created %d unrelated EndpointSlices in %v\n", noise, time.Since(start))

		// A change to a routed Service after the noise still arrives: the watches are live and had
		// every chance to deliver unrelated slices first.
		s, err := cs.DiscoveryV1().EndpointSlices(ns).Get(ctx, "a-1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		setEndpoints(s, ready("198.18.0.1"), ready("198.18.0.99"))
		update(ctx, s)
		Eventually(addrs(c, keys[0]), 30*time.Second).Should(Equal([]string{"198.18.0.1:80", "198.18.0.99:80"}))

		Expect(c.CachedSlices()).To(Equal(3))
		Expect(metricValue(reg, endpoints.MetricCachedSlices)).To(Equal(3.0))
		Expect(metricValue(reg, endpoints.MetricWatches)).To(Equal(1.0))
		filtered := int64(testenv.HeapInUse()) - int64(before)

		// For scale: what an informer on every EndpointSlice of the cluster holds.
		informerCtx, stop := context.WithCancel(ctx)
		all := discoveryinformers.NewEndpointSliceInformer(cs, metav1.NamespaceAll, 0, cache.Indexers{})
		go all.RunWithContext(informerCtx)
		Expect(cache.WaitForCacheSync(informerCtx.Done(), all.HasSynced)).To(BeTrue())
		unfilteredCount := len(all.GetStore().ListKeys())
		unfiltered := int64(testenv.HeapInUse()) - int64(before)
		stop()

		report := fmt.Sprintf("heap growth with %d unrelated EndpointSlices: endpoint cache %+d KiB (%d slices held); "+
			"an unfiltered informer %+d KiB (%d slices held)", noise, filtered/1024, c.CachedSlices(), unfiltered/1024, unfilteredCount)
		AddReportEntry("memory", report)
		GinkgoWriter.Println(report)
		Expect(unfilteredCount).To(BeNumerically(">=", noise+3))
		Expect(filtered).To(BeNumerically("<", unfiltered/10), "the cache must not grow with unrelated slices")
	})

	It("costs a bounded amount per namespace it watches", func() {
		const namespaces = 100
		keys := make([]endpoints.ServiceKey, namespaces)
		for i := range keys {
			n := suite.NewNamespace(ctx, "ep-")
			keys[i] = endpoints.ServiceKey{Namespace: n, Service: "app"}
			create(ctx, sliceFor(n, "app-1", "app", "", 80, ready(fmt.Sprintf("198.18.2.%d", i+1))))
		}
		c, reg := startCache(endpoints.CacheOptions{})
		c.Track(nil)
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())
		heapBefore, goroutinesBefore := testenv.HeapInUse(), runtime.NumGoroutine()
		c.Track(keys)
		for _, k := range keys {
			Eventually(c.Ready).WithArguments(k).WithTimeout(30 * time.Second).ShouldNot(BeNil())
		}
		Expect(metricValue(reg, endpoints.MetricWatches)).To(Equal(float64(namespaces)))
		heapPer := (int64(testenv.HeapInUse()) - int64(heapBefore)) / namespaces
		goroutinesPer := float64(runtime.NumGoroutine()-goroutinesBefore) / namespaces
		report := fmt.Sprintf("%d namespaces with one routed Service each: %d watches, %.1f goroutines and %d KiB heap per watch",
			namespaces, namespaces, goroutinesPer, heapPer/1024)
		AddReportEntry("per-namespace cost", report)
		GinkgoWriter.Println(report)
		// A Reflector and its watch stream: 4 goroutines and 14 KiB (a SharedIndexInformer per watch
		// took 9 and 40 KiB).
		Expect(goroutinesPer).To(BeNumerically("<=", 5))
		Expect(heapPer).To(BeNumerically("<", 28<<10))
	})

	It("moves a namespace's Services between watches as they grow and shrink, keeping endpoints meanwhile", func() {
		const n = 100
		keys := make([]endpoints.ServiceKey, n)
		for i := range keys {
			keys[i] = endpoints.ServiceKey{Namespace: ns, Service: fmt.Sprintf("svc-%d", i), PortName: "http"}
			create(ctx, sliceFor(ns, keys[i].Service, keys[i].Service, "http", 8080, ready(fmt.Sprintf("198.18.1.%d", i+1))))
		}
		c, reg := startCache(endpoints.CacheOptions{})
		c.Track(keys[:10])
		for _, k := range keys[:10] {
			Eventually(c.Ready).WithArguments(k).WithTimeout(30 * time.Second).ShouldNot(BeNil())
		}

		// A change undone before its watch has listed leaves the watch in use alone.
		c.Track(keys[:20])
		c.Track(keys[:10])
		Expect(metricValue(reg, endpoints.MetricWatches)).To(Equal(1.0))

		// Watch the first ten continuously while the watches are replaced.
		var lost atomic.Int64
		watchCtx, stopWatching := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for watchCtx.Err() == nil {
				for _, k := range keys[:10] {
					if c.Ready(k) == nil {
						lost.Add(1)
					}
				}
				runtime.Gosched()
			}
		}()

		c.Track(keys) // 100 Services: two watches
		for _, k := range keys {
			Eventually(c.Ready).WithArguments(k).WithTimeout(30 * time.Second).ShouldNot(BeNil())
		}
		Eventually(func() float64 { return metricValue(reg, endpoints.MetricWatches) }, 30*time.Second).Should(Equal(2.0))
		Eventually(c.CachedSlices, 30*time.Second).Should(Equal(n))

		c.Track(keys[:10]) // back to one watch
		Eventually(func() float64 { return metricValue(reg, endpoints.MetricWatches) }, 30*time.Second).Should(Equal(1.0))
		Eventually(c.CachedSlices, 30*time.Second).Should(Equal(10))
		stopWatching()
		<-done
		Expect(lost.Load()).To(BeZero(), "a tracked Service lost its endpoints while its watch was replaced")
		Expect(c.Ready(keys[50])).To(BeNil(), "an untracked Service has no endpoints")

		// The cache still follows changes through the new watch.
		s, err := cs.DiscoveryV1().EndpointSlices(ns).Get(ctx, "svc-3", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		setEndpoints(s, notReady("198.18.1.4"))
		update(ctx, s)
		Eventually(c.Ready).WithArguments(keys[3]).WithTimeout(30 * time.Second).Should(BeNil())
	})

	It("tracks the targets and cold-start fallbacks of a routing table", func() {
		t, err := routing.NewTable([]routing.Entry{
			{Namespace: ns, Name: "shop", Hosts: []string{"shop.example.com"}, Service: "shop", Port: 80, PortName: "http",
				ColdStart: routing.ColdStart{Fallback: &routing.Backend{Service: "sorry", Port: 80}}},
			{Namespace: ns, Name: "blog", Hosts: []string{"blog.example.com"}, Service: "blog", Port: 80},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(endpoints.KeysFromTable(t)).To(ConsistOf(
			endpoints.ServiceKey{Namespace: ns, Service: "shop", PortName: "http"},
			endpoints.ServiceKey{Namespace: ns, Service: "sorry"},
			endpoints.ServiceKey{Namespace: ns, Service: "blog"},
		))
		create(ctx, sliceFor(ns, "shop-1", "shop", "http", 8080, ready("198.18.0.1")))
		create(ctx, sliceFor(ns, "sorry-1", "sorry", "", 8000, ready("198.18.0.2")))
		c, _ := startCache(endpoints.CacheOptions{})
		c.OnTable(t)
		Eventually(addrs(c, endpoints.ServiceKey{Namespace: ns, Service: "shop", PortName: "http"}), 30*time.Second).
			Should(Equal([]string{"198.18.0.1:8080"}))
		Eventually(addrs(c, endpoints.ServiceKey{Namespace: ns, Service: "sorry"}), 30*time.Second).
			Should(Equal([]string{"198.18.0.2:8000"}))
	})

	It("follows tables derived from one another by their changes: Services of new entries tracked, of removed ones dropped, shared ones kept", func() {
		st, err := routingtest.New(4) // many small shards: one change is a small Diff
		Expect(err).NotTo(HaveOccurred())
		// Buckets enough that no shard of these ~100 keys fills up: a key landing in a full shard
		// doubles the buckets, and a table of other buckets is read whole, not derived. Which shard a
		// key lands in depends on the namespace, a new one every run: with 32 buckets the new entry
		// filled one for 26 of 400 namespace names, with 4096 for none of 2,000.
		st.Grow(4096)
		put := func(name, svc string) {
			Expect(st.Put(routing.Entry{Namespace: ns, Name: name, Hosts: []string{name + ".example.com"}, Service: svc, Port: 80})).To(Succeed())
		}
		next := func() *routing.Table {
			t, err := st.Next()
			Expect(err).NotTo(HaveOccurred())
			return t
		}
		for i := range 100 {
			put(fmt.Sprintf("app-%d", i), "shared")
		}
		put("solo", "solo")
		key := func(svc string) endpoints.ServiceKey { return endpoints.ServiceKey{Namespace: ns, Service: svc} }
		create(ctx, sliceFor(ns, "shared-1", "shared", "", 8080, ready("198.18.0.1")))
		create(ctx, sliceFor(ns, "solo-1", "solo", "", 8080, ready("198.18.0.2")))
		create(ctx, sliceFor(ns, "fresh-1", "fresh", "", 8080, ready("198.18.0.3")))
		c, _ := startCache(endpoints.CacheOptions{})
		first := next()
		c.OnTable(first)
		Eventually(addrs(c, key("solo")), 30*time.Second).Should(Equal([]string{"198.18.0.2:8080"}))
		Expect(addrs(c, key("shared"))()).To(Equal([]string{"198.18.0.1:8080"}))
		Expect(c.Ready(key("fresh"))).To(BeNil(), "not routed yet")

		// One version: a new entry on a new Service, the solo entry gone, one of the shared ones gone.
		put("new", "fresh")
		st.Remove(ns + "/solo")
		st.Remove(ns + "/app-7")
		second := next()
		_, _, derived := second.Diff(first)
		Expect(derived).To(BeTrue(), "the test means to exercise a table derived from the one before")
		c.OnTable(second)
		Eventually(addrs(c, key("fresh")), 30*time.Second).Should(Equal([]string{"198.18.0.3:8080"}))
		Expect(c.Ready(key("solo"))).To(BeNil(), "no entry routes to solo any more")
		Expect(addrs(c, key("shared"))()).To(Equal([]string{"198.18.0.1:8080"}), "99 entries still route to shared")
		Eventually(c.CachedSlices, 30*time.Second).Should(Equal(2), "shared-1 and fresh-1")

		// The same keys as a full pass over the table would track.
		want := endpoints.KeysFromTable(second)
		Expect(want).To(ConsistOf(key("shared"), key("fresh")))
		for _, k := range want {
			Expect(c.Ready(k)).NotTo(BeNil())
		}
	})

	It("learns its zone from its Node and prefers endpoints there, honouring topology hints", func() {
		node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			GenerateName: "node-", Labels: map[string]string{corev1.LabelTopologyZone: "zone-a"}}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		bare, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "node-"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			Expect(cs.CoreV1().Nodes().Delete(ctx, node.Name, metav1.DeleteOptions{})).To(Succeed())
			Expect(cs.CoreV1().Nodes().Delete(ctx, bare.Name, metav1.DeleteOptions{})).To(Succeed())
		})
		zone, err := endpoints.ResolveZone(ctx, cs, "", node.Name)
		Expect(err).NotTo(HaveOccurred())
		Expect(zone).To(Equal("zone-a"))
		Expect(endpoints.ResolveZone(ctx, cs, "zone-x", node.Name)).To(Equal("zone-x"), "configuration wins")
		Expect(endpoints.ResolveZone(ctx, cs, "", "")).To(Equal(""), "no node name: zone unknown")
		Expect(endpoints.ResolveZone(ctx, cs, "", bare.Name)).To(Equal(""), "a node without the label: zone unknown")
		_, err = endpoints.ResolveZone(ctx, cs, "", "no-such-node")
		Expect(err).To(MatchError(ContainSubstring("no-such-node")))

		k := endpoints.ServiceKey{Namespace: ns, Service: "zoned"}
		c, _ := startCache(endpoints.CacheOptions{})
		c.Track([]endpoints.ServiceKey{k})
		inA := epSpec{ip: "198.18.0.1", ready: ptr.To(true), zone: "zone-a"}
		inB := epSpec{ip: "198.18.0.2", ready: ptr.To(true), zone: "zone-b"}
		s := create(ctx, sliceFor(ns, "zoned-1", "zoned", "", 80, inA, inB))

		// The zone choice the proxy makes (endpoints.Candidates) over what the Cache learnt from
		// the slices: zones and hints must come through the watch.
		candidates := func(zoneAware bool) func() []string {
			return func() []string {
				eps, cross := endpoints.Candidates(c.Ready(k), zone, zoneAware)
				out := []string{}
				for _, e := range eps {
					out = append(out, e.IP)
				}
				return append(out, fmt.Sprintf("cross=%v", cross))
			}
		}
		Eventually(candidates(true), 30*time.Second).Should(Equal([]string{"198.18.0.1", "cross=false"}))
		Expect(candidates(false)()).To(Equal([]string{"198.18.0.1", "198.18.0.2", "cross=false"}))

		// Hints assign zone-b's endpoint to zone-a as well.
		inA.forZones, inB.forZones = []string{"zone-a"}, []string{"zone-a"}
		setEndpoints(s, inA, inB)
		s = update(ctx, s)
		Eventually(candidates(true), 30*time.Second).Should(Equal([]string{"198.18.0.1", "198.18.0.2", "cross=false"}))

		// Nothing left in zone-a: every endpoint, counted as cross-zone.
		inA.forZones, inB.forZones = nil, nil
		inA.ready = ptr.To(false)
		setEndpoints(s, inA, inB)
		update(ctx, s)
		Eventually(candidates(true), 30*time.Second).Should(Equal([]string{"198.18.0.2", "cross=true"}))
	})
})
