package proxy

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/proxy/engine"
)

// Tracing: with Options.Tracer set, every routed request the engine serves gets a server span,
// child of the caller's W3C trace context (traceparent, tracestate), whose context replaces the
// caller's in the request forwarded to the backend (engine.Traced). Forward attempts are events of
// that span. With no Tracer, Route keeps nothing and Trace returns nil: no span, no context, no
// header parsing, and the engine forwards the caller's trace context headers as they came.

// Span attributes of httpscale's own (the HTTP ones are OpenTelemetry's semantic conventions).
const (
	AttrApp            = attribute.Key("httpscale.app")             // namespace/name of the HTTPScaledObject
	AttrHeld           = attribute.Key("httpscale.held")            // the request waited for a cold start
	AttrHeldDuration   = attribute.Key("httpscale.held.duration")   // seconds it waited (held requests only)
	AttrFallback       = attribute.Key("httpscale.fallback")        // sent to the fallback Service after the readiness timeout
	AttrAttempt        = attribute.Key("httpscale.forward.attempt") // 1 for the first endpoint tried
	AttrAttemptOutcome = attribute.Key("httpscale.forward.outcome") // forwarded, refused or failed
	// EventForward is the name of the span event recorded for each forward attempt.
	EventForward = "forward"
	// EventColdStartPrefix prefixes the span events of a held request's cold start, one per step
	// (cold_start.WakeSent, cold_start.AppAnswered, ...), at the step's time.
	EventColdStartPrefix = "cold_start."
	// AttrCoarse marks a cold-start step whose time the API server keeps to the second.
	AttrCoarse = attribute.Key("httpscale.cold_start.coarse")
)

// traceContext is the W3C trace context propagator (traceparent, tracestate).
var traceContext = propagation.TraceContext{}

// traced is the tracing state of one request (nil when its request is not traced).
type traced struct {
	span     trace.Span
	reported int // forward attempts with an event
}

// Trace implements engine.Traced: it starts the request's server span, child of the caller's trace
// context, and returns the headers that carry the span's context to the backend. It returns nil at
// once when tracing is off.
func (x *exchange) Trace(r engine.Request) http.Header {
	h := x.hdr
	if h == nil {
		return nil
	}
	x.hdr = nil // the engine's header view is not to be kept past this call
	p, a := x.p, x.app
	parent := traceContext.Extract(context.Background(), headerCarrier{h})
	path, query, _ := strings.Cut(r.Target, "?")
	route := matchedPrefix(a.entry.PathPrefixes, path)
	method := methodName(r.Method)
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs,
		AttrApp.String(a.key),
		semconv.HTTPRequestMethodKey.String(method),
		semconv.HTTPRouteKey.String(route),
		semconv.URLSchemeKey.String("http"),
		semconv.URLPathKey.String(path),
		semconv.NetworkProtocolVersionKey.String(protoVersion(r.ProtoMajor, r.ProtoMinor)),
	)
	if query != "" {
		attrs = append(attrs, semconv.URLQueryKey.String(query))
	}
	if host := hostOf(r.Host); host != "" {
		attrs = append(attrs, semconv.ServerAddressKey.String(host))
	}
	if ua := h.Values("User-Agent"); len(ua) > 0 {
		attrs = append(attrs, semconv.UserAgentOriginalKey.String(ua[0]))
	}
	ctx, span := p.opts.Tracer.Start(parent, method+" "+route,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(p.opts.Now()),
		trace.WithAttributes(attrs...))
	x.tr = &traced{span: span}
	set := http.Header{}
	traceContext.Inject(ctx, propagation.HeaderCarrier(set))
	if _, ok := set["Tracestate"]; !ok {
		set["Tracestate"] = nil // the caller's, if any, belonged to a trace context that was not valid
	}
	return set
}

var _ engine.Traced = (*exchange)(nil)

