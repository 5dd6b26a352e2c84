package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/routing/routingtest"
)

// BenchmarkTableChanged is the interceptor's whole per-version work when one app among n changes
// (one shard of the stored table), as the table watch does it: decode the changed shard and derive
// the new table (routing.Reader), then the change callbacks — the endpoint cache's (OnTable) and the
// proxy's (TableChanged) — and serving the table (the first request's Route). Apps are spread over
// 10 namespaces with a Service each, as a cluster would have them. decode-ms reports the Reader's
// share alone. The endpoint cache is not started: its watches are not part of this.
func BenchmarkTableChanged(b *testing.B) {
	for _, n := range []int{10_000, 50_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) { benchTableChanged(b, n) })
	}
}

func benchTableChanged(b *testing.B, n int) {
	st, err := routingtest.New(routing.DefaultMaxShardEntries)
	if err != nil {
		b.Fatal(err)
	}
	app := func(i int, gen int64) routing.Entry {
		return routing.Entry{Namespace: fmt.Sprintf("ns-%d", i%10), Name: fmt.Sprintf("app-%d", i), Generation: gen,
			Hosts: []string{fmt.Sprintf("app-%d.example.com", i)}, Service: fmt.Sprintf("app-%d", i), Port: 80}
	}
	put := func(e routing.Entry) {
		if err := st.Put(e); err != nil {
			b.Fatal(err)
		}
	}
	encode := func() (routing.Manifest, map[string][]byte) {
		m, data, err := st.Encode()
		if err != nil {
			b.Fatal(err)
		}
		return m, data
	}
	next := func(m routing.Manifest, data map[string][]byte) *routing.Table {
		t, err := st.Decode(m, data)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	for i := range n {
		put(app(i, 1))
	}
	tb := next(encode())
	reg := queue.NewRegistry(nil)
	m, err := proxy.NewMetrics(prometheus.NewRegistry(), reg, proxy.PerAppCounters)
	if err != nil {
		b.Fatal(err)
	}
	cache, err := endpoints.NewCache(fake.NewClientset(), endpoints.CacheOptions{Registerer: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	cur := tb
	p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return cur }), Endpoints: proxytest.NewSource(),
		Registry: reg, Metrics: m, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	cache.OnTable(tb)
	p.TableChanged(tb)
	var decode time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		// One app changes (its generation): one shard is re-encoded (by the writer, not timed).
		b.StopTimer()
		put(app(i*7919%n, int64(i+2)))
		m, data := encode()
		b.StartTimer()
		start := time.Now()
		t := next(m, data)
		decode += time.Since(start)
		cache.OnTable(t)
		p.TableChanged(t)
		cur = t
		if p.Route("app-0.example.com", "/", nil) == nil {
			b.Fatal("not routed")
		}
	}
	b.ReportMetric(float64(decode.Microseconds())/1000/float64(b.N), "decode-ms")
}
