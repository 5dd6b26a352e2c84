// Package proxy is the interceptor's request logic: route (match the routing table) → count
// (per-app counters, the scaler's signal) → wait (hold while the app has no ready endpoint) →
// forward (to a pod, zone-aware, trying another endpoint only when no byte was sent). The HTTP
// engine (pkg/proxy/engine), which reads requests and forwards them, calls it through engine.Logic
// and engine.Exchange; the steps run in that order in Engine.ServeHTTP.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/httpscale/httpscale/pkg/coldstart"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Headers set on responses to requests that were held for a cold start.
const (
	HeaderColdStart     = "X-Httpscale-Cold-Start"
	HeaderColdStartWait = "X-Httpscale-Cold-Start-Wait"
)

// HeaderIdle ("true") marks the 503 answering a request to an ignored path of an app at zero.
const HeaderIdle = "X-Httpscale-Idle"

// Proxy is the interceptor's request logic (it implements engine.Logic) with the engine that serves it;
// it is an http.Handler. It is safe for concurrent use.
type Proxy struct {
	opts Options
	log  logr.Logger
	eng  *engine.Engine

	mu       sync.Mutex // serialises rebuilds of routes
	routes   atomic.Pointer[routes]
	prepared atomic.Pointer[routes] // built by TableChanged before the table is served
}

// New returns a Proxy. Tables and Endpoints are required.
func New(o Options) (*Proxy, error) {
	if o.Tables == nil || o.Endpoints == nil {
		return nil, errors.New("proxy: Tables and Endpoints are required")
	}
	o.setDefaults()
	if o.Metrics == nil {
		m, err := NewMetrics(prometheus.NewRegistry(), o.Registry, PerAppCounters)
		if err != nil {
			return nil, fmt.Errorf("proxy: creating metrics: %w", err)
		}
		o.Metrics = m
	}
	p := &Proxy{opts: o, log: o.Log}
	p.eng = engine.New(p, p.engineOptions())
	return p, nil
}

// Registry returns the counters the proxy updates.
func (p *Proxy) Registry() *queue.Registry { return p.opts.Registry }

// Engine returns the engine serving the proxy's requests; give it to Server.Engine.
func (p *Proxy) Engine() *engine.Engine { return p.eng }

// ServeHTTP serves r through the engine (see Engine.ServeHTTP).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { p.eng.ServeHTTP(w, r) }

// WaitUpgrades blocks until every upgraded connection (WebSocket) forwarded by p has ended or ctx
// ends. http.Server.Shutdown does not wait for hijacked connections; the drain does this instead.
func (p *Proxy) WaitUpgrades(ctx context.Context) error { return p.eng.WaitUpgrades(ctx) }

// Route implements Logic: the exchange of the app the routing table matches.
func (p *Proxy) Route(host, path string, h engine.Header) engine.Exchange {
	rt := p.current()
	r, ok := rt.table.MatchRoute(host, path, h)
	if !ok {
		return nil
	}
	return p.exchange(rt, r, path, h)
}

// exchange starts the exchange of a request routed to r in rt.
func (p *Proxy) exchange(rt *routes, r routing.Route, path string, h engine.Header) engine.Exchange {
	x := exchangePool.Get().(*exchange)
	a, _ := rt.apps.Get(r.Entry)
	*x = exchange{p: p, app: a, backend: a.target, kind: r.Kind, static: r.Static, rewrite: r.Rewrite}
	if r.Kind == routing.RouteStatic && r.Static.Backend != nil {
		x.backend = a.static[r.Static]
	}
	if r.Rewrite != nil && routing.HasDotSegment(path) {
		x.badPath = true // see rewrite.go
	}
	if a.session != nil && r.Kind != routing.RouteStatic {
		x.readSession(h)
	}
	if p.opts.Tracer != nil {
		x.hdr = h // for Trace, which reads the caller's trace context
	}
	return x
}

// Unrouted implements Logic.
func (p *Proxy) Unrouted(h http.Header) engine.Reply {
	p.opts.Metrics.unrouted.Inc()
	return errorReply(h, http.StatusNotFound, "no_route")
}

var _ engine.Logic = (*Proxy)(nil)