// attempt records the outcome of forward attempt n (0 for the first) to addr.
func (t *traced) attempt(n int, addr, outcome string, err error) {
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, AttrAttempt.Int(n+1), AttrAttemptOutcome.String(outcome))
	if host, port, perr := net.SplitHostPort(addr); perr == nil {
		attrs = append(attrs, semconv.NetworkPeerAddressKey.String(host))
		if n, perr := strconv.Atoi(port); perr == nil {
			attrs = append(attrs, semconv.NetworkPeerPortKey.Int(n))
		}
	}
	if err != nil {
		attrs = append(attrs, attribute.String("error", err.Error()))
	}
	t.span.AddEvent(EventForward, trace.WithAttributes(attrs...))
	t.reported = n + 1
}

// coldStart records the steps of the cold start the request was held in, up to its forward, as
// events at the steps' times.
func (t *traced) coldStart(steps []admin.ColdStartStep) {
	for _, s := range steps {
		opts := []trace.EventOption{trace.WithTimestamp(s.At)}
		if s.Coarse {
			opts = append(opts, trace.WithAttributes(AttrCoarse.Bool(true)))
		}
		t.span.AddEvent(EventColdStartPrefix+s.Name, opts...)
	}
}

// forwarded records the attempt that reached addr.
func (t *traced) forwarded(x *exchange, addr string) {
	for n := t.reported; n < len(x.tried) && x.tried[n] != ""; n++ {
		if x.tried[n] == addr {
			t.attempt(n, addr, "forwarded", nil)
			return
		}
	}
}

// failed records err on the last attempt when nothing was said about it yet (the request was sent
// and got no answer, or it timed out).
func (t *traced) failed(x *exchange, err error) {
	n := 0
	for n < len(x.tried) && x.tried[n] != "" {
		n++
	}
	if n > t.reported {
		t.attempt(n-1, x.tried[n-1], "failed", err)
	}
	t.span.RecordError(err)
}

// end ends the span with the request's outcome.
func (t *traced) end(x *exchange, code int) {
	attrs := make([]attribute.KeyValue, 0, 4)
	attrs = append(attrs, semconv.HTTPResponseStatusCodeKey.Int(code), AttrHeld.Bool(x.cold))
	if x.cold {
		attrs = append(attrs, AttrHeldDuration.Float64(x.waited.Seconds()))
	}
	if x.backend != x.app.target {
		attrs = append(attrs, AttrFallback.Bool(true))
	}
	t.span.SetAttributes(attrs...)
	if code >= 500 { // server spans: only 5xx are errors (4xx are the client's)
		t.span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(code)))
		t.span.SetStatus(codes.Error, http.StatusText(code))
	}
	t.span.End(trace.WithTimestamp(x.p.opts.Now()))
}

// headerCarrier reads a request's trace context from the engine's header view.
type headerCarrier struct{ h engine.Header }

// Get returns the single traceparent (none when the request has several, which W3C trace context
// does not allow) or the tracestate fields joined into one list.
func (c headerCarrier) Get(key string) string {
	vs := c.h.Values(key)
	if strings.EqualFold(key, "tracestate") {
		return strings.Join(vs, ",")
	}
	if len(vs) != 1 {
		return ""
	}
	return vs[0]
}

func (headerCarrier) Set(string, string) {}
func (headerCarrier) Keys() []string     { return nil }

// matchedPrefix is the entry's path prefix that path matches, the longest one ("/" without any).
func matchedPrefix(prefixes []string, path string) string {
	best := ""
	for _, pre := range prefixes {
		if pre == "/" || path == pre || strings.HasPrefix(path, pre+"/") {
			if len(pre) > len(best) {
				best = pre
			}
		}
	}
	if best == "" {
		return "/"
	}
	return best
}

// hostOf is the request's host without its port.
func hostOf(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return host
}

// methodName is the method for the span: one of the known methods, else "_OTHER" (semantic
// conventions; a span name must not carry what any client may invent).
func methodName(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

func protoVersion(major, minor int) string {
	switch {
	case major == 2:
		return "2"
	case major == 1 && minor == 0:
		return "1.0"
	}
	return "1.1"
}
