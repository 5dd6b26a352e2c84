package engine

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fakeLogic is a small request logic for the engine's tests: routes by host (and, optionally, a
// header) to services, each with the endpoints the test sets, and exchanges that count what the
// engine tells them and check that it calls them in the contract's order (see Exchange). A
// violation is recorded and fails the test (see harness).
type fakeLogic struct {
	routes []route

	mu         sync.Mutex
	eps        map[string][]string // by service
	ready      map[string]chan struct{}
	waiting    map[string]int
	next       map[string]int        // round robin: the endpoint the next exchange starts at
	apps       map[string]*appCounts // by route name
	violations []string
	unrouted   atomic.Int64
	// onRoute, when set, is called with the host of every request routed, on the goroutine that
	// routes it (a loop's).
	onRoute atomic.Pointer[func(host string)]
}

// route is one app of a fakeLogic.
type route struct {
	name, host, svc string
	// header, when set, must be present (with value, when set) for the route to match; a route
	// with a header wins over one without.
	header, value string
	plan          Plan
	// serviceAddr is the address Pick returns for a ViaService plan.
	serviceAddr string
	// readiness bounds a hold (0: none); then the request fails with errReadiness.
	readiness time.Duration
	// panics: Responded panics (a bug in the request logic).
	panics bool
	// rewrite is the target Rewrite returns ("" keeps the client's).
	rewrite string
}

func entry(name, host, svc string) route { return route{name: name, host: host, svc: svc} }

// key names a service for fakeLogic.Set (as the proxy's tests name them).
func key(svc string) string { return svc }

// appCounts are an app's counts, as the request logic would keep them.
type appCounts struct {
	inFlight, held int64
	requests       uint64
	codes          map[int]int
	fails          int // failures that were not the client's (upstream errors)
	coldStarts     int
}

var errReadiness = errors.New("readiness timeout")

func newFakeLogic(routes ...route) *fakeLogic {
	return &fakeLogic{routes: routes, eps: map[string][]string{}, ready: map[string]chan struct{}{},
		waiting: map[string]int{}, next: map[string]int{}, apps: map[string]*appCounts{}}
}

// Set gives service svc the endpoints eps (none: the app is cold).
func (l *fakeLogic) Set(svc string, eps ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.eps[svc] = eps
	ch := l.ready[svc]
	if len(eps) > 0 && ch != nil {
		close(ch)
		delete(l.ready, svc)
	}
}

