package proxy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/tracing"
	"github.com/httpscale/httpscale/pkg/tracing/tracingtest"
)

// traceBackend answers 200 "ok" with the trace context it received in X-Seen-Traceparent and
// X-Seen-Tracestate (several fields joined by "|").
func traceBackend(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Seen-Traceparent", strings.Join(r.Header.Values("Traceparent"), "|"))
	w.Header().Set("X-Seen-Tracestate", strings.Join(r.Header.Values("Tracestate"), "|"))
	_, _ = io.WriteString(w, "ok")
}

// callerContext is a caller's trace: a new trace id and span id, sampled when flags is "01".
func callerContext(t *testing.T, flags string) (traceID, spanID, traceparent string) {
	t.Helper()
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	traceID, spanID = hex.EncodeToString(b[:16]), hex.EncodeToString(b[16:])
	return traceID, spanID, "00-" + traceID + "-" + spanID + "-" + flags
}

// sendTraced sends GET path to host through client with the given trace context fields and returns
// the response (body read) and the trace context the backend saw.
func sendTraced(t *testing.T, client *http.Client, url, host, path string, hdr http.Header) (*http.Response, string, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Fatalf("GET %s%s: %d %q, want 200 ok", host, path, resp.StatusCode, body)
	}
	return resp, resp.Header.Get("X-Seen-Traceparent"), resp.Header.Get("X-Seen-Tracestate")
}

// h2cClient speaks HTTP/2 with prior knowledge.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}, Timeout: 10 * time.Second}
}

// h2cBackend is traceBackend speaking h2c only, routed as g.example.com (Service g, protocol h2c).
func h2cBackend(t *testing.T, h *harness) {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(traceBackend))
	var bp http.Protocols
	bp.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &bp
	s.Start()
	t.Cleanup(s.Close)
	h.src.Set(key("g"), endpointOf(t, s.URL, ""))
}

func h2cEntry() routing.Entry {
	e := entry("g", "g.example.com", "g")
	e.Protocol = routing.ProtocolH2C
	return e
}

// TestTraceContextPassesThroughWhenTracingIsOff: without tracing, the caller's traceparent and
// tracestate reach the backend as sent, on the raw path (event loops and goroutines), on the
// general path, and to and from h2c.
func TestTraceContextPassesThroughWhenTracingIsOff(t *testing.T) {
	_, _, tp := callerContext(t, "01")
	sent := http.Header{"Traceparent": {tp}, "Tracestate": {"rojo=00f067aa0ba902b7", "congo=t61rcWkgMzE"}}
	want := []string{tp, "rojo=00f067aa0ba902b7|congo=t61rcWkgMzE"}
	onBothPaths(t, func(t *testing.T, h *harness, _ bool) {
		_, be := backendFunc(t, traceBackend)
		h.src.Set(key("app"), be)
		_, gotTP, gotTS := sendTraced(t, h.client, h.url, "app.example.com", "/x", sent)
		if d := cmp.Diff(want, []string{gotTP, gotTS}); d != "" {
			t.Errorf("trace context at the backend (-sent +got):\n%s", d)
		}
	})
	t.Run("h2c", func(t *testing.T) {
		h := newHarness(t, []routing.Entry{h2cEntry()}, nil)
		h2cBackend(t, h)
		for _, c := range []struct {
			name   string
			client *http.Client
		}{{"client=h1", h.client}, {"client=h2c", h2cClient()}} {
			_, gotTP, gotTS := sendTraced(t, c.client, h.url, "g.example.com", "/svc.Method", sent)
			if d := cmp.Diff(want, []string{gotTP, gotTS}); d != "" {
				t.Errorf("%s: trace context at the h2c backend (-sent +got):\n%s", c.name, d)
			}
		}
	})
}

