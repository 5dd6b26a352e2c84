package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
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
	tb, err := routing.NewTable([]routing.Entry{entry("app", "app.example.com", "app")})
	if err != nil {
		b.Fatal(err)
	}
	src := proxytest.NewSource()
	src.Set(key("app"), endpointOf(&testing.T{}, backend.URL, ""))
	p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return tb }), Endpoints: src, Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodGet, "http://app.example.com/x", nil)
	req.RemoteAddr = "127.0.0.1:1234"
	b.ReportAllocs()
	for b.Loop() {
		w := &discardWriter{h: http.Header{}}
		p.ServeHTTP(w, req)
	}
}