// exchange is one request's progress through the steps (it implements engine.Exchange).
//
// Only a request to one of the app's path prefixes (kind routing.RouteApp) is counted, held and a
// reason to wake the app. One to an ignored path is forwarded when the app is ready and answered
// ErrIdle at once otherwise; one to a static route is answered with its response (Ready is false,
// Wait returns errStatic, Fail writes it) or forwarded to its Service's address. Every engine path
// (fast path, event loops, net/http) counts only through Begin and Forwarding, so the rule holds
// on all of them.
type exchange struct {
	p       *Proxy
	app     *app
	kind    routing.RouteKind
	static  *routing.StaticRoute       // for routing.RouteStatic
	backend *backend                   // the target, or the fallback after a readiness timeout
	set     *endpoints.Set             // nil until Ready or Wait
	cand    *candidate                 // the endpoint picked last
	tried   [engine.MaxAttempts]string // the endpoints Pick returned, by attempt
	start   time.Time
	holding bool
	hold    *queue.Hold // the request's room in the interceptor's pool while held; nil without one
	cost    int64       // what holding the request costs (holdCost), set by WaitRequest
	cold    bool
	waited  time.Duration
	code    int
	cs      *coldstart.ColdStart // the app's cold start while this request is held in it
	done    func()               // ends the in-flight count; nil until Forwarding
	hdr     engine.Header        // the request's header view until Trace; nil when tracing is off
	tr      *traced              // nil unless the request is traced (trace.go)

	rewrite *routing.PathRewrite // the matched route's path rewrite; nil: none (rewrite.go)
	badPath bool                 // a rewritten route's path with a dot segment: refused

	cookies [maxSessionValues]string // the request's session cookie values (session.go)
	pinned  string                   // the endpoint its cookie named under the signing key
	secure  bool                     // the client reached the fleet over HTTPS
}

var exchangePool = sync.Pool{New: func() any { return new(exchange) }}

func (x *exchange) Plan() engine.Plan {
	a := x.app
	return engine.Plan{
		H2C:                   x.backend.protocol == routing.ProtocolH2C,
		ViaService:            a.entry.ViaService || x.kind == routing.RouteStatic,
		RequestTimeout:        a.request,
		ResponseHeaderTimeout: a.responseHeader,
	}
}

func (x *exchange) Ready() bool {
	if x.badPath {
		return false // Wait refuses it
	}
	if x.kind == routing.RouteStatic {
		return x.static.Backend != nil // a Service's address is always there; a response is written by Fail
	}
	x.set = x.p.opts.Endpoints.Ready(x.backend.key)
	return x.set.Len() > 0
}

func (x *exchange) Begin() {
	x.start = x.p.opts.Now()
	if x.kind == routing.RouteApp && !x.badPath {
		x.app.counts.Received()
	}
}

// errStatic is what Wait returns for a static route answered by the interceptor: Fail turns it
// into the route's response.
var errStatic = errors.New("static response")

// Wait holds the request until the app has a ready endpoint. The request is counted as held (the
// scaler's signal) and a wake event is published before it blocks. When the readiness timeout
// passes and the app has a fallback Service, the request goes there.
func (x *exchange) Wait(ctx context.Context) error {
	a, p := x.app, x.p
	switch {
	case x.badPath:
		return fmt.Errorf("%s: %w", a.key, ErrBadPath) // neither held nor a wake
	case x.kind == routing.RouteStatic:
		return errStatic
	case x.kind == routing.RouteIgnored:
		return fmt.Errorf("%s: %w", a.key, ErrIdle) // neither held nor a wake
	}
	x.cold = true
	a.series().coldStart()
	// Before any refusal: an app at zero is woken by a request it cannot hold too, so it does not
	// stay at zero while the interceptor's pool is taken by others.
	wakeAt, streams := a.counts.Wake(p.opts.WakeEvery)
	if !a.counts.TryHold(a.queueLimit) {
		a.series().rejected()
		x.wokeUnheld(wakeAt, streams)
		return fmt.Errorf("%s: %w (limit %d)", a.key, ErrQueueFull, a.queueLimit)
	}
	x.holding = true
	hctx, evict := context.WithCancelCause(ctx)
	defer evict(nil)
	if err := x.admit(func() { evict(queue.ErrEvicted) }); err != nil {
		x.unhold()
		x.wokeUnheld(wakeAt, streams)
		return err
	}
	if t := p.opts.ColdStarts; t != nil {
		x.cs = t.Begin(a.coldApp(), x.start)
		if !wakeAt.IsZero() {
			x.cs.WakeSent(wakeAt, streams)
		}
	}
	wctx, cancel := context.WithTimeoutCause(hctx, a.readiness, ErrReadinessTimeout)
	defer cancel()
	set, err := p.opts.Endpoints.WaitReady(wctx, a.target.key)
	x.waited = p.opts.Now().Sub(x.start)
	if err == nil && set.Len() == 0 {
		err = fmt.Errorf("endpoint source returned no endpoint for %s", a.target.key)
	}
	if err == nil {
		a.series().coldStartWait.Observe(x.waited.Seconds())
		a.counts.Woke()
		x.set = set
		return nil
	}
	if x.cs != nil {
		x.cs.Released(errors.Is(context.Cause(wctx), ErrReadinessTimeout))
		x.cs = nil
	}
	x.unhold()
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("holding %s: %w", a.key, ErrClientGone)
	case errors.Is(context.Cause(hctx), queue.ErrEvicted):
		a.series().evicted()
		return fmt.Errorf("holding %s: %w", a.key, queue.ErrEvicted)
	case errors.Is(context.Cause(wctx), ErrReadinessTimeout):
		if a.fallback != nil {
			x.backend = a.fallback
			x.set = p.opts.Endpoints.Ready(a.fallback.key)
			return nil
		}
		return fmt.Errorf("holding %s for %s: %w", a.key, a.readiness, ErrReadinessTimeout)
	default:
		return fmt.Errorf("holding %s: %w", a.key, err)
	}
}

