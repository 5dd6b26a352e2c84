// Package tracingtest is an in-process OTLP trace receiver for tests: the OTLP/gRPC trace service
// and the OTLP/HTTP traces endpoint, built on the OTLP protobuf definitions, on 127.0.0.1.
package tracingtest

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]any
}

// TraceID and SpanID, ParentID are the span's ids in the hex of a traceparent.
func (s Span) TraceID() string  { return hex.EncodeToString(s.GetTraceId()) }
func (s Span) SpanID() string   { return hex.EncodeToString(s.GetSpanId()) }
func (s Span) ParentID() string { return hex.EncodeToString(s.GetParentSpanId()) }

// Attrs returns the span's attributes as Go values (string, bool, int64, float64).
func (s Span) Attrs() map[string]any { return Attrs(s.GetAttributes()) }

// Attrs converts OTLP attributes to Go values.
func Attrs(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		switch v := kv.GetValue().GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = v.StringValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = v.BoolValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = v.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = v.DoubleValue
		default:
			m[kv.GetKey()] = kv.GetValue().String()
		}
	}
	return m
}

// Collector receives spans over OTLP/gRPC and OTLP/HTTP (protobuf). It is safe for concurrent use.
type Collector struct {
	collectorpb.UnimplementedTraceServiceServer
	grpcAddr, httpAddr string

	mu    sync.Mutex
	spans []Span
}

// Start starts a collector on 127.0.0.1 until the test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, c)
	go func() { _ = gs.Serve(gl) }()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", c.serveHTTP)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(hl) }()
	c.grpcAddr, c.httpAddr = gl.Addr().String(), hl.Addr().String()
	t.Cleanup(func() {
		gs.Stop()
		_ = hs.Close()
	})
	return c
}

// GRPCEndpoint and HTTPEndpoint are the collector's URLs for OTEL_EXPORTER_OTLP_ENDPOINT.
func (c *Collector) GRPCEndpoint() string { return "http://" + c.grpcAddr }
func (c *Collector) HTTPEndpoint() string { return "http://" + c.httpAddr }

// Export implements the OTLP/gRPC trace service.
func (c *Collector) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	c.add(req)
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

func (c *Collector) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	req := &collectorpb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(body, req); err != nil {
		http.Error(w, fmt.Sprintf("not an OTLP trace export: %v", err), http.StatusBadRequest)
		return
	}
	c.add(req)
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (c *Collector) add(req *collectorpb.ExportTraceServiceRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		res := Attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans = append(c.spans, Span{Span: s, Resource: res})
			}
		}
	}
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// WaitSpan returns the first received span for which match returns true, failing the test when
// none arrives within timeout.
func (c *Collector) WaitSpan(t testing.TB, timeout time.Duration, match func(Span) bool) Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		for _, s := range c.Spans() {
			if match(s) {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching span within %s; received %d spans", timeout, len(c.Spans()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
