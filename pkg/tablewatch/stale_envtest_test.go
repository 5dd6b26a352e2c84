package tablewatch_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/httpscale/httpscale/pkg/tablewatch"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// stallableWatches passes every request through; while cut, the bodies of watch streams deliver
// nothing (reads block), as a stream whose connection stopped carrying data does. Uncut, they go on
// with what the API server sent meanwhile.
type stallableWatches struct {
	next http.RoundTripper
	gate *gate
}

type gate struct {
	mu   sync.Mutex
	open chan struct{} // closed while not cut
}

func newGate() *gate {
	g := &gate{open: make(chan struct{})}
	close(g.open)
	return g
}

func (g *gate) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

func (g *gate) restore() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *gate) wait(ctx context.Context) error {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s stallableWatches) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.next.RoundTrip(req)
	if err != nil || req.URL.Query().Get("watch") != "true" {
		return resp, err
	}
	resp.Body = &gatedBody{ReadCloser: resp.Body, ctx: req.Context(), gate: s.gate}
	return resp, nil
}

type gatedBody struct {
	io.ReadCloser
	ctx  context.Context
	gate *gate
}

func (b *gatedBody) Read(p []byte) (int, error) {
	if err := b.gate.wait(b.ctx); err != nil {
		return 0, err
	}
	return b.ReadCloser.Read(p)
}

// logLines records a logger's lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
		GinkgoWriter.Println(prefix, args)
	}, funcr.Options{Verbosity: 1})
}

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

// startStale runs a Watcher with StaleAfter whose watches go through g.
func startStale(g *gate, opts tablewatch.Options) (*tablewatch.Watcher, *prometheus.Registry, *logLines) {
	GinkgoHelper()
	cfg := rest.CopyConfig(restCfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return stallableWatches{next: rt, gate: g} })
	logs := &logLines{}
	reg := prometheus.NewRegistry()
	opts.Registerer, opts.Log = reg, logs.logger()
	w, err := tablewatch.New(cfg, opts)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(ctx) }()
	DeferCleanup(func() {
		g.restore()
		cancel()
		Eventually(done, 30*time.Second).Should(Receive(BeNil()))
	})
	return w, reg, logs
}

var _ = Describe("Watcher staleness", func() {
	const bound = 3 * time.Second
	var (
		ctx context.Context
		ns  string
	)
	BeforeEach(func() {
		ctx = context.Background()
		ns = suite.NewNamespace(ctx, "tw-")
	})

	It("fails readiness within the bound when its watch stalls and the API server has a newer table, and recovers by itself", func() {
		a := table("a", 40)
		writeTable(ctx, ns, base, a)
		g := newGate()
		// No timer re-read: only the watch can bring a new table.
		w, reg, logs := startStale(g, tablewatch.Options{Namespace: ns, Resync: time.Hour, StaleAfter: bound})
		Eventually(w.Version, 30*time.Second).Should(Equal(a.Version()))
		Consistently(w.Ready, bound+2*tablewatch.ProbeInterval(bound)).Should(Succeed(), "a current table with a silent watch is not stale")

		g.cut()
		b := table("b", 41)
		head, shards := encode(ns, base, b)
		writeShards(ctx, shards)
		written := time.Now()
		writeHead(ctx, head) // the new table exists from here on
		interval := tablewatch.ProbeInterval(bound)
		Eventually(w.Ready, 2*bound+2*interval, 50*time.Millisecond).Should(MatchError(ContainSubstring("routing table stale")))
		took := time.Since(written)
		GinkgoWriter.Printf("unready %v after the newer table was written (bound %v, probe every %v)\n", took, bound, interval)
		// A probe sees the new head at most one interval after it was written, and readiness fails
		// at the first probe once the bound has passed since then.
		Expect(took).To(BeNumerically(">=", bound), "not before the bound")
		Expect(took).To(BeNumerically("<=", bound+2*interval), "within the bound and two probe intervals")
		Expect(w.Version()).To(Equal(a.Version()), "the watch really delivered nothing")
		Expect(metricValue(reg, tablewatch.MetricStale, nil)).To(Equal(1.0))
		Expect(metricValue(reg, tablewatch.MetricBehind, nil)).To(BeNumerically(">=", bound.Seconds()))
		Expect(logs.has("routing table stale")).To(BeTrue(), "a log line says so")

		g.restore() // the stream carries again what the API server sent meanwhile
		Eventually(w.Version, 30*time.Second).Should(Equal(b.Version()))
		Expect(w.Ready()).To(Succeed())
		Expect(metricValue(reg, tablewatch.MetricStale, nil)).To(Equal(0.0))
		Expect(logs.has("routing table current again")).To(BeTrue())
	})

	It("stays ready when the newer table cannot be loaded: every replica has the same one", func() {
		a := table("a", 40)
		writeTable(ctx, ns, base, a)
		w, reg, _ := startStale(newGate(), tablewatch.Options{Namespace: ns, Resync: time.Hour, StaleAfter: bound})
		Eventually(w.Version, 30*time.Second).Should(Equal(a.Version()))
		// A head naming a shard that does not exist: delivered, not loadable.
		head, _ := encode(ns, base, table("broken", 40))
		writeHead(ctx, head)
		Eventually(func() float64 { return metricValue(reg, tablewatch.MetricFailing, nil) }, 30*time.Second).Should(Equal(1.0))
		Consistently(w.Ready, bound+2*tablewatch.ProbeInterval(bound)).Should(Succeed())
		Expect(w.Version()).To(Equal(a.Version()))
	})

	It("stays ready when the API server cannot be asked: an unreachable API server must not take the fleet down", func() {
		a := table("a", 40)
		writeTable(ctx, ns, base, a)
		g := newGate()
		unreachable := rest.CopyConfig(restCfg)
		unreachable.Host = "https://127.0.0.1:1" // nothing listens there
		probe, err := kubernetes.NewForConfig(unreachable)
		Expect(err).NotTo(HaveOccurred())
		w, reg, _ := startStale(g, tablewatch.Options{Namespace: ns, Resync: time.Hour, StaleAfter: bound, Probe: probe})
		Eventually(w.Version, 30*time.Second).Should(Equal(a.Version()))
		g.cut()
		writeTable(ctx, ns, base, table("b", 41))
		Consistently(w.Ready, bound+2*tablewatch.ProbeInterval(bound)).Should(Succeed())
		Expect(metricValue(reg, tablewatch.MetricProbeErrors, nil)).To(BeNumerically(">", 0))
	})
})