// Forwarding counts the request as in flight before it is no longer held, so that the app's
// concurrency never dips to zero.
func (x *exchange) Forwarding() {
	if x.kind != routing.RouteApp {
		return
	}
	x.done = x.app.counts.StartForward()
	x.unhold()
}

// direct reports whether the request goes to the Service's address: asked for, or a fallback
// without known endpoints.
func (x *exchange) direct() bool {
	return x.app.entry.ViaService || x.kind == routing.RouteStatic || x.set.Len() == 0
}

// Pick returns the endpoint for attempt: round robin over the zone's candidates (all endpoints once
// those all failed), skipping the endpoints of the earlier attempts and, while others remain, those
// marked bad.
func (x *exchange) Pick(attempt int) (string, bool) {
	b := x.backend
	if attempt >= len(x.tried) {
		return "", false
	}
	if x.direct() {
		if b.serviceAddr == "" {
			return "", false // the target of an app forwarded to its pods, without a ready endpoint
		}
		x.tried[attempt] = b.serviceAddr
		return b.serviceAddr, attempt == 0
	}
	tried := x.tried[:attempt]
	view := b.candidates(x.set, x.p.appZone(x.app))
	var now time.Time
	if attempt > 0 || b.hasBad() { // the clock is only needed to expire bad marks
		now = x.p.opts.Now()
	}
	if attempt == 0 {
		if c := x.sticky(view, now); c != nil { // the endpoint the session cookie names (session.go)
			x.cand = c
			x.tried[0] = c.addr
			return c.addr, true
		}
	}
	c, ok := b.pick(view.cands, tried, now)
	if !ok && len(view.cands) < len(view.all) {
		c, ok = b.pick(view.all, tried, now) // the zone's endpoints all failed: use every zone
	}
	if !ok {
		return "", false
	}
	x.cand = c
	x.tried[attempt] = c.addr
	return c.addr, true
}

// Refused marks addr bad for BadEndpointFor when another endpoint may be tried: up to
// MaxDialAttempts endpoints.
func (x *exchange) Refused(addr string, attempt int, err error) bool {
	if x.tr != nil {
		x.tr.attempt(attempt, addr, "refused", err)
	}
	if x.direct() {
		return false
	}
	p, b := x.p, x.backend
	view := b.candidates(x.set, p.appZone(x.app))
	if attempt+1 >= min(p.opts.MaxDialAttempts, engine.MaxAttempts, len(view.all)) {
		return false
	}
	now := p.opts.Now()
	b.markBad(addr, now, now.Add(p.opts.BadEndpointFor))
	p.log.V(1).Info("endpoint refused connection; trying another", "app", x.app.key, "endpoint", addr, "error", err.Error())
	return true
}

func (x *exchange) Forwarded(addr string) {
	if x.cs != nil {
		x.cs.Forwarded(addr, x.p.opts.Now())
		if x.tr != nil {
			x.tr.coldStart(x.cs.Steps())
		}
		x.cs = nil
	}
	if x.tr != nil {
		x.tr.forwarded(x, addr)
	}
	if c := x.cand; c != nil && c.addr == addr {
		countCrossZone(x.app, x.p.appZone(x.app), c)
	}
}