// tracedProxy sets the environment of a tracing provider exporting to a new in-process OTLP
// collector over protocol, and returns the collector and a harness option that gives the proxy
// the provider's tracer. The provider is shut down when the test ends.
func tracedProxy(t *testing.T, protocol string, env map[string]string) (*tracingtest.Collector, func(*proxy.Options, *proxy.Server)) {
	t.Helper()
	col := tracingtest.Start(t)
	endpoint := col.HTTPEndpoint()
	if protocol == "grpc" {
		endpoint = col.GRPCEndpoint()
	}
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // ms: export at once
	for k, v := range env {
		t.Setenv(k, v)
	}
	p, err := tracing.New(context.Background(), tracing.Options{ServiceName: "proxy-test", Log: testr.New(t)})
	if err != nil || p == nil {
		t.Fatalf("tracing.New = %v, %v; want a provider", p, err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return col, func(o *proxy.Options, _ *proxy.Server) { o.Tracer = p.Tracer("proxy-test") }
}

// spanOf waits for the server span of traceID.
func spanOf(t *testing.T, col *tracingtest.Collector, traceID string) tracingtest.Span {
	t.Helper()
	return col.WaitSpan(t, 10*time.Second, func(s tracingtest.Span) bool {
		return s.TraceID() == traceID && s.GetKind() == tracepb.Span_SPAN_KIND_SERVER
	})
}

// events returns each event's name and attributes, without timestamps.
func events(s tracingtest.Span) []map[string]any {
	var out []map[string]any
	for _, e := range s.GetEvents() {
		m := tracingtest.Attrs(e.GetAttributes())
		m["event"] = e.GetName()
		out = append(out, m)
	}
	return out
}

// checkServerSpan checks the span of a warm GET /x?q=1 to ns/app (route "/") forwarded to be
// with the caller's context (traceID, parent), and the traceparent the backend saw.
func checkServerSpan(t *testing.T, s tracingtest.Span, parent, seenTP, proto, app string, port int) {
	t.Helper()
	if s.ParentID() != parent {
		t.Errorf("span parent = %s, want the caller's span %s", s.ParentID(), parent)
	}
	if want := "00-" + s.TraceID() + "-" + s.SpanID() + "-01"; seenTP != want {
		t.Errorf("backend got traceparent %q, want the interceptor's span %q", seenTP, want)
	}
	if s.GetName() != "GET /" {
		t.Errorf("span name %q, want %q", s.GetName(), "GET /")
	}
	attrs := s.Attrs()
	want := map[string]any{
		"httpscale.app":             app,
		"http.route":                "/",
		"http.request.method":       "GET",
		"url.scheme":                "http",
		"url.path":                  "/x",
		"url.query":                 "q=1",
		"network.protocol.version":  proto,
		"http.response.status_code": int64(200),
		"httpscale.held":            false,
	}
	for k, v := range want {
		if attrs[k] != v {
			t.Errorf("attribute %s = %v, want %v (all: %v)", k, attrs[k], v, attrs)
		}
	}
	wantEvents := []map[string]any{{"event": proxy.EventForward, "httpscale.forward.attempt": int64(1),
		"httpscale.forward.outcome": "forwarded", "network.peer.address": "127.0.0.1", "network.peer.port": int64(port)}}
	if d := cmp.Diff(wantEvents, events(s)); d != "" {
		t.Errorf("forward events (-want +got):\n%s", d)
	}
	if s.Resource["service.name"] != "proxy-test" {
		t.Errorf("resource service.name = %v, want proxy-test", s.Resource["service.name"])
	}
}

// TestTracingSpansOnEveryPath: with tracing on, every path emits a server span child of the
// caller's trace, with the app, route, HTTP attributes and the forward attempt, exported to a real
// OTLP receiver; the backend gets the span's context in traceparent and the caller's tracestate.
func TestTracingSpansOnEveryPath(t *testing.T) {
	for _, protocol := range []string{"grpc", "http/protobuf"} {
		t.Run(protocol, func(t *testing.T) {
			col, traced := tracedProxy(t, protocol, nil)
			onBothPathsWith(t, traced, func(t *testing.T, h *harness, _ bool) {
				_, be := backendFunc(t, traceBackend)
				h.src.Set(key("app"), be)
				traceID, parent, tp := callerContext(t, "01")
				_, seenTP, seenTS := sendTraced(t, h.client, h.url, "app.example.com", "/x?q=1",
					http.Header{"Traceparent": {tp}, "Tracestate": {"rojo=00f067aa0ba902b7"}})
				if seenTS != "rojo=00f067aa0ba902b7" {
					t.Errorf("backend got tracestate %q, want the caller's", seenTS)
				}
				checkServerSpan(t, spanOf(t, col, traceID), parent, seenTP, "1.1", "ns/app", int(be.Port))
			})
		})
	}
	t.Run("h2c", func(t *testing.T) {
		col, traced := tracedProxy(t, "grpc", nil)
		h := newHarness(t, []routing.Entry{h2cEntry()}, traced)
		h2cBackend(t, h)
		port := int(h.src.Ready(key("g")).Endpoints[0].Port)
		for _, c := range []struct {
			proto  string
			client *http.Client
		}{{"1.1", h.client}, {"2", h2cClient()}} {
			traceID, parent, tp := callerContext(t, "01")
			_, seenTP, _ := sendTraced(t, c.client, h.url, "g.example.com", "/x?q=1", http.Header{"Traceparent": {tp}})
			checkServerSpan(t, spanOf(t, col, traceID), parent, seenTP, c.proto, "ns/g", port)
		}
	})
}

// TestTracingHeldRequest: a request held during a cold start has one span (the raw path leaves it
// to the general one without a second), marked held with the time it waited, and the backend gets
// the span's context once the app is up.
func TestTracingHeldRequest(t *testing.T) {
	col, traced := tracedProxy(t, "grpc", nil)
	onBothPathsWith(t, traced, func(t *testing.T, h *harness, _ bool) {
		_, be := backendFunc(t, traceBackend)
		traceID, parent, tp := callerContext(t, "01")
		type answer struct {
			resp   *http.Response
			seenTP string
		}
		done := make(chan answer, 1)
		go func() {
			resp, seenTP, _ := sendTraced(t, h.client, h.url, "app.example.com", "/x?q=1", http.Header{"Traceparent": {tp}})
			done <- answer{resp, seenTP}
		}()
		testenv.Eventually(t, 10*time.Second, "the request to be held", func() bool { _, held, _ := h.count("ns/app"); return held == 1 })
		time.Sleep(30 * time.Millisecond)
		h.src.Set(key("app"), be)
		a := <-done
		if a.resp.Header.Get(proxy.HeaderColdStart) != "true" {
			t.Fatalf("response headers %v, want a cold start", a.resp.Header)
		}
		s := spanOf(t, col, traceID)
		if want := "00-" + traceID + "-" + s.SpanID() + "-01"; a.seenTP != want || s.ParentID() != parent {
			t.Errorf("backend got %q, want %q; span parent %s, want %s", a.seenTP, want, s.ParentID(), parent)
		}
		attrs := s.Attrs()
		if attrs["httpscale.held"] != true || attrs["http.response.status_code"] != int64(200) {
			t.Errorf("held request's span attributes %v, want held and 200", attrs)
		}
		if d, _ := attrs["httpscale.held.duration"].(float64); d < 0.03 || d > 10 {
			t.Errorf("httpscale.held.duration = %v, want the ~30 ms the request waited", attrs["httpscale.held.duration"])
		}
		// A later request's span arrives after any other span of the held one would have.
		warmID, _, warmTP := callerContext(t, "01")
		sendTraced(t, h.client, h.url, "app.example.com", "/", http.Header{"Traceparent": {warmTP}})
		spanOf(t, col, warmID)
		n := 0
		for _, s := range col.Spans() {
			if s.TraceID() == traceID {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d spans of the held request's trace, want 1", n)
		}
	})
}

// TestTracingForwardAttempts: an endpoint that refuses the connection is an attempt event before
// the one that reached the backend; a request no endpoint accepted is a 502 span with status error.
func TestTracingForwardAttempts(t *testing.T) {
	col, traced := tracedProxy(t, "grpc", nil)
	onBothPathsWith(t, traced, func(t *testing.T, h *harness, _ bool) {
		dead := deadEndpoint(t)
		h.src.Set(key("app"), dead)
		traceID, _, tp := callerContext(t, "01")
		req, _ := http.NewRequest(http.MethodGet, h.url+"/", nil)
		req.Host, req.Header["Traceparent"] = "app.example.com", []string{tp}
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("only a dead endpoint: %d, want 502", resp.StatusCode)
		}
		s := spanOf(t, col, traceID)
		if s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR || s.Attrs()["http.response.status_code"] != int64(502) {
			t.Errorf("502 span: status %v, attributes %v; want an error with status code 502", s.GetStatus(), s.Attrs())
		}
		if ev := events(s); len(ev) < 1 || ev[0]["httpscale.forward.outcome"] != "refused" || ev[0]["network.peer.port"] != int64(dead.Port) {
			t.Errorf("502 span events %v, want the refused attempt to port %d first", ev, dead.Port)
		}

		_, good := backendFunc(t, traceBackend)
		h.src.Set(key("app"), dead, good)
		// Both paths take the same steps: a refused attempt, then the next endpoint.
		for range 6 { // round robin: one of them tries the dead endpoint first
			traceID, _, tp := callerContext(t, "01")
			sendTraced(t, h.client, h.url, "app.example.com", "/", http.Header{"Traceparent": {tp}})
			ev := events(spanOf(t, col, traceID))
			if len(ev) == 2 {
				if ev[0]["httpscale.forward.outcome"] != "refused" || ev[1]["httpscale.forward.outcome"] != "forwarded" ||
					ev[1]["httpscale.forward.attempt"] != int64(2) || ev[1]["network.peer.port"] != int64(good.Port) {
					t.Errorf("retried request's events %v, want refused then forwarded (attempt 2) to port %d", ev, good.Port)
				}
				return
			}
		}
		t.Error("no request was retried after a refused connection")
	})
}

// TestTracingSamplingAndInvalidContext: the default sampler follows the caller's decision (an
// unsampled caller gets no span, and the backend an unsampled traceparent of the same trace);
// OTEL_TRACES_SAMPLER=always_off samples nothing; a caller's traceparent that is not valid starts a
// new trace and its tracestate is not passed on.
func TestTracingSamplingAndInvalidContext(t *testing.T) {
	for _, sampler := range []string{"", "always_off"} {
		t.Run("sampler="+sampler, func(t *testing.T) {
			col, traced := tracedProxy(t, "grpc", map[string]string{"OTEL_TRACES_SAMPLER": sampler})
			h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, traced)
			_, be := backendFunc(t, traceBackend)
			h.src.Set(key("app"), be)

			unsampled, parent, tp := callerContext(t, "00")
			_, seenTP, _ := sendTraced(t, h.client, h.url, "app.example.com", "/", http.Header{"Traceparent": {tp}})
			if !strings.HasPrefix(seenTP, "00-"+unsampled+"-") || !strings.HasSuffix(seenTP, "-00") || strings.Contains(seenTP, parent) {
				t.Errorf("unsampled caller: backend got %q, want trace %s, unsampled, another parent than %s", seenTP, unsampled, parent)
			}
			sampled, _, tp := callerContext(t, "01")
			_, seenTP, _ = sendTraced(t, h.client, h.url, "app.example.com", "/", http.Header{"Traceparent": {tp}})
			wantFlags := "-01"
			if sampler == "always_off" {
				wantFlags = "-00"
			}
			if !strings.HasPrefix(seenTP, "00-"+sampled+"-") || !strings.HasSuffix(seenTP, wantFlags) {
				t.Errorf("sampled caller: backend got %q, want trace %s ending %s", seenTP, sampled, wantFlags)
			}

			_, seenTP, seenTS := sendTraced(t, h.client, h.url, "app.example.com", "/",
				http.Header{"Traceparent": {"00-not-a-trace-context-01"}, "Tracestate": {"rojo=1"}})
			if len(seenTP) != 55 || strings.Contains(seenTP, "not-a") || seenTS != "" {
				t.Errorf("invalid caller context: backend got traceparent %q, tracestate %q; want a new trace, no tracestate", seenTP, seenTS)
			}

			if sampler == "" {
				spanOf(t, col, sampled)
			} else {
				time.Sleep(200 * time.Millisecond) // ten export intervals
			}
			for _, s := range col.Spans() {
				if s.TraceID() == unsampled || sampler == "always_off" {
					t.Errorf("span %s of trace %s exported, want none", s.GetName(), s.TraceID())
				}
			}
		})
	}
}
