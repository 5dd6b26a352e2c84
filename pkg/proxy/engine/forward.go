package engine

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// Engine is the HTTP engine: it serves requests for a Logic (as an http.Handler: the net/http
// path, and on the event loops of a Server whose Engine it is) and forwards them to the endpoints
// the logic picks. It is safe for concurrent use.
type Engine struct {
	logic Logic
	log   logr.Logger
	rp    *httputil.ReverseProxy
	pool  *pool
	up    upTransport
	// h1 carries the net/http path's requests with a body or an upgrade; h2c those to h2c
	// backends.
	h1, h2c *http.Transport

	upgrades tracker
	// trusted are the proxies whose X-Forwarded-* headers are passed on (see h1.Peer).
	trusted h1.TrustedProxies
}

// Options configure an Engine.
type Options struct {
	Log logr.Logger
	// DialContext dials upstream connections (nil: a net.Dialer with DialTimeout).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	DialTimeout time.Duration
	// DeadPeerTimeout closes an upstream connection whose peer acknowledged nothing for about this
	// long (see watchDeadPeer); 0 means DefaultDeadPeerTimeout, a negative value turns it off.
	DeadPeerTimeout time.Duration
	// MaxConnsPerEndpoint bounds the connections open to one endpoint; more requests wait for one.
	MaxConnsPerEndpoint int
	// MaxWaitingPerEndpoint bounds the requests waiting in line for a connection to one endpoint
	// (0: no bound); one more fails with ErrUpstreamBusy. The line of the net/http path's requests
	// with a body or an upgrade (http.Transport's own) is not bounded by it.
	MaxWaitingPerEndpoint int
	// Now is the clock of the upstream pool's idle timeouts; nil means time.Now.
	Now func() time.Time
	// Discarded counts upstream connections closed because of bytes nobody asked for; nil
	// counters count nothing.
	Discarded DiscardCounters
	// TrustedProxies are the peers whose X-Forwarded-* headers are passed on; from every other
	// peer they are set from what the engine saw (h1.Peer, rules.go). Empty trusts nobody.
	TrustedProxies h1.TrustedProxies
}

type nopCounter struct{}

func (nopCounter) Inc() {}

// New returns an engine serving logic's requests.
func New(logic Logic, o Options) *Engine {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Discarded.Leftover == nil {
		o.Discarded.Leftover = nopCounter{}
	}
	if o.Discarded.Unsolicited == nil {
		o.Discarded.Unsolicited = nopCounter{}
	}
	e := &Engine{logic: logic, log: o.Log, pool: newPool(o), trusted: o.TrustedProxies}
	e.up = upTransport{p: e.pool}
	e.h1, e.h2c = newTransports(e.pool.dial, o)
	e.rp = e.newReverseProxy()
	return e
}

// ServeHTTP is the net/http path: route → count → wait → forward, in the Exchange contract's
// order, as the event loops take the same steps (loop_request_linux.go). It blocks while the
// request is held and until the response (or the WebSocket) ends.
func (e *Engine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := e.logic.Route(r.Host, r.URL.Path, r.Header)
	if x == nil {
		writeReply(w, e.logic.Unrouted(w.Header()))
		return
	}
	target, set := forwardedAs(x, Request{Method: r.Method, Target: r.RequestURI, Host: r.Host, ProtoMajor: r.ProtoMajor, ProtoMinor: r.ProtoMinor, TLS: r.TLS != nil})
	x.Begin()
	defer x.End()
	if !x.Ready() {
		if err := wait(x, r.Context(), waitingOf(r)); err != nil {
			rep := x.Fail(err, w.Header())
			if unreadBody(r) && !rep.Abort {
				// The event loops close such a connection too (fail): what is left of the body
				// is not read, so a client trickling it cannot keep a refused request in memory.
				w.Header().Set("Connection", "close")
				rep.close = true
			}
			writeReply(w, rep)
			return
		}
	}
	x.Forwarding()
	e.forward(w, r, x, target, set)
}

// unreadBody reports whether r is an HTTP/1 request with a body nobody has read yet.
func unreadBody(r *http.Request) bool {
	return r.ProtoMajor == 1 && (r.ContentLength != 0 || len(r.TransferEncoding) > 0)
}

// writeReply sends an answer the logic chose.
func writeReply(w http.ResponseWriter, rep Reply) {
	if rep.Abort {
		abortResponse(w)
		return
	}
	if rep.close {
		// net/http reads up to 256 KiB of an unread body after the handler, even when the answer
		// closes the connection: a client trickling its body would keep the request (and its head)
		// in memory. An expired read deadline ends that read at once.
		defer func() { _ = http.NewResponseController(w).SetReadDeadline(time.Now()) }()
	}
	w.WriteHeader(rep.Code)
	_, _ = io.WriteString(w, rep.Body) // a failed write means the client went away
}

// abortResponse ends a response that must not be sent (its client went away, or closed its sending
// side): the connection is closed without an answer. A ResponseWriter merely left untouched would
// be completed by the server with an empty 200 when the handler returns, a success the upstream
// never sent; it is aborted the way net/http provides, by panicking with http.ErrAbortHandler (the
// server closes the connection, the handlers' deferred steps still run).
func abortResponse(http.ResponseWriter) {
	panic(http.ErrAbortHandler)
}

