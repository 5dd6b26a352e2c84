package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/routing"
)

// BenchmarkProxyTracing is BenchmarkProxy's event-loop case with tracing on: every request
// sampled (spans batched to an exporter that drops them) and none sampled (always_off, the
// cost of the span context the backend still gets). BenchmarkProxy itself is tracing off.
func BenchmarkProxyTracing(b *testing.B) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	defer be.Close()
	for _, c := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{{"sampled", sdktrace.AlwaysSample()}, {"unsampled", sdktrace.NeverSample()}} {
		b.Run(c.name, func(b *testing.B) {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(c.sampler), sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			defer func() { _ = tp.Shutdown(b.Context()) }()
			tb, err := routing.NewTable([]routing.Entry{entry("app", "app.example.com", "app")})
			if err != nil {
				b.Fatal(err)
			}
			src := proxytest.NewSource()
			src.Set(key("app"), endpointOf(&testing.T{}, be.URL, ""))
			p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return tb }), Endpoints: src,
				Log: logr.Discard(), Tracer: tp.Tracer("bench")})
			if err != nil {
				b.Fatal(err)
			}
			benchKeepAlive(b, &proxy.Server{Engine: p.Engine()}, true, -1)
		})
	}
}

// BenchmarkTraceOff is what tracing off adds to a routed request's logic, in isolation: Route and
// Release as before tracing existed, and the same with the engine's Traced call in between (the
// type assertion and a Trace that returns nil at once).
func BenchmarkTraceOff(b *testing.B) {
	tb, err := routing.NewTable([]routing.Entry{entry("app", "app.example.com", "app")})
	if err != nil {
		b.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return tb }), Endpoints: proxytest.NewSource(), Log: logr.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	hdr := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	req := engine.Request{Method: http.MethodGet, Target: "/x", Host: "app.example.com", ProtoMajor: 1, ProtoMinor: 1}
	b.Run("route-release", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.Route("app.example.com", "/x", hdr).Release()
		}
	})
	b.Run("route-trace-release", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			x := p.Route("app.example.com", "/x", hdr)
			if t, ok := x.(engine.Traced); ok {
				if set := t.Trace(req); set != nil {
					b.Fatal("tracing off returned header fields")
				}
			}
			x.Release()
		}
	})
}
