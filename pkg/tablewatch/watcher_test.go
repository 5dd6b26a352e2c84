package tablewatch_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/tablewatch"
)

const base = routing.DefaultBaseName

// start runs a Watcher until the spec ends and checks that it then stops cleanly.
func start(cfg *rest.Config, opts tablewatch.Options) (*tablewatch.Watcher, *prometheus.Registry) {
	GinkgoHelper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	opts.Log = GinkgoLogr
	w, err := tablewatch.New(cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done, 30*time.Second).Should(Receive(BeNil()))
	})
	return w, reg
}

// recorder collects the versions change callbacks receive.
type recorder struct {
	mu       sync.Mutex
	versions []string
}

func (r *recorder) record(t *routing.Table) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions = append(r.versions, t.Version())
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.versions...)
}

var _ = Describe("Watcher", func() {
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = suite.NewNamespace(ctx, "tw-")
	})

	It("is not ready before a table exists, then loads it and follows updates in order", func() {
		w, reg := start(restCfg, tablewatch.Options{Namespace: ns, Resync: time.Hour})
		var rec recorder
		w.OnChange(rec.record)
		// Callbacks see a new table before Table returns it.
		var servedDuringCallback recorder
		w.OnChange(func(*routing.Table) { servedDuringCallback.record(w.Table()) })
		Consistently(w.Table, time.Second).Should(BeNil())
		Expect(w.Ready()).To(MatchError(ContainSubstring("no routing table loaded yet")))
		Expect(w.ReadyCheck(nil)).To(HaveOccurred())

		a, b := table("a", 40), table("b", 41)
		writeTable(ctx, ns, base, a)
		Eventually(w.Version, 30*time.Second).Should(Equal(a.Version()))
		Expect(w.Ready()).To(Succeed())
		Expect(w.Table().Len()).To(Equal(40))
		Expect(metricValue(reg, tablewatch.MetricInfo, map[string]string{"version": a.Version()})).To(Equal(1.0))
		Expect(metricValue(reg, tablewatch.MetricEntries, nil)).To(Equal(40.0))

		writeTable(ctx, ns, base, b)
		Eventually(w.Version, 30*time.Second).Should(Equal(b.Version()))
		_, ok := w.Table().Lookup("apps/app-40")
		Expect(ok).To(BeTrue(), "the new table routes the app b added")
		Expect(rec.seen()).To(Equal([]string{a.Version(), b.Version()}))
		Expect(servedDuringCallback.seen()).To(Equal([]string{"", a.Version()}))
		Expect(metricValue(reg, tablewatch.MetricInfo, map[string]string{"version": b.Version()})).To(Equal(1.0))
		Expect(metricValue(reg, tablewatch.MetricInfo, map[string]string{"version": a.Version()})).To(Equal(-1.0),
			"the old version's info series is gone")
		Expect(metricValue(reg, tablewatch.MetricFailing, nil)).To(Equal(0.0))

		// A callback registered late gets the current table at once.
		var late recorder
		w.OnChange(late.record)
		Expect(late.seen()).To(Equal([]string{b.Version()}))
	})

	It("reads only its own base in its own namespace", func() {
		other := suite.NewNamespace(ctx, "tw-")
		writeTable(ctx, other, base, table("elsewhere", 30))
		writeTable(ctx, ns, "another-table", table("another", 30))
		mine := table("mine", 30)
		writeTable(ctx, ns, base, mine)
		w, _ := start(restCfg, tablewatch.Options{Namespace: ns, Resync: time.Hour})
		Eventually(w.Version, 30*time.Second).Should(Equal(mine.Version()))
	})

	It("keeps the last good table when the head turns corrupt, and recovers with the next good one", func() {
		a := table("a", 40)
		writeTable(ctx, ns, base, a)
		w, reg := start(restCfg, tablewatch.Options{Namespace: ns, Resync: time.Hour})
		Eventually(w.Version, 30*time.Second).Should(Equal(a.Version()))
		served := w.Table()

		head, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, base, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		head.Data[routing.ManifestKey] = `{"format":1,"version":"truncated`
		_, err = cs.CoreV1().ConfigMaps(ns).Update(ctx, head, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		Eventually(func() float64 {
			return metricValue(reg, tablewatch.MetricLoadErrors, map[string]string{"reason": "corrupt"})
		}, 30*time.Second).Should(BeNumerically(">=", 1))
		Expect(w.Table()).To(BeIdenticalTo(served))
		Expect(metricValue(reg, tablewatch.MetricFailing, nil)).To(Equal(1.0))
		Expect(metricValue(reg, tablewatch.MetricInfo, map[string]string{"version": a.Version()})).To(Equal(1.0))
		st := w.Status()
		Expect(st.Version).To(Equal(a.Version()))
		Expect(st.LastError).To(MatchError(routing.ErrCorrupt))
		Expect(w.Ready()).To(Succeed(), "a replica with a good table stays ready")

		b := table("b", 40)
		writeTable(ctx, ns, base, b)
		Eventually(w.Version, 30*time.Second).Should(Equal(b.Version()))
		Expect(metricValue(reg, tablewatch.MetricFailing, nil)).To(Equal(0.0))
		Expect(w.Status().LastError).NotTo(HaveOccurred())
	})

	It("keeps the last good table while a shard is missing, and loads the new one once it appears", func() {
		a := table("a", 40)
		writeTable(ctx, ns, base, a)
		w, reg := start(restCfg, tablewatch.Options{Namespace: ns, Resync: time.Hour})
		Eventually(w.Version, 30*time.Second).Should(Equal(a.Version()))

		// A writer that died after writing the head of b but before all of b's shards.
		b := table("b", 40)
		head, shards := encode(ns, base, b)
		writeShards(ctx, shards[1:])
		writeHead(ctx, head)
		Eventually(func() float64 {
			return metricValue(reg, tablewatch.MetricLoadErrors, map[string]string{"reason": "incomplete"})
		}, 30*time.Second).Should(BeNumerically(">=", 1))
		Consistently(w.Version, 500*time.Millisecond).Should(Equal(a.Version()))
		Expect(w.Status().LastError).To(MatchError(routing.ErrIncomplete))
		Expect(metricValue(reg, tablewatch.MetricFailing, nil)).To(Equal(1.0))

		writeShards(ctx, shards[:1])
		Eventually(w.Version, 30*time.Second).Should(Equal(b.Version()))
		Expect(metricValue(reg, tablewatch.MetricFailing, nil)).To(Equal(0.0))
	})

	It("keeps the last good table when the head is deleted", func() {
		a := table("a", 40)
		writeTable(ctx, ns, base, a)
		w, reg := start(restCfg, tablewatch.Options{Namespace: ns, Resync: time.Hour})
		Eventually(w.Version, 30*time.Second).Should(Equal(a.Version()))
		Expect(cs.CoreV1().ConfigMaps(ns).Delete(ctx, base, metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() float64 {
			return metricValue(reg, tablewatch.MetricLoadErrors, map[string]string{"reason": "incomplete"})
		}, 30*time.Second).Should(BeNumerically(">=", 1))
		Expect(w.Version()).To(Equal(a.Version()))
		Expect(w.Table().Len()).To(Equal(40))
	})

	It("loads a table of 50,000 apps soon after its head changes", func() {
		small := table("small", 40)
		writeTable(ctx, ns, base, small)
		w, _ := start(restCfg, tablewatch.Options{Namespace: ns, Resync: time.Hour})
		Eventually(w.Version, 30*time.Second).Should(Equal(small.Version()))

		big := table("big", 50000)
		m, s, err := routing.Encode(big, routing.DefaultMaxShardBytes)
		Expect(err).NotTo(HaveOccurred())
		head, shards := routing.ToConfigMaps(ns, base, m, s)
		writeShards(ctx, shards)
		written := time.Now()
		writeHead(ctx, head)
		Eventually(w.Version, 60*time.Second).WithPolling(time.Millisecond).Should(Equal(m.Version))
		took := time.Since(written)
		decodeStart := time.Now()
		_, err = routing.FromConfigMaps(head, shards)
		Expect(err).NotTo(HaveOccurred())
		decode := time.Since(decodeStart)
		report := fmt.Sprintf("50,000 apps in %d shards: head written -> table served in %v (decoding alone: %v)", len(shards), took, decode)
		AddReportEntry("propagation", report)
		GinkgoWriter.Println(report)
		Expect(w.Table().Len()).To(Equal(50000))
	})

	It("re-reads the table on its timer when the watch delivers nothing", func() {
		a := table("a", 40)
		writeTable(ctx, ns, base, a)
		// Both replicas' watches connect but never deliver an event, like a watch over a half-open
		// connection. Only the periodic re-read can move them on.
		cfg := rest.CopyConfig(restCfg)
		reads := &readCounts{}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return silentWatches{next: rt, counts: reads} })
		fast, _ := start(cfg, tablewatch.Options{Namespace: ns, Resync: 500 * time.Millisecond})
		slow, _ := start(cfg, tablewatch.Options{Namespace: ns, Resync: time.Hour})
		Eventually(fast.Version, 30*time.Second).Should(Equal(a.Version()))
		Eventually(slow.Version, 30*time.Second).Should(Equal(a.Version()), "the first load reads the API directly")

		b := table("b", 40)
		writeTable(ctx, ns, base, b)
		Eventually(fast.Version, 30*time.Second).Should(Equal(b.Version()))
		Consistently(slow.Version, 2*time.Second).Should(Equal(a.Version()),
			"without the re-read the broken watch leaves the table stale (the watch really is silent)")

		// While the head stays the same, a re-read is one GET of the head, not a list of every shard.
		lists, heads := reads.lists.Load(), reads.heads.Load()
		Consistently(reads.lists.Load, 2*time.Second).Should(Equal(lists))
		Expect(reads.heads.Load()).To(BeNumerically(">=", heads+2))
	})
})

// silentWatches answers every watch request with a stream that stays open and silent until the
// client gives up; other requests pass through.
// It counts the lists of ConfigMaps and the reads of the head.
type silentWatches struct {
	next   http.RoundTripper
	counts *readCounts
}

type readCounts struct{ lists, heads atomic.Int64 }

func (s silentWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	if q := req.URL.Query().Get("watch"); q != "true" && q != "1" {
		switch {
		case strings.HasSuffix(req.URL.Path, "/configmaps"):
			s.counts.lists.Add(1)
		case strings.HasSuffix(req.URL.Path, "/configmaps/"+base):
			s.counts.heads.Add(1)
		}
		return s.next.RoundTrip(req)
	}
	return &http.Response{
		StatusCode: http.StatusOK,
		Proto:      "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": []string{"application/json"}},
		Body:    &silentBody{ctx: req.Context(), closed: make(chan struct{})},
		Request: req,
	}, nil
}

type silentBody struct {
	ctx    context.Context
	once   sync.Once
	closed chan struct{}
}

func (b *silentBody) Read([]byte) (int, error) {
	select {
	case <-b.ctx.Done():
	case <-b.closed:
	}
	return 0, io.EOF
}

func (b *silentBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return nil
}
