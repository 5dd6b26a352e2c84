// Package proxy is the interceptor's request path, as explicit steps: route (match the routing
// table) → count (per-app counters, the scaler's signal) → wait (hold while the app has no ready
// endpoint) → forward (httputil.ReverseProxy to a pod, zone-aware, retrying another endpoint only
// when no byte was sent).
package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Headers set on responses to requests that were held for a cold start.
const (
	HeaderColdStart     = "X-Httpscale-Cold-Start"
	HeaderColdStartWait = "X-Httpscale-Cold-Start-Wait"
)

// TableSource yields the routing table to route with. pkg/tablewatch implements it; Table must be
// cheap (an atomic load) because it is called once per request, and may return nil before the first
// table was loaded (every request is then unrouted).
type TableSource interface {
	Table() *routing.Table
}

// TableFunc adapts a function to TableSource.
type TableFunc func() *routing.Table

// Table calls f.
func (f TableFunc) Table() *routing.Table { return f() }

// Options configure a Proxy. Zero durations and limits take the defaults in Defaults.
type Options struct {
	Tables    TableSource
	Endpoints endpoints.Source
	Registry  *queue.Registry
	// Metrics may be nil (metrics are then kept in a private registry).
	Metrics *Metrics
	Log     logr.Logger

	// Zone is this replica's zone; "" disables zone preference.
	Zone string
	// ZoneAware is the global default of Entry.ZoneAware.
	ZoneAware bool

	// ReadinessTimeout bounds holding; Entry.Timeouts.Readiness overrides it.
	ReadinessTimeout time.Duration
	// RequestTimeout bounds a forwarded request including its body; 0 means none. Entry overrides.
	RequestTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers; 0 means none. Entry overrides.
	ResponseHeaderTimeout time.Duration
	// QueueLimit is the default per-app hold-queue limit; Entry.ColdStart.QueueLimit overrides.
	QueueLimit int
	// RetryAfter is the Retry-After of a 503 for a full queue.
	RetryAfter time.Duration
	// DialTimeout bounds one connection attempt to an endpoint.
	DialTimeout time.Duration
	// BadEndpointFor keeps an endpoint that refused a connection out of the rotation.
	BadEndpointFor time.Duration
	// MaxConnsPerEndpoint bounds the connections open to one endpoint; more requests wait for one.
	// It keeps a burst of released held requests from opening thousands of connections to a pod
	// that just started.
	MaxConnsPerEndpoint int
	// MaxDialAttempts bounds the endpoints tried for one request when connections fail.
	MaxDialAttempts int
	// WakeEvery is the minimum interval between two wake events of one app.
	WakeEvery time.Duration
	// ClusterDomain builds Service addresses for ViaService ("svc.ns.svc.<domain>:port").
	ClusterDomain string

	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// DialContext replaces the dialer of both upstream transports (nil: a net.Dialer with DialTimeout).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Defaults are the values used for zero Options fields.
var Defaults = Options{
	ReadinessTimeout:    2 * time.Minute,
	QueueLimit:          1000,
	RetryAfter:          5 * time.Second,
	DialTimeout:         2 * time.Second,
	BadEndpointFor:      5 * time.Second,
	MaxDialAttempts:     3,
	MaxConnsPerEndpoint: 512,
	WakeEvery:           time.Second,
	ClusterDomain:       "cluster.local",
}

func (o *Options) setDefaults() {
	d := Defaults
	setIfZero(&o.ReadinessTimeout, d.ReadinessTimeout)
	setIfZero(&o.QueueLimit, d.QueueLimit)
	setIfZero(&o.RetryAfter, d.RetryAfter)
	setIfZero(&o.DialTimeout, d.DialTimeout)
	setIfZero(&o.BadEndpointFor, d.BadEndpointFor)
	setIfZero(&o.MaxDialAttempts, d.MaxDialAttempts)
	setIfZero(&o.MaxConnsPerEndpoint, d.MaxConnsPerEndpoint)
	setIfZero(&o.WakeEvery, d.WakeEvery)
	setIfZero(&o.ClusterDomain, d.ClusterDomain)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registry == nil {
		o.Registry = queue.NewRegistry(o.Now)
	}
}

func setIfZero[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}

// Proxy is the interceptor's http.Handler. It is safe for concurrent use.
type Proxy struct {
	opts    Options
	log     logr.Logger
	rp      *httputil.ReverseProxy
	fast    *h1Transport
	h1, h2c *http.Transport

	mu       sync.Mutex // serialises rebuilds of routes
	routes   atomic.Pointer[routes]
	prepared atomic.Pointer[routes] // built by TableChanged before the table is served

	upgrades tracker
}

// New returns a Proxy. Tables and Endpoints are required.
func New(o Options) (*Proxy, error) {
	if o.Tables == nil || o.Endpoints == nil {
		return nil, errors.New("proxy: Tables and Endpoints are required")
	}
	o.setDefaults()
	if o.Metrics == nil {
		m, err := NewMetrics(prometheus.NewRegistry(), o.Registry)
		if err != nil {
			return nil, fmt.Errorf("proxy: creating metrics: %w", err)
		}
		o.Metrics = m
	}
	p := &Proxy{opts: o, log: o.Log}
	p.fast, p.h1, p.h2c = newTransports(o)
	p.rp = p.newReverseProxy()
	return p, nil
}

// Registry returns the counters the proxy updates.
func (p *Proxy) Registry() *queue.Registry { return p.opts.Registry }

// routes are the per-app states of one routing table.
type routes struct {
	table *routing.Table
	apps  map[*routing.Entry]*app
	byKey map[string]*app
}

// app is one routed app's state for one routing table.
type app struct {
	entry          *routing.Entry
	key            string
	counts         *queue.App
	m              *appMetrics
	target         *backend
	fallback       *backend // nil without a fallback
	zoneAware      bool
	readiness      time.Duration
	request        time.Duration
	responseHeader time.Duration
	queueLimit     int64
}

// current returns the routes of the table to serve with, building them when the table changed.
// Cost on the hot path: two atomic loads.
func (p *Proxy) current() *routes {
	t := p.opts.Tables.Table()
	if rt := p.routes.Load(); rt != nil && rt.table == t {
		return rt
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if rt := p.routes.Load(); rt != nil && rt.table == t {
		return rt
	}
	rt := p.prepared.Load()
	if rt == nil || rt.table != t {
		rt = p.build(t)
	} else {
		p.prepared.Store(nil)
	}
	p.publish(rt)
	return rt
}

// TableChanged builds the per-app state of t before t is served, so the first requests routed by a
// new table do not pay for it; call it from the table watch's change callback. It blocks for O(apps)
// and does not block requests.
func (p *Proxy) TableChanged(t *routing.Table) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rt := p.routes.Load(); rt != nil && rt.table == t {
		return
	}
	p.prepared.Store(p.build(t))
	p.syncRegistry()
}

// build returns the routes of t, carrying endpoint state over from the routes served. Callers hold
// p.mu.
func (p *Proxy) build(t *routing.Table) *routes {
	old := p.routes.Load()
	rt := &routes{table: t, apps: make(map[*routing.Entry]*app, t.Len()), byKey: make(map[string]*app, t.Len())}
	for _, e := range t.Entries() {
		shared, _ := t.Lookup(e.Key())
		a := p.newApp(shared, old)
		rt.apps[shared] = a
		rt.byKey[a.key] = a
	}
	p.log.V(1).Info("routing table prepared", "version", t.Version(), "apps", len(rt.byKey))
	return rt
}

// publish serves rt and forgets the counters and metrics of apps that neither rt nor a prepared
// table routes. Callers hold p.mu.
func (p *Proxy) publish(rt *routes) {
	old := p.routes.Swap(rt)
	p.syncRegistry()
	if old == nil {
		return
	}
	prep := p.prepared.Load()
	for key := range old.byKey {
		_, kept := rt.byKey[key]
		if !kept && prep != nil {
			_, kept = prep.byKey[key]
		}
		if !kept {
			p.opts.Metrics.forget(key)
		}
	}
}

// syncRegistry keeps the counters of the apps of the served and the prepared routes, so that the
// counters an app's state points at stay the ones the admin port reports. Callers hold p.mu.
func (p *Proxy) syncRegistry() {
	var keys []string
	for _, rt := range []*routes{p.routes.Load(), p.prepared.Load()} {
		if rt != nil {
			for k := range rt.byKey {
				keys = append(keys, k)
			}
		}
	}
	p.opts.Registry.Sync(keys)
}

func (p *Proxy) newApp(e *routing.Entry, old *routes) *app {
	key := e.Key()
	a := &app{
		entry:          e,
		key:            key,
		counts:         p.opts.Registry.App(key),
		zoneAware:      p.opts.ZoneAware,
		readiness:      orDefault(e.Timeouts.Readiness, p.opts.ReadinessTimeout),
		request:        orDefault(e.Timeouts.Request, p.opts.RequestTimeout),
		responseHeader: orDefault(e.Timeouts.ResponseHeader, p.opts.ResponseHeaderTimeout),
		queueLimit:     int64(p.opts.QueueLimit),
	}
	a.m = p.opts.Metrics.forApp(key)
	if e.ZoneAware != nil {
		a.zoneAware = *e.ZoneAware
	}
	if e.ColdStart.QueueLimit > 0 {
		a.queueLimit = int64(e.ColdStart.QueueLimit)
	}
	var prev *app
	if old != nil {
		prev = old.byKey[key]
	}
	a.target = p.newBackend(e.Namespace, e.Target(), prev, func(o *app) *backend { return o.target })
	if fb := e.ColdStart.Fallback; fb != nil {
		a.fallback = p.newBackend(e.Namespace, *fb, prev, func(o *app) *backend { return o.fallback })
	}
	return a
}

// newBackend returns the backend state of b, reusing the previous table's (round-robin position and
// endpoints marked bad) when it describes the same destination.
func (p *Proxy) newBackend(ns string, b routing.Backend, prev *app, pick func(*app) *backend) *backend {
	nb := &backend{
		key:         endpoints.ServiceKey{Namespace: ns, Service: b.Service, PortName: b.PortName},
		protocol:    b.Protocol,
		serviceAddr: net.JoinHostPort(b.Service+"."+ns+".svc."+p.opts.ClusterDomain, strconv.Itoa(int(b.Port))),
	}
	if prev != nil {
		if ob := pick(prev); ob != nil && ob.key == nb.key && ob.protocol == nb.protocol && ob.serviceAddr == nb.serviceAddr {
			return ob
		}
	}
	return nb
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// state is one request's progress through the steps; it travels to the RoundTripper and the
// ReverseProxy hooks in the request context.
type state struct {
	app     *app
	client  context.Context
	start   time.Time
	holding bool
	cold    bool
	waited  time.Duration
	code    int
	backend *backend
	set     *endpoints.Set
	cancels []context.CancelFunc
}

type stateKey struct{}

var statePool = sync.Pool{New: func() any { return new(state) }}

// ServeHTTP runs the request path: route → count → wait → forward. It blocks while the request is
// held and until the response (or the WebSocket) ends.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := p.opts.Now()
	rt := p.current()
	e, ok := rt.table.Match(r.Host, r.URL.Path, r.Header)
	if !ok {
		p.opts.Metrics.unrouted.Inc()
		p.fail(w, nil, ErrNoRoute)
		return
	}
	a := rt.apps[e]
	a.counts.Received()

	st := statePool.Get().(*state)
	*st = state{app: a, client: r.Context(), start: start, cancels: st.cancels[:0]}
	defer p.finish(st)

	set := p.opts.Endpoints.Ready(a.target.key)
	if set.Len() == 0 {
		var err error
		set, err = p.wait(r, st)
		switch {
		case errors.Is(err, ErrReadinessTimeout):
			p.afterTimeout(w, r, st, err)
			return
		case err != nil:
			p.fail(w, st, err)
			return
		}
	}
	p.forward(w, r, st, a.target, set)
}

// wait holds the request until the app has a ready endpoint. The request is counted as held (the
// scaler's signal) and a wake event is published before it blocks.
func (p *Proxy) wait(r *http.Request, st *state) (*endpoints.Set, error) {
	a := st.app
	st.cold = true
	a.m.coldStarts.Inc()
	if !a.counts.TryHold(a.queueLimit) {
		a.m.rejections.Inc()
		return nil, fmt.Errorf("%s: %w (limit %d)", a.key, ErrQueueFull, a.queueLimit)
	}
	st.holding = true
	a.counts.Wake(p.opts.WakeEvery)
	ctx, cancel := context.WithTimeoutCause(r.Context(), a.readiness, ErrReadinessTimeout)
	defer cancel()
	set, err := p.opts.Endpoints.WaitReady(ctx, a.target.key)
	st.waited = p.opts.Now().Sub(st.start)
	if err == nil && set.Len() == 0 {
		err = fmt.Errorf("endpoint source returned no endpoint for %s", a.target.key)
	}
	if err != nil {
		a.counts.Unhold()
		st.holding = false
		if r.Context().Err() != nil {
			return nil, fmt.Errorf("holding %s: %w", a.key, ErrClientGone)
		}
		if errors.Is(context.Cause(ctx), ErrReadinessTimeout) {
			return nil, fmt.Errorf("holding %s for %s: %w", a.key, a.readiness, ErrReadinessTimeout)
		}
		return nil, fmt.Errorf("holding %s: %w", a.key, err)
	}
	a.m.coldStartWait.Observe(st.waited.Seconds())
	a.counts.Woke()
	return set, nil
}

// afterTimeout answers a request whose readiness timeout expired: the fallback Service if set, else
// the placeholder if set, else 504.
func (p *Proxy) afterTimeout(w http.ResponseWriter, r *http.Request, st *state, err error) {
	a := st.app
	switch {
	case a.fallback != nil:
		p.forward(w, r, st, a.fallback, p.opts.Endpoints.Ready(a.fallback.key))
	case a.entry.ColdStart.Placeholder != nil:
		ph := a.entry.ColdStart.Placeholder
		code := int(ph.StatusCode)
		if code == 0 {
			code = http.StatusServiceUnavailable
		}
		h := w.Header()
		for k, v := range ph.Headers {
			h.Set(k, v)
		}
		if h.Get("Content-Type") == "" {
			h.Set("Content-Type", "text/plain; charset=utf-8")
		}
		p.coldHeaders(h, st)
		h.Set("Content-Length", strconv.Itoa(len(ph.Body)))
		h.Set("Cache-Control", "no-store")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(ph.Body)) // a failed write means the client went away
		st.code = code
	default:
		p.fail(w, st, err)
	}
}