// WaitWaiting waits until n requests wait for svc.
func (l *fakeLogic) WaitWaiting(ctx context.Context, svc string, n int) error {
	for {
		l.mu.Lock()
		got := l.waiting[svc]
		l.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d requests wait for %s, want %d: %w", got, svc, n, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// count returns an app's in-flight and held requests and its request count ("ns/app" or "app").
func (l *fakeLogic) count(name string) (inFlight, held int64, requests uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.app(strings.TrimPrefix(name, "ns/"))
	return a.inFlight, a.held, a.requests
}

// codes returns how many requests of an app ended with a status of class ("2xx", "5xx", "499").
func (l *fakeLogic) codes(name, class string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for code, c := range l.app(strings.TrimPrefix(name, "ns/")).codes {
		if codeClass(code) == class {
			n += c
		}
	}
	return n
}

// fails returns how many requests of an app failed otherwise than by the client leaving.
func (l *fakeLogic) fails(name string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.app(strings.TrimPrefix(name, "ns/")).fails
}

func codeClass(code int) string {
	if code == 499 {
		return "499"
	}
	return strconv.Itoa(code/100) + "xx"
}

// app returns a route's counts; l.mu is held.
func (l *fakeLogic) app(name string) *appCounts {
	a := l.apps[name]
	if a == nil {
		a = &appCounts{codes: map[int]int{}}
		l.apps[name] = a
	}
	return a
}

func (l *fakeLogic) violate(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violations = append(l.violations, fmt.Sprintf(format, args...))
}

// Route implements Logic.
func (l *fakeLogic) Route(host, path string, h Header) Exchange {
	host, _, _ = strings.Cut(strings.ToLower(host), ":")
	if f := l.onRoute.Load(); f != nil {
		(*f)(host)
	}
	var best *route
	for i := range l.routes {
		r := &l.routes[i]
		if r.host != host {
			continue
		}
		if r.header != "" {
			vs := h.Values(r.header)
			if len(vs) == 0 || r.value != "" && !contains(vs, r.value) {
				continue
			}
			best = r
			break
		}
		if best == nil {
			best = r
		}
	}
	if best == nil {
		return nil
	}
	return &fakeExchange{l: l, r: best, state: xRouted}
}

func contains(vs []string, v string) bool {
	for _, x := range vs {
		if x == v {
			return true
		}
	}
	return false
}

// Unrouted implements Logic.
func (l *fakeLogic) Unrouted(h http.Header) Reply {
	l.unrouted.Add(1)
	return errorAnswer(h, http.StatusNotFound, "no_route")
}

func errorAnswer(h http.Header, code int, reason string) Reply {
	body := http.StatusText(code) + ": " + reason + "\n"
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	return Reply{Code: code, Body: body}
}

// fakeExchange is one request of a fakeLogic. Pick goes round robin over the service's endpoints
// (skipping those tried for the exchange); Refused allows as many attempts as there are endpoints.
type fakeExchange struct {
	l       *fakeLogic
	r       *route
	state   xState
	held    bool
	cold    bool
	code    int
	tried   []string
	start   int
	inCount bool
}

// xState is where an exchange is in the contract's order.
type xState int

const (
	xRouted xState = iota
	xBegun
	xWaited
	xForwarding
	xDone // Responded or Fail
	xEnded
	xReleased
)

func (x *fakeExchange) want(call string, states ...xState) {
	for _, s := range states {
		if x.state == s {
			return
		}
	}
	x.l.violate("%s called in state %d (%s)", call, x.state, x.r.name)
}

func (x *fakeExchange) Plan() Plan {
	if x.state == xEnded || x.state == xReleased {
		x.l.violate("Plan after the end (%s)", x.r.name)
	}
	return x.r.plan
}

func (x *fakeExchange) Ready() bool {
	x.want("Ready", xBegun, xRouted)
	if x.r.plan.ViaService {
		return true
	}
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	return len(x.l.eps[x.r.svc]) > 0
}

func (x *fakeExchange) Begin() {
	x.want("Begin", xRouted)
	x.state = xBegun
	x.l.mu.Lock()
	x.l.app(x.r.name).requests++
	x.l.mu.Unlock()
}

func (x *fakeExchange) Wait(ctx context.Context) error {
	x.want("Wait", xBegun)
	x.state = xWaited
	l, svc := x.l, x.r.svc
	l.mu.Lock()
	x.held, x.cold = true, true
	a := l.app(x.r.name)
	a.held++
	a.coldStarts++
	l.waiting[svc]++
	ch := l.ready[svc]
	if ch == nil {
		ch = make(chan struct{})
		if len(l.eps[svc]) > 0 {
			close(ch)
		} else {
			l.ready[svc] = ch
		}
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.waiting[svc]--
		l.mu.Unlock()
	}()
	var timeout <-chan time.Time
	if x.r.readiness > 0 {
		t := time.NewTimer(x.r.readiness)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-ch:
		return nil
	case <-timeout:
		return fmt.Errorf("holding %s: %w", x.r.name, errReadiness)
	case <-ctx.Done():
		return fmt.Errorf("holding %s: %w", x.r.name, ErrClientGone)
	}
}

func (x *fakeExchange) Forwarding() {
	x.want("Forwarding", xBegun, xWaited)
	x.state = xForwarding
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	a := x.l.app(x.r.name)
	a.inFlight++
	x.inCount = true
	if x.held {
		a.held--
		x.held = false
	}
}

func (x *fakeExchange) Pick(attempt int) (string, bool) {
	x.want("Pick", xForwarding)
	if x.r.plan.ViaService {
		return x.r.serviceAddr, attempt == 0
	}
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	eps := x.l.eps[x.r.svc]
	if attempt == 0 && len(eps) > 0 {
		x.start = x.l.next[x.r.svc] % len(eps)
		x.l.next[x.r.svc]++
	}
	for i := range eps {
		if ep := eps[(x.start+i)%len(eps)]; !contains(x.tried, ep) {
			x.tried = append(x.tried, ep)
			return ep, true
		}
	}
	return "", false
}

func (x *fakeExchange) Refused(addr string, attempt int, err error) bool {
	x.want("Refused", xForwarding)
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	return attempt+1 < len(x.l.eps[x.r.svc])
}

func (x *fakeExchange) Forwarded(addr string) { x.want("Forwarded", xForwarding) }

func (x *fakeExchange) Responded(code int, h http.Header) {
	if x.r.panics {
		panic("the request logic failed")
	}
	x.want("Responded", xForwarding)
	x.state = xDone
	x.code = code
	if x.cold && h != nil {
		h.Set("X-Cold-Start", "true")
	}
}

// Fail answers as the proxy's logic does: the client gone is 499 with nothing sent, a hold that
// timed out 504, timeouts 504, anything else 502.
func (x *fakeExchange) Fail(err error, h http.Header) Reply {
	x.want("Fail", xBegun, xWaited, xForwarding)
	x.state = xDone
	code, reason := http.StatusBadGateway, "upstream"
	switch {
	case errors.Is(err, ErrClientGone):
		x.code = 499
		return Reply{Code: 499, Abort: true}
	case errors.Is(err, errReadiness):
		code, reason = http.StatusGatewayTimeout, "readiness_timeout"
	case errors.Is(err, ErrRequestTimeout):
		code, reason = http.StatusGatewayTimeout, "request_timeout"
	case errors.Is(err, ErrResponseHeaderTimeout):
		code, reason = http.StatusGatewayTimeout, "response_header_timeout"
	case errors.Is(err, ErrNoEndpoint), IsDialError(err):
		reason = "dial"
	}
	x.code = code
	x.l.mu.Lock()
	x.l.app(x.r.name).fails++
	x.l.mu.Unlock()
	if x.cold {
		h.Set("X-Cold-Start", "true")
	}
	return errorAnswer(h, code, reason)
}

func (x *fakeExchange) End() {
	x.want("End", xBegun, xWaited, xForwarding, xDone)
	x.state = xEnded
	x.l.mu.Lock()
	defer x.l.mu.Unlock()
	a := x.l.app(x.r.name)
	if x.held {
		a.held--
	}
	if x.inCount {
		a.inFlight--
	}
	code := x.code
	if code == 0 {
		code = http.StatusBadGateway
	}
	a.codes[code]++
}

// Rewrite implements Rewriter: the route's target, asked once, before Begin.
func (x *fakeExchange) Rewrite(Request) (string, http.Header) {
	x.want("Rewrite", xRouted)
	return x.r.rewrite, nil
}

func (x *fakeExchange) Release() {
	x.want("Release", xRouted)
	x.state = xReleased
}

// fakeCounter is a Counter the tests read.
type fakeCounter struct{ n atomic.Int64 }

func (c *fakeCounter) Inc() { c.n.Add(1) }