// call is one forwarded request's engine state; it travels to the RoundTripper and the
// ReverseProxy hooks in the request context.
type call struct {
	x         Exchange
	responded bool        // Responded was called: a later failure cuts the response off, Fail is not called
	set       http.Header // set on the forwarded request (see Traced)
	client    context.Context
	cancels   []context.CancelFunc
}

type callKey struct{}

var callPool = sync.Pool{New: func() any { return new(call) }}

// forward sends the request through the ReverseProxy, to target instead of the client's target
// when the logic rewrote it (see Rewriter; "" keeps the client's).
func (e *Engine) forward(w http.ResponseWriter, r *http.Request, x Exchange, target string, set http.Header) {
	upgrade := r.Header.Get("Upgrade") != ""
	if upgrade {
		e.upgrades.add(1)
		defer e.upgrades.add(-1)
	}
	c := callPool.Get().(*call)
	c.x, c.client, c.set = x, r.Context(), set
	defer func() {
		for _, cancel := range c.cancels {
			cancel()
		}
		clear(c.cancels)
		*c = call{cancels: c.cancels[:0]}
		callPool.Put(c)
	}()
	ctx := context.WithValue(r.Context(), callKey{}, c)
	plan := x.Plan()
	// An upgraded connection (a WebSocket) lives on past its request: the request timeout would cut
	// it off (the ReverseProxy closes the backend connection when the request's context ends). The
	// response-header timeout still bounds the wait for its 101.
	if d := plan.RequestTimeout; d > 0 && !upgrade {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, d, ErrRequestTimeout)
		defer cancel()
	}
	out := r.WithContext(ctx)
	if target != "" {
		// The ReverseProxy forwards its request's URL (h1.Rewrite): a copy carries the target.
		u := *r.URL
		h1.SetURLTarget(&u, target)
		out.URL = &u
	}
	e.rp.ServeHTTP(w, out)
}

// WaitUpgrades blocks until every upgraded connection (WebSocket) forwarded by e has ended or ctx
// ends. http.Server.Shutdown does not wait for hijacked connections; the drain does this instead.
func (e *Engine) WaitUpgrades(ctx context.Context) error { return e.upgrades.wait(ctx) }

// newTransports returns the net/http path's transports besides the pool's: http.Transport for
// HTTP/1.1 requests with a body or an upgrade, and h2c (HTTP/2 with prior knowledge, for Service
// ports with appProtocol kubernetes.io/h2c). One of each serves every app.
func newTransports(dial func(ctx context.Context, network, addr string) (net.Conn, error), o Options) (h1, h2c *http.Transport) {
	h1 = &http.Transport{
		Proxy:       nil, // only table destinations are dialled, never an environment proxy
		DialContext: dial,
		// The default of 2 idle connections per pod would make a busy app open and close a
		// connection for most requests.
		MaxIdleConnsPerHost:    o.MaxConnsPerEndpoint,
		MaxConnsPerHost:        o.MaxConnsPerEndpoint,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: maxResponseHead,
		// Bodies pass through untouched; the client negotiated its own encoding.
		DisableCompression: true,
		ReadBufferSize:     16 << 10,
		WriteBufferSize:    16 << 10,
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c = &http.Transport{
		Proxy:                  nil,
		DialContext:            dial,
		Protocols:              &protos,
		MaxConnsPerHost:        o.MaxConnsPerEndpoint,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxResponseHead,
		DisableCompression:     true,
	}
	return h1, h2c
}

func (e *Engine) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		// The outbound request keeps the client's Host header; RoundTrip sets URL.Host to the chosen
		// endpoint. ReverseProxy removed the hop-by-hop headers and the inbound X-Forwarded-*
		// before Rewrite, which applies the forwarding rules for the request's peer.
		Rewrite:        e.trusted.Rewrite,
		Transport:      e,
		BufferPool:     bufferPool{},
		ModifyResponse: e.modifyResponse,
		ErrorHandler:   e.errorHandler,
		ErrorLog:       log.New(logWriter{e.log}, "", 0),
	}
}

// RoundTrip sends one forwarded request to an endpoint the request's exchange picks. When a
// connection cannot be made and no byte of the request body was read, another one is tried (see
// tryEndpoints).
func (e *Engine) RoundTrip(req *http.Request) (*http.Response, error) {
	c, _ := req.Context().Value(callKey{}).(*call)
	if c == nil {
		return nil, fmt.Errorf("proxy: request for %s has no forwarding state", req.Host)
	}
	var tr http.RoundTripper = e.h1
	switch {
	case c.x.Plan().H2C:
		tr = e.h2c
	case fastEligible(req):
		tr = e.up
	}
	for k, vs := range c.set { // req is the ReverseProxy's copy
		req.Header[k] = vs
	}
	var body *bodyGuard
	if req.Body != nil && req.Body != http.NoBody {
		body = &bodyGuard{rc: req.Body}
		req.Body = body
	}
	var resp *http.Response
	err := tryEndpoints(req.Context(), c.x, func(addr string) (err error) {
		req.URL.Host = addr
		resp, err = e.attempt(tr, req, c)
		return err
	}, func(err error) bool { return IsDialError(err) && (body == nil || !body.read) })
	return resp, err
}