func (x *exchange) Responded(code int, h http.Header) {
	x.code = code
	if h != nil {
		x.coldHeaders(h)
		x.setSessionCookie(h)
	}
}

// Fail records err and returns its answer: the status statusFor maps it to, or the app's
// placeholder after a readiness timeout.
func (x *exchange) Fail(err error, h http.Header) engine.Reply {
	a, p := x.app, x.p
	if errors.Is(err, errStatic) {
		return x.fixed(x.static.Response, http.StatusOK, h)
	}
	if errors.Is(err, errWaitingPage) {
		return x.waitingPage(h)
	}
	if x.tr != nil {
		x.tr.failed(x, err)
	}
	if ph := a.entry.ColdStart.Placeholder; ph != nil && errors.Is(err, ErrReadinessTimeout) {
		rep := x.fixed(ph, http.StatusServiceUnavailable, h)
		x.coldHeaders(h)
		return rep
	}
	code, reason := statusFor(err)
	x.code = code
	if code == StatusClientClosedRequest {
		p.log.V(1).Info("client went away", "app", a.key, "status", code, "error", err.Error())
		return engine.Reply{Code: code, Abort: true} // nobody to answer
	}
	expected := reason == "queue_full" || reason == "app_idle" || reason == "pool_full" || reason == "evicted" || reason == "bad_path" // answers by design, not upstream failures
	if code >= 500 && !expected {
		a.series().upstreamError(reason)
	}
	log := p.log
	if expected {
		log = log.V(1) // a flood of rejections or health checks would drown the log
	}
	log.Info("request failed", "app", a.key, "status", code, "reason", reason, "error", err.Error())
	x.coldHeaders(h)
	if errors.Is(err, ErrQueueFull) || errors.Is(err, ErrIdle) || errors.Is(err, queue.ErrPoolFull) || errors.Is(err, queue.ErrEvicted) || errors.Is(err, engine.ErrUpstreamBusy) {
		h.Set("Retry-After", strconv.Itoa(int((p.opts.RetryAfter+time.Second-1)/time.Second)))
	}
	if errors.Is(err, ErrIdle) {
		h.Set(HeaderIdle, "true")
	}
	return errorReply(h, code, reason)
}

// fixed is the answer of a configured response (a placeholder or a static route's response);
// code is used when it sets none.
func (x *exchange) fixed(ph *routing.Placeholder, code int, h http.Header) engine.Reply {
	if ph.StatusCode != 0 {
		code = int(ph.StatusCode)
	}
	for k, v := range ph.Headers {
		h.Set(k, v)
	}
	if h.Get("Content-Type") == "" {
		h.Set("Content-Type", "text/plain; charset=utf-8")
	}
	h.Set("Content-Length", strconv.Itoa(len(ph.Body)))
	h.Set("Cache-Control", "no-store")
	x.code = code
	return engine.Reply{Code: code, Body: ph.Body}
}

// errorReply is the answer of an error: its status text and reason.
func errorReply(h http.Header, code int, reason string) engine.Reply {
	body := http.StatusText(code) + ": " + reason + "\n"
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	return engine.Reply{Code: code, Body: body}
}

// coldHeaders marks a response to a held request.
func (x *exchange) coldHeaders(h http.Header) {
	if !x.cold {
		return
	}
	h.Set(HeaderColdStart, "true")
	h.Set(HeaderColdStartWait, x.waited.Round(time.Millisecond).String())
}

// End records the request's outcome.
func (x *exchange) End() {
	a := x.app
	if x.cs != nil {
		x.cs.Released(false) // held, then never forwarded (every endpoint refused, the client went away)
	}
	x.unhold()
	if x.done != nil {
		x.done()
	}
	code := x.code
	if code == 0 {
		code = http.StatusBadGateway // aborted before any status was chosen
	}
	a.series().response(code)
	a.series().duration.Observe(x.p.opts.Now().Sub(x.start).Seconds())
	if x.tr != nil {
		x.tr.end(x, code)
	}
	x.Release()
}

func (x *exchange) Release() {
	*x = exchange{}
	exchangePool.Put(x)
}

// appZone is the zone a's endpoints are chosen for: this replica's when a is zone-aware, else "".
func (p *Proxy) appZone(a *app) string {
	if a.zoneAware {
		return p.opts.Zone
	}
	return ""
}

// countCrossZone counts a forward of a's request to c when it leaves zone.
func countCrossZone(a *app, zone string, c *candidate) {
	if zone != "" && c.ep.Zone != "" && c.ep.Zone != zone {
		a.series().crossZone()
	}
}
