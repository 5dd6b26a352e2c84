// Package proxy is the interceptor's request path, as explicit steps: route (match the routing
// table) → count (per-app counters, the scaler's signal) → wait (hold while the app has no ready
// endpoint) → forward (httputil.ReverseProxy to a pod, zone-aware, retrying another endpoint only
// when no byte was sent).
package proxy

import (
	"context"
	"errors"
	"fmt"
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
)

// Headers set on responses to requests that were held for a cold start.
const (
	HeaderColdStart     = "X-Httpscale-Cold-Start"
	HeaderColdStartWait = "X-Httpscale-Cold-Start-Wait"
)

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
	a.series().coldStarts.Inc()
	if !a.counts.TryHold(a.queueLimit) {
		a.series().rejections.Inc()
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
	a.series().coldStartWait.Observe(st.waited.Seconds())
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
	if fw, ok := directEligible(w, b); ok {
		p.forwardDirect(fw, r.WithContext(ctx))
		return
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
	a.series().codes[codeIndex(codeClass(code))].Inc()
	a.series().duration.Observe(p.opts.Now().Sub(st.start).Seconds())
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
			abortResponse(w) // nobody to answer
			return
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

// abortResponse ends a response that must not be sent (its client went away, or closed its sending
// side): the connection is closed without an answer. A ResponseWriter merely left untouched would
// be completed by the server with an empty 200 when the handler returns, a success the upstream
// never sent. The fast path's writer is marked (see h1Response.end); any other one is aborted the
// way net/http provides, by panicking with http.ErrAbortHandler (the server closes the connection,
// the handlers' deferred steps still run).
func abortResponse(w http.ResponseWriter) {
	if fw, ok := w.(*h1Response); ok {
		fw.aborted = true
		return
	}
	panic(http.ErrAbortHandler)
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