// tryEndpoints calls try with the address of an endpoint x picks. When try fails with an error
// tryAgain accepts (a connection that could not be made, with nothing sent) and x allows another
// attempt (Exchange.Refused), the next endpoint is tried. It returns try's last result, or
// ErrNoEndpoint when none was left. Once ctx ended (the client went away, the drain deadline
// passed) a failure is returned as it is: a connect it cut short says nothing about the endpoint.
func tryEndpoints(ctx context.Context, x Exchange, try func(addr string) error, tryAgain func(error) bool) error {
	for n := 0; ; n++ {
		addr, ok := x.Pick(n)
		if !ok {
			return fmt.Errorf("forwarding: %w", ErrNoEndpoint)
		}
		err := try(addr)
		if err == nil {
			x.Forwarded(addr)
			return nil
		}
		if ctx.Err() != nil || !tryAgain(err) || !tryNext(x, addr, n, err) {
			return err
		}
	}
}

// clientGone marks err as the client's going away (ErrClientGone): the request's context ended
// (net/http path) or the loop saw the client leave.
func clientGone(err error) error { return fmt.Errorf("%w: %w", ErrClientGone, err) }

// tryNext tells x that a connection to addr could not be made with nothing sent, on attempt n,
// and reports whether the next endpoint is to be tried: x allows it (Exchange.Refused) and fewer
// than MaxAttempts were made. Both paths decide with it.
func tryNext(x Exchange, addr string, n int, err error) bool {
	return n+1 < MaxAttempts && x.Refused(addr, n, err)
}

// attempt is one RoundTrip on tr under the exchange's response-header timeout.
func (e *Engine) attempt(tr http.RoundTripper, req *http.Request, c *call) (*http.Response, error) {
	d := c.x.Plan().ResponseHeaderTimeout
	ctx := req.Context()
	if d > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		// The context must outlive the response body, so it is cancelled when the request ends.
		c.cancels = append(c.cancels, func() { cancel(nil) })
		t := time.AfterFunc(d, func() { cancel(ErrResponseHeaderTimeout) })
		defer t.Stop()
		req = req.WithContext(ctx)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && cause != context.Canceled && cause != err {
			return nil, fmt.Errorf("forwarding to %s: %w: %w", req.URL.Host, cause, err)
		}
		return nil, fmt.Errorf("forwarding to %s: %w", req.URL.Host, err)
	}
	return resp, nil
}

func (e *Engine) modifyResponse(resp *http.Response) error {
	if resp.StatusCode < 100 {
		return h1.ErrStatus // the ReverseProxy would panic writing it (the connection closes unanswered)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The ReverseProxy fails these after ModifyResponse; failed here, the exchange hears of
		// the failure (Fail) instead of a status it never sees through.
		reqUp, resUp := resp.Request.Header.Get("Upgrade"), resp.Header.Get("Upgrade")
		if reqUp == "" {
			return h1.ErrSwitchedProtocols
		}
		if !strings.EqualFold(reqUp, resUp) {
			return fmt.Errorf("backend switched to protocol %q when %q was requested", resUp, reqUp)
		}
	}
	if c, _ := resp.Request.Context().Value(callKey{}).(*call); c != nil {
		c.responded = true
		c.x.Responded(resp.StatusCode, resp.Header)
	}
	return nil
}

// errorHandler answers a request the upstream did not answer. A client that went away is reported
// as such, never as an upstream failure.
func (e *Engine) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	c, _ := r.Context().Value(callKey{}).(*call)
	if c == nil {
		e.log.Error(err, "forwarding a request without forwarding state")
		abortResponse(w)
		return
	}
	if c.responded {
		e.log.V(1).Info("relaying the response failed; cutting it off", "host", r.Host, "error", err.Error())
		abortResponse(w)
		return
	}
	if c.client.Err() != nil {
		err = clientGone(err)
	}
	writeReply(w, c.x.Fail(err, w.Header()))
}

// bodyGuard records whether the transport read any byte of the request body, and keeps the body open
// across attempts (a Transport closes the body when a connection fails).
type bodyGuard struct {
	rc   io.ReadCloser
	read bool
}

func (g *bodyGuard) Read(b []byte) (int, error) {
	n, err := g.rc.Read(b)
	if n > 0 {
		g.read = true
	}
	return n, err
}

// Close is a no-op: the server closes the inbound body when the handler returns.
func (g *bodyGuard) Close() error { return nil }

// bufferPool lends 32 KiB copy buffers to the ReverseProxy.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(buffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// logWriter sends the ReverseProxy's own log lines to logr.
type logWriter struct{ log logr.Logger }

func (l logWriter) Write(b []byte) (int, error) {
	l.log.V(1).Info("reverse proxy", "message", strings.TrimSpace(string(b)))
	return len(b), nil
}
