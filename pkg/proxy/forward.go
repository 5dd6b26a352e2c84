package proxy

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

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
)

// forwardedKeep are inbound X-Forwarded-* headers passed on unchanged when present.
var forwardedKeep = []string{"X-Forwarded-Proto", "X-Forwarded-Host"}

// maxAttemptsCap bounds MaxDialAttempts so the tried list fits a small array on the stack.
const maxAttemptsCap = 8

// newTransports returns the shared upstream transports: the synchronous HTTP/1.1 fast path for
// requests without a body (see h1Transport), http.Transport for HTTP/1.1 requests with a body or an
// upgrade, and h2c (HTTP/2 with prior knowledge, for Service ports with appProtocol
// kubernetes.io/h2c). One of each serves every app, so connections to a pod are reused.
func newTransports(o Options) (fast *h1Transport, h1, h2c *http.Transport) {
	dial := o.DialContext
	if dial == nil {
		dial = (&net.Dialer{Timeout: o.DialTimeout, KeepAlive: 30 * time.Second}).DialContext
	}
	fast = &h1Transport{dial: dial, maxIdle: o.MaxConnsPerEndpoint, maxConns: o.MaxConnsPerEndpoint, idleTimeout: 90 * time.Second, now: o.Now, discarded: o.Metrics.discarded}
	h1 = &http.Transport{
		Proxy:       nil, // only table destinations are dialled, never an environment proxy
		DialContext: dial,
		// The default of 2 idle connections per pod would make a busy app open and close a
		// connection for most requests.
		MaxIdleConnsPerHost:   o.MaxConnsPerEndpoint,
		MaxConnsPerHost:       o.MaxConnsPerEndpoint,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Bodies pass through untouched; the client negotiated its own encoding.
		DisableCompression: true,
		ReadBufferSize:     16 << 10,
		WriteBufferSize:    16 << 10,
	}
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2c = &http.Transport{
		Proxy:              nil,
		DialContext:        dial,
		Protocols:          &protos,
		MaxConnsPerHost:    o.MaxConnsPerEndpoint,
		IdleConnTimeout:    90 * time.Second,
		DisableCompression: true,
	}
	return fast, h1, h2c
}

func (p *Proxy) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		// The outbound request keeps the client's Host header; RoundTrip sets URL.Host to the chosen
		// endpoint. Hop-by-hop headers are removed by ReverseProxy before Rewrite.
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			// The target goes out as the client sent it, as on the fast paths (and as nginx passes
			// it): ReverseProxy drops the query parameters it cannot parse ("a=1;b=2", "%zz")
			// before Rewrite, which would make the backend see another request than the client sent.
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			dropUnderscoreHeaders(pr.Out.Header)
			// ReverseProxy dropped the inbound X-Forwarded-*; restore the chain so that
			// SetXForwarded appends this hop's client to it.
			if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
				pr.Out.Header["X-Forwarded-For"] = prior
			}
			pr.SetXForwarded()
			// An ingress in front of the interceptor knows the original scheme and host better
			// than we do (it may have terminated TLS): keep what it said.
			for _, h := range forwardedKeep {
				if v := pr.In.Header[h]; len(v) > 0 {
					pr.Out.Header[h] = v
				}
			}
		},
		Transport:      p,
		BufferPool:     bufferPool{},
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		ErrorLog:       log.New(logWriter{p.log}, "", 0),
	}
}

// RoundTrip sends one forwarded request to an endpoint of the request's backend: a ready pod chosen
// round robin among the zone's candidates, or the Service address for ViaService (or a fallback
// without known endpoints). When a connection cannot be made and no byte of the request body was
// read, the endpoint is marked bad and another one is tried, up to MaxDialAttempts.
func (p *Proxy) RoundTrip(req *http.Request) (*http.Response, error) {
	st, _ := req.Context().Value(stateKey{}).(*state)
	if st == nil {
		return nil, fmt.Errorf("proxy: request for %s has no forwarding state", req.Host)
	}
	b := st.backend
	var tr http.RoundTripper = p.h1
	switch {
	case b.protocol == routing.ProtocolH2C:
		tr = p.h2c
	case fastEligible(req):
		tr = p.fast
	}
	if st.app.entry.ViaService || st.set.Len() == 0 {
		req.URL.Host = b.serviceAddr
		return p.attempt(tr, req, st)
	}
	var body *bodyGuard
	if req.Body != nil && req.Body != http.NoBody {
		body = &bodyGuard{rc: req.Body}
		req.Body = body
	}
	var resp *http.Response
	err := p.forEndpoint(req.Context(), st.app, b, st.set, func(addr string) (err error) {
		req.URL.Host = addr
		resp, err = p.attempt(tr, req, st)
		return err
	}, func(err error) bool { return isDialError(err) && (body == nil || !body.read) })
	return resp, err
}

