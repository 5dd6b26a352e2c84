package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/httpscale/httpscale/pkg/gcheadroom"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

// discardWriter is a minimal http.ResponseWriter, so the benchmark measures the proxy, not a recorder.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// BenchmarkServeHTTPWarm is one routed request to a warm app: route, count, pick an endpoint, forward
// over a pooled loopback connection, copy the response.
func BenchmarkServeHTTPWarm(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer backend.Close()
	p := benchProxy(b, "http://"+backend.Listener.Addr().String())
	req := httptest.NewRequest(http.MethodGet, "http://app.example.com/x", nil)
	req.RemoteAddr = "127.0.0.1:1234"
	b.ReportAllocs()
	for b.Loop() {
		w := &discardWriter{h: http.Header{}}
		p.ServeHTTP(w, req)
	}
}

// BenchmarkProxy is one keep-alive GET through a real Server and Proxy to a loopback backend, on the
// event loops (loops) and with every request served by net/http and the ReverseProxy (nethttp). The
// client's and the backend's work are included; compare them, and allocs/op.
func BenchmarkProxy(b *testing.B) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	defer be.Close()
	b.Run("loops", func(b *testing.B) { benchKeepAlive(b, &proxy.Server{Engine: benchProxy(b, be.URL).Engine()}, true, -1) })
	b.Run("nethttp", func(b *testing.B) { benchKeepAlive(b, &proxy.Server{Engine: benchProxy(b, be.URL).Engine()}, false, 0) })
}

// benchProxy is a Proxy routing app.example.com to the backend at url.
func benchProxy(b *testing.B, url string) *proxy.Proxy {
	tb, err := routing.NewTable([]routing.Entry{entry("app", "app.example.com", "app")})
	if err != nil {
		b.Fatal(err)
	}
	src := proxytest.NewSource()
	src.Set(key("app"), endpointOf(&testing.T{}, url, ""))
	p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return tb }), Endpoints: src, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// benchKeepAlive serves s's Engine on a Server (with loops event loops) and sends it GETs
// over one keep-alive connection, checking each answer is 200 "ok".
func benchKeepAlive(b *testing.B, s *proxy.Server, fast bool, loops int) {
	benchKeepAliveReq(b, s, fast, loops, []byte("GET /x HTTP/1.1\r\nHost: app.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"))
}

// benchKeepAliveReq is benchKeepAlive sending req.
func benchKeepAliveReq(b *testing.B, s *proxy.Server, fast bool, loops int, req []byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s.Name, s.Listener, s.FastHTTP1, s.EventLoops, s.DrainTimeout, s.Log = "bench", ln, fast, loops, 5*time.Second, logr.Discard()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	defer func() { cancel(); <-done }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			b.Fatalf("got %d %q", resp.StatusCode, body)
		}
	}
}

// BenchmarkProxyRoutes is BenchmarkProxy's event-loop case with the app among 1 and among 10,000
// routed apps (each with its own host and Service), and the interceptor's GC policy
// (gcheadroom with --gc-percent 400 and interceptor/wiring.go's 24 MiB of headroom): the request
// path must not slow down with the table's size.
func BenchmarkProxyRoutes(b *testing.B) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	defer be.Close()
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tuner := gcheadroom.Start(gcheadroom.Options{MaxPercent: 400, MinPercent: 50, Headroom: 24 << 20})
	defer tuner.Stop()
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprintf("routes=%d", n), func(b *testing.B) {
			entries := []routing.Entry{entry("app", "app.example.com", "app")}
			for i := 1; i < n; i++ {
				entries = append(entries, entry(fmt.Sprintf("app-%d", i), fmt.Sprintf("app-%d.example.com", i), fmt.Sprintf("app-%d", i)))
			}
			tb, err := routing.NewTable(entries)
			if err != nil {
				b.Fatal(err)
			}
			src := proxytest.NewSource()
			src.Set(key("app"), endpointOf(&testing.T{}, be.URL, ""))
			reg := queue.NewRegistry(nil)
			m, err := proxy.NewMetrics(prometheus.NewRegistry(), reg, proxy.PerAppCounters)
			if err != nil {
				b.Fatal(err)
			}
			p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return tb }), Endpoints: src,
				Registry: reg, Metrics: m, Log: logr.Discard()})
			if err != nil {
				b.Fatal(err)
			}
			p.TableChanged(tb)
			runtime.GC()
			benchKeepAlive(b, &proxy.Server{Engine: p.Engine()}, true, -1)
		})
	}
}
