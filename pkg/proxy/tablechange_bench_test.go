package proxy_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

// BenchmarkTableChanged10k measures the interceptor's per-version work besides decoding when one app
// is added to 10,000, with tables as the table watch produces them (routing.Reader: unchanged entries
// shared): preparing the per-app routes (TableChanged) and listing the Service ports to watch
// (endpoints.KeysFromTable). It reports the decode alone as decode-ms.
func BenchmarkTableChanged10k(b *testing.B) {
	enc, err := routing.NewEncoder(routing.DefaultMaxShardBytes, routing.DefaultMaxShardEntries)
	if err != nil {
		b.Fatal(err)
	}
	put := func(e routing.Entry) {
		_, line, err := routing.EncodeEntry(e)
		if err != nil {
			b.Fatal(err)
		}
		enc.Put(e.Key(), line)
	}
	var r routing.Reader
	next := func() *routing.Table {
		m, shards, err := enc.Encode()
		if err != nil {
			b.Fatal(err)
		}
		data := map[string][]byte{}
		for _, s := range shards {
			data[s.Name] = s.Data
		}
		t, err := r.Decode(m, data)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	for i := range 10_000 {
		put(entry(fmt.Sprintf("app-%d", i), fmt.Sprintf("app-%d.example.com", i), fmt.Sprintf("app-%d", i)))
	}
	tb := next()
	reg := queue.NewRegistry(nil)
	m, err := proxy.NewMetrics(prometheus.NewRegistry(), reg)
	if err != nil {
		b.Fatal(err)
	}
	cur := tb
	p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return cur }), Endpoints: proxytest.NewSource(),
		Registry: reg, Metrics: m, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	p.TableChanged(tb)
	var decode time.Duration
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		put(entry(fmt.Sprintf("new-%d", i), fmt.Sprintf("new-%d.example.com", i), "new"))
		start := time.Now()
		t := next()
		decode += time.Since(start)
		b.StartTimer()
		p.TableChanged(t)
		endpoints.KeysFromTable(t)
		cur = t
	}
	b.ReportMetric(float64(decode.Microseconds())/1000/float64(b.N), "decode-ms")
}
