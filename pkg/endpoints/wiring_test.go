package endpoints_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/tablewatch"
)

var _ = Describe("Cache wired to the routing table", func() {
	It("follows the Services the stored routing table routes to", func() {
		ctx := context.Background()
		install, apps := suite.NewNamespace(ctx, "ep-"), suite.NewNamespace(ctx, "ep-")
		w, err := tablewatch.New(restCfg, tablewatch.Options{Namespace: install, Resync: time.Hour,
			Registerer: prometheus.NewRegistry(), Log: GinkgoLogr})
		Expect(err).NotTo(HaveOccurred())
		c, _ := startCache(endpoints.CacheOptions{})
		w.OnChange(c.OnTable)
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- w.Start(wctx) }()
		DeferCleanup(func() {
			cancel()
			Eventually(done, 30*time.Second).Should(Receive(BeNil()))
		})

		store := func(entries ...routing.Entry) string {
			t, err := routing.NewTable(entries)
			Expect(err).NotTo(HaveOccurred())
			m, shards, err := routing.Encode(t, routing.DefaultMaxShardBytes)
			Expect(err).NotTo(HaveOccurred())
			head, cms := routing.ToConfigMaps(install, routing.DefaultBaseName, m, shards)
			for _, cm := range cms {
				_, err := cs.CoreV1().ConfigMaps(install).Create(ctx, cm, metav1.CreateOptions{})
				Expect(err).NotTo(HaveOccurred())
			}
			cur, err := cs.CoreV1().ConfigMaps(install).Get(ctx, head.Name, metav1.GetOptions{})
			if err == nil {
				head.ResourceVersion = cur.ResourceVersion
				_, err = cs.CoreV1().ConfigMaps(install).Update(ctx, head, metav1.UpdateOptions{})
			} else {
				_, err = cs.CoreV1().ConfigMaps(install).Create(ctx, head, metav1.CreateOptions{})
			}
			Expect(err).NotTo(HaveOccurred())
			return m.Version // a stored table's version is its manifest's
		}
		shop := routing.Entry{Namespace: apps, Name: "shop", Hosts: []string{"shop.example.com"}, Service: "shop", Port: 80, PortName: "http"}
		blog := routing.Entry{Namespace: apps, Name: "blog", Hosts: []string{"blog.example.com"}, Service: "blog", Port: 80}
		shopKey := endpoints.ServiceKey{Namespace: apps, Service: "shop", PortName: "http"}

		v1 := store(shop)
		Eventually(w.Version, 30*time.Second).Should(Equal(v1))
		Eventually(c.Synced, 30*time.Second).Should(BeTrue())
		woke := make(chan *endpoints.Set, 1)
		go func() {
			s, _ := c.WaitReady(ctx, shopKey)
			woke <- s
		}()
		create(ctx, sliceFor(apps, "shop-1", "shop", "http", 8080, ready("198.18.0.1")))
		create(ctx, sliceFor(apps, "blog-1", "blog", "", 8080, ready("198.18.0.2")))
		var got *endpoints.Set
		Eventually(woke, 30*time.Second).Should(Receive(&got))
		Expect(got.Endpoints[0].Addr()).To(Equal("198.18.0.1:8080"))
		Expect(c.CachedSlices()).To(Equal(1), "blog is not routed yet")

		// The next table routes blog and drops shop: the cache follows.
		v2 := store(blog)
		Eventually(w.Version, 30*time.Second).Should(Equal(v2))
		Eventually(addrs(c, endpoints.ServiceKey{Namespace: apps, Service: "blog"}), 30*time.Second).
			Should(Equal([]string{"198.18.0.2:8080"}))
		Expect(c.Ready(shopKey)).To(BeNil(), "shop is no longer routed")
		Eventually(c.CachedSlices, 30*time.Second).Should(Equal(1))
	})
})
