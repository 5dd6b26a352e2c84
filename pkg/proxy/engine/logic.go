// Package engine is the interceptor's HTTP engine: the servers and their HTTP/1.1 fast path, the
// event loops, the hand-written request and response parsers and writers, the forwarding paths and
// the upstream connection pools. It serves requests for a request logic it knows only through Logic
// and Exchange (pkg/proxy implements them), and depends on nothing else of the project.
package engine

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// The seam between the HTTP engine (servers, event loops, parsers and writers, forwarding, upstream
// pools) and the request logic (routing table, counts, holding, endpoint choice, error answers).
// The engine calls the logic only through Logic and Exchange.

// Header is a request's header lines as routes match them.
type Header interface {
	Values(key string) []string
}

// Logic is the request logic the engine serves requests for.
type Logic interface {
	// Route returns the exchange of a request to host and path (h: its header lines, for
	// header-matched routes), nil when no route matches. It counts nothing: a fast path may still
	// leave the request to the general one (Exchange.Release). Cost: a table match.
	Route(host, path string, h Header) Exchange
	// Unrouted counts a request without a route and writes its answer's headers to h.
	Unrouted(h http.Header) Reply
}

// Plan is how an exchange's request is forwarded.
type Plan struct {
	// H2C: the backend speaks HTTP/2 with prior knowledge.
	H2C bool
	// ViaService: the request goes to the Service's address (Pick returns it), not to a pod.
	ViaService bool
	// RequestTimeout bounds the whole forwarded request; 0 means none.
	RequestTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response head; 0 means none.
	ResponseHeaderTimeout time.Duration
}

// Exchange is one routed request as the request logic sees it. The engine calls, in this order:
// Begin (count), Wait when not Ready (hold), Forwarding (in flight), Pick/Refused/Forwarded for
// each attempt, Responded or Fail, and End; or Release alone for a request a fast path leaves to
// the general one. An Exchange is used by one goroutine at a time and not after End or Release.
type Exchange interface {
	// Plan is how the request is forwarded (fixed for the exchange, except after a Wait that
	// switched to a fallback).
	Plan() Plan
	// Ready reports whether the app has a ready endpoint now.
	Ready() bool
	// Begin counts the request as received.
	Begin()
	// Wait holds the request until the app has a ready endpoint, counted as held. It returns an
	// error (for Fail) when the request cannot be forwarded.
	Wait(ctx context.Context) error
	// Forwarding counts the request as in flight (and no longer held).
	Forwarding()
	// Pick returns the address of the endpoint for attempt (0 for the first), skipping those it
	// returned for the earlier attempts of the exchange; ok false when none is left.
	Pick(attempt int) (addr string, ok bool)
	// Refused tells that a connection to addr could not be made with nothing sent, on attempt
	// (0 for the first). It reports whether another endpoint may be tried (addr is then avoided
	// for a while).
	Refused(addr string, attempt int, err error) bool
	// Forwarded tells that the request reached addr.
	Forwarded(addr string)
	// Responded records the response's status and adds the logic's header fields to h, the
	// response's header (a session cookie, the cold-start headers). Every path calls it once the
	// response head is known and before it is written; a path that passes the upstream's head on as
	// it came (the raw path, the event loops) hands an empty h and writes what the logic put in it:
	// those fields replace the upstream's of the same names, but Set-Cookie, which is added.
	Responded(code int, h http.Header)
	// Fail records a failure and returns its answer; its headers are written to h.
	Fail(err error, h http.Header) Reply
	// End ends the counts and records the request.
	End()
	// Release drops an exchange that was not begun.
	Release()
}

// Traced is an Exchange that follows its request further (pkg/proxy's, which traces requests when
// tracing is on). The engine calls Trace once it has decided to serve the request on its path: after
// Route and before Begin (Release may still follow, when a fast path leaves the request to the
// general one after all). The header fields Trace returns are set on the forwarded request on every
// path, replacing the request's own fields of the same names (a name without values removes them);
// nil sets nothing. Trace must return at once and cheaply when the exchange traces nothing.
type Traced interface {
	Trace(r Request) http.Header
}

// Rewriter is an Exchange that forwards its request with another target than the client sent (a
// path prefix rewrite). The engine calls Rewrite where it calls Trace (after Route, before Begin,
// on every path), before Trace, with the same Request. It returns the request target to forward in
// origin form (path and query as on the wire; "" forwards r.Target as it came) and header fields set
// on the forwarded request as Trace's are (nil: none; the engine only reads them).
type Rewriter interface {
	Rewrite(r Request) (target string, set http.Header)
}

// forwardedAs returns what the engine forwards instead of the request's own: the target (""
// keeps it) and the header fields to set, of x's Rewrite and Trace together.
func forwardedAs(x Exchange, r Request) (target string, set http.Header) {
	if rw, ok := x.(Rewriter); ok {
		target, set = rw.Rewrite(r)
	}
	if t, ok := x.(Traced); ok {
		if ts := t.Trace(r); len(ts) > 0 {
			if len(set) == 0 {
				return target, ts
			}
			merged := make(http.Header, len(set)+len(ts))
			for k, vs := range set {
				merged[k] = vs
			}
			for k, vs := range ts {
				merged[k] = vs
			}
			set = merged
		}
	}
	return target, set
}

// Request is what the engine tells a Traced exchange about its request.
type Request struct {
	// Method and Target are the request line's, the target as the client sent it (path and query).
	Method, Target string
	// Host is the request's Host (its port included when it has one).
	Host string
	// ProtoMajor and ProtoMinor are the client's HTTP version (1.1, 2).
	ProtoMajor, ProtoMinor int
	// TLS: the request arrived over TLS (the TLS port).
	TLS bool
}

// Reply is an answer the logic chose (an error, a placeholder).
type Reply struct {
	Code int
	Body string
	// Abort: no answer is to be sent; the connection is closed (the client went away).
	Abort bool
	// close: the connection is closed after the answer, without reading what is left of the
	// request's body (the answer's header says "Connection: close"); the engine's own decision.
	close bool
}

// Errors the engine reports to Exchange.Fail.
var (
	// ErrNoEndpoint: every candidate endpoint failed to accept a connection.
	ErrNoEndpoint = errors.New("no endpoint accepted the connection")
	// ErrResponseHeaderTimeout: the upstream sent no response headers within the app's timeout.
	ErrResponseHeaderTimeout = errors.New("timeout awaiting response headers")
	// ErrRequestTimeout: the whole forwarded request took longer than the app's request timeout.
	ErrRequestTimeout = errors.New("request timeout")
	// ErrUpstreamBusy: MaxWaitingPerEndpoint requests already wait for a connection to the endpoint.
	ErrUpstreamBusy = errors.New("too many requests waiting for a connection to the endpoint")
	// ErrClientGone: the client went away (or the interceptor's drain deadline cut the request);
	// logged as status 499 and never counted as an upstream failure.
	ErrClientGone = errors.New("client went away")
)

// Counter is a count the engine increments (a prometheus.Counter).
type Counter interface{ Inc() }

// DiscardCounters count upstream connections closed instead of reused because the upstream sent
// bytes that belong to no request: a response desync averted.
type DiscardCounters struct {
	Leftover    Counter // bytes after the end of a response, seen when it ended
	Unsolicited Counter // bytes arriving on an idle connection, seen before its reuse
}

// IsDialError reports whether err happened while connecting, so that no byte of the request reached
// the upstream and another endpoint may be tried.
func IsDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// MaxAttempts bounds the endpoints tried for one request, whatever Exchange.Refused allows, so that
// the tried list fits a small array on the stack.
const MaxAttempts = 8