// forEndpoint calls try with the address of an endpoint of b in set: round robin over the zone's
// candidates (all endpoints once those all failed), skipping endpoints marked bad while others
// remain. When try fails with an error tryAgain accepts (a connection that could not be made, with
// nothing sent), the endpoint is marked bad for BadEndpointFor and the next one is tried, up to
// MaxDialAttempts endpoints. It returns try's last result, or ErrNoEndpoint when none was left.
//
// Once ctx ended (the client went away, the drain deadline passed) a failure is returned as it is:
// a connect it cut short says nothing about the endpoint.
func (p *Proxy) forEndpoint(ctx context.Context, a *app, b *backend, set *endpoints.Set, try func(addr string) error, tryAgain func(error) bool) error {
	zone := p.appZone(a)
	view := b.candidates(set, zone)
	cands := view.cands
	maxAttempts := min(p.opts.MaxDialAttempts, maxAttemptsCap, len(view.all))
	var tried [maxAttemptsCap]string
	for n := 0; ; n++ {
		var now time.Time
		if n > 0 || b.hasBad() { // the clock is only needed to expire bad marks
			now = p.opts.Now()
		}
		c, ok := b.pick(cands, tried[:n], now)
		if !ok && len(cands) < len(view.all) {
			cands = view.all // the zone's endpoints all failed: use every zone
			c, ok = b.pick(cands, tried[:n], now)
		}
		if !ok {
			return fmt.Errorf("forwarding to %s: %w", b.key, ErrNoEndpoint)
		}
		err := try(c.addr)
		if err == nil {
			countCrossZone(a, zone, c)
			return nil
		}
		if ctx.Err() != nil || !tryAgain(err) || n+1 >= maxAttempts {
			return err
		}
		if now.IsZero() {
			now = p.opts.Now()
		}
		b.markBad(c.addr, now, now.Add(p.opts.BadEndpointFor))
		p.log.V(1).Info("endpoint refused connection; trying another", "app", a.key, "endpoint", c.addr, "error", err.Error())
		tried[n] = c.addr
	}
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
		a.series().crossZone.Inc()
	}
}

// attempt is one RoundTrip on tr under the app's response-header timeout.
func (p *Proxy) attempt(tr http.RoundTripper, req *http.Request, st *state) (*http.Response, error) {
	d := st.app.responseHeader
	ctx := req.Context()
	if d > 0 {
		var cancel context.CancelCauseFunc
		ctx, cancel = context.WithCancelCause(ctx)
		// The context must outlive the response body, so it is cancelled when the request ends.
		st.cancels = append(st.cancels, func() { cancel(nil) })
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

func (p *Proxy) modifyResponse(resp *http.Response) error {
	if st, _ := resp.Request.Context().Value(stateKey{}).(*state); st != nil {
		st.code = resp.StatusCode
		p.coldHeaders(resp.Header, st)
	}
	return nil
}

// errorHandler answers a request the upstream did not answer. A client that went away is reported
// as such, never as an upstream failure.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	st, _ := r.Context().Value(stateKey{}).(*state)
	if st == nil {
		p.fail(w, nil, err)
		return
	}
	if st.client.Err() != nil {
		err = fmt.Errorf("%w: %w", ErrClientGone, err)
	}
	p.fail(w, st, err)
}

// dropUnderscoreHeaders removes the request headers whose names contain "_", as nginx does by
// default (underscores_in_headers off): servers and frameworks that map header names to variables
// read "Transfer_Encoding" or "X_Forwarded_For" as the header with "-", so such a name could
// smuggle a header past the rules above. Routes still match on them (the match runs first).
func dropUnderscoreHeaders(h http.Header) {
	for k := range h {
		if strings.IndexByte(k, '_') >= 0 {
			delete(h, k)
		}
	}
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