// forward sends the request to b through the ReverseProxy; the request counts as in flight until it
// (or its WebSocket) ends.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, st *state, b *backend, set *endpoints.Set) {
	done := st.app.counts.StartForward()
	defer done()
	if st.holding { // in flight before no longer held, so the app's concurrency never dips to zero
		st.app.counts.Unhold()
		st.holding = false
	}
	if r.Header.Get("Upgrade") != "" {
		p.upgrades.add(1)
		defer p.upgrades.add(-1)
	}
	st.backend, st.set = b, set
	ctx := context.WithValue(r.Context(), stateKey{}, st)
	if d := st.app.request; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, ErrRequestTimeout)
		defer cancel()
	}
	p.rp.ServeHTTP(w, r.WithContext(ctx))
}

// finish records the request's outcome; it also runs when the ReverseProxy aborts the handler.
func (p *Proxy) finish(st *state) {
	a := st.app
	if st.holding {
		a.counts.Unhold()
	}
	for _, c := range st.cancels {
		c()
	}
	code := st.code
	if code == 0 {
		code = http.StatusBadGateway // aborted before any status was chosen
	}
	a.m.codes[codeIndex(codeClass(code))].Inc()
	a.m.duration.Observe(p.opts.Now().Sub(st.start).Seconds())
	clear(st.cancels)
	*st = state{cancels: st.cancels[:0]}
	statePool.Put(st)
}

// fail answers the request with the status statusFor maps err to. st is nil for unrouted requests.
func (p *Proxy) fail(w http.ResponseWriter, st *state, err error) {
	code, reason := statusFor(err)
	app := ""
	if st != nil {
		st.code = code
		app = st.app.key
		if code == StatusClientClosedRequest {
			p.log.V(1).Info("client went away", "app", app, "status", code, "error", err.Error())
			return // nobody to answer
		}
		if code >= 500 && reason != "queue_full" {
			p.opts.Metrics.upstreamErrs.WithLabelValues(app, reason).Inc()
		}
		log := p.log
		if reason == "queue_full" {
			log = log.V(1) // a flood of rejections would drown the log; the metric counts them
		}
		log.Info("request failed", "app", app, "status", code, "reason", reason, "error", err.Error())
	}
	h := w.Header()
	if st != nil {
		p.coldHeaders(h, st)
	}
	if errors.Is(err, ErrQueueFull) {
		h.Set("Retry-After", strconv.Itoa(int((p.opts.RetryAfter+time.Second-1)/time.Second)))
	}
	body := http.StatusText(code) + ": " + reason + "\n"
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// coldHeaders marks a response to a held request.
func (p *Proxy) coldHeaders(h http.Header, st *state) {
	if !st.cold {
		return
	}
	h.Set(HeaderColdStart, "true")
	h.Set(HeaderColdStartWait, st.waited.Round(time.Millisecond).String())
}

// WaitUpgrades blocks until every upgraded connection (WebSocket) forwarded by p has ended or ctx
// ends. http.Server.Shutdown does not wait for hijacked connections; the drain does this instead.
func (p *Proxy) WaitUpgrades(ctx context.Context) error { return p.upgrades.wait(ctx) }

// tracker counts active items and lets a caller wait for zero.
type tracker struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed while n == 0; nil means closed
}

func (t *tracker) add(d int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 && d > 0 {
		t.zero = make(chan struct{})
	}
	t.n += d
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
}

func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	ch := t.zero
	t.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for upgraded connections: %w", ctx.Err())
	}
}
