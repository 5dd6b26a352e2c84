package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// h1Transport is a synchronous HTTP/1.1 client for requests without a body and without an upgrade,
// which is most proxied traffic. It writes the request and reads the response on the calling
// goroutine over a pooled keep-alive connection, where http.Transport hands every request to two
// more goroutines (a writer and a reader per connection); on a busy host those hand-offs cost more
// than the proxying itself. Everything else (bodies, upgrades, h2c) goes through http.Transport.
//
// When a pooled connection turns out to have been closed by the upstream before any response byte
// arrived, a replayable request (see replayable) is sent again on another connection; that is the
// only retry. A connection goes back to the pool only when its response ended exactly where its
// framing said, with nothing after it; every pooled connection is checked again with a non-blocking
// peek (see quiet) when it is taken, so that bytes the upstream sent after a response (a body with
// a 204, more than Content-Length, a second response nobody asked for) are never read as the next
// request's response: the connection is closed and counted (upstream_conns_discarded_total).
type h1Transport struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int           // idle connections kept per address
	maxConns    int           // connections open at once per address; 0 means no limit
	idleTimeout time.Duration // pooled connections older than this are closed
	now         func() time.Time
	discarded   DiscardCounters

	mu        sync.Mutex
	hosts     map[string]*hostPool
	lastSweep time.Time
	// waiting counts the waiters of every hostPool (changed under mu), so that hasWaiters, asked
	// on every event-loop request, takes no lock while nobody waits.
	waiting atomic.Int32
	// onWait, when set, runs (outside mu) when a request starts waiting for a connection to an
	// address: event loops give up their idle connections to it (see evLoops).
	onWait atomic.Pointer[func(addr string)]
}

// hostPool is the connections of one address. Requests beyond maxConns wait in FIFO order for a
// connection to be returned (or for a slot to dial when one is closed): a burst of released held
// requests reaches a freshly started pod over a bounded number of connections.
type hostPool struct {
	idle    []*h1Conn
	open    int            // idle + in use + being dialled
	waiters []chan *h1Conn // a waiter receives a pooled connection, or nil: a slot to dial
}

type h1Conn struct {
	t      *h1Transport
	addr   string
	c      net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	// rc is c's socket for the peek before reuse (nil when c has none); peekFn, pc.peek bound once,
	// and peeked keep the peek free of allocations.
	rc     syscall.RawConn
	peekFn func(fd uintptr) bool
	peeked peekState
}

// replayable reports whether a request without a body may be sent again after its connection
// failed before any response byte: only when a second copy cannot repeat a side effect (the
// upstream may have processed the first before closing), net/http's rule.
func replayable(method string, idempotencyKey bool) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return idempotencyKey
}

// quiet reports whether an idle connection is still open with nothing to read, by a non-blocking
// peek (one syscall). Anything else — closed by the upstream, or bytes nobody asked for — means it
// must not carry a request; bytes are counted as an unsolicited discard.
func (pc *h1Conn) quiet() bool {
	if pc.br.Buffered() > 0 {
		pc.t.discarded.Unsolicited.Inc()
		return false
	}
	if pc.rc == nil {
		return true
	}
	pc.peeked = peekQuiet
	if err := pc.rc.Read(pc.peekFn); err != nil {
		return false
	}
	if pc.peeked == peekData {
		pc.t.discarded.Unsolicited.Inc()
	}
	return pc.peeked == peekQuiet
}

// peek is quiet's callback on the socket.
func (pc *h1Conn) peek(fd uintptr) bool {
	pc.peeked = peekFD(int(fd))
	return true // never wait
}

// peekState is what a non-blocking peek found on an idle socket.
type peekState uint8

const (
	peekQuiet  peekState = iota // open, nothing to read
	peekData                    // bytes nobody asked for
	peekClosed                  // closed by the peer, or failed
)

// peekFD looks at a socket without reading from it or waiting (one recv with MSG_PEEK|MSG_DONTWAIT).
func peekFD(fd int) peekState {
	var b [1]byte
	n, _, err := syscall.Recvfrom(fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case n > 0:
		return peekData
	case n < 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK)):
		return peekQuiet
	}
	return peekClosed
}

// fastEligible reports whether req can use h1Transport.
func fastEligible(req *http.Request) bool {
	return (req.Body == nil || req.Body == http.NoBody) && req.ContentLength == 0 &&
		req.Header.Get("Upgrade") == "" && len(req.TransferEncoding) == 0 && req.Header.Get("Expect") == ""
}

// RoundTrip sends req (which must satisfy fastEligible) to req.URL.Host. A dial failure is returned
// as the dialer's error so that the caller can try another endpoint.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	replay := replayable(req.Method, key || xkey)
	for attempt := 0; ; attempt++ {
		pc, reused, err := t.acquire(ctx, req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := pc.roundTrip(ctx, req)
		if err == nil {
			return resp, nil
		}
		t.discard(pc)
		var stale staleConnError
		if reused && errors.As(err, &stale) {
			t.dropIdle(pc.addr) // pooled before it, the others are likely closed too
			if replay && attempt < 2 && ctx.Err() == nil {
				continue // the upstream closed the pooled connection; a replay is safe
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, err
	}
}

// acquire is acquireConn, with a check (see quiet) of the pooled connection it returns: one the
// upstream closed or wrote to since its last response is discarded and another one taken. The check
// costs one non-blocking syscall per reused connection; it is what keeps bytes that arrived after
// the previous response ended (a moment later, in another packet) from becoming this request's
// response.
func (t *h1Transport) acquire(ctx context.Context, addr string) (*h1Conn, bool, error) {
	for {
		pc, reused, err := t.acquireConn(ctx, addr)
		if err != nil || !reused || pc.quiet() {
			return pc, reused, err
		}
		t.discard(pc)
	}
}

// acquireConn returns a pooled connection to addr (reused true), or dials a new one when fewer than
// maxConns are open, or waits for one of the two.
func (t *h1Transport) acquireConn(ctx context.Context, addr string) (*h1Conn, bool, error) {
	now := t.now()
	t.mu.Lock()
	hp := t.hostLocked(addr)
	if pc := t.popIdleLocked(hp, now); pc != nil {
		t.mu.Unlock()
		return pc, true, nil
	}
	if t.maxConns <= 0 || hp.open < t.maxConns {
		hp.open++
		t.mu.Unlock()
		return t.dialConn(ctx, addr)
	}
	ch := make(chan *h1Conn, 1)
	hp.waiters = append(hp.waiters, ch)
	t.waiting.Add(1)
	t.mu.Unlock()
	if f := t.onWait.Load(); f != nil {
		(*f)(addr)
	}
	select {
	case pc := <-ch:
		if pc != nil {
			return pc, true, nil
		}
		return t.dialConn(ctx, addr) // a slot was handed over
	case <-ctx.Done():
	}
	t.mu.Lock()
	for i, w := range hp.waiters {
		if w == ch {
			hp.waiters = append(hp.waiters[:i], hp.waiters[i+1:]...)
			t.waiting.Add(-1)
			t.mu.Unlock()
			return nil, false, ctx.Err()
		}
	}
	t.mu.Unlock()
	// Handed something while giving up: pass it on.
	if pc := <-ch; pc != nil {
		t.put(pc)
	} else {
		t.releaseSlot(addr)
	}
	return nil, false, ctx.Err()
}

// hostLocked returns addr's pool, creating it; t.mu is held.
func (t *h1Transport) hostLocked(addr string) *hostPool {
	hp := t.hosts[addr]
	if hp == nil {
		hp = &hostPool{}
		if t.hosts == nil {
			t.hosts = map[string]*hostPool{}
		}
		t.hosts[addr] = hp
	}
	return hp
}

// reserve counts a connection to addr that an event loop dials itself (see evLoop.acquire), when
// fewer than maxConns are open and no request waits for one; releaseSlot gives the slot back.
func (t *h1Transport) reserve(addr string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	hp := t.hostLocked(addr)
	if t.maxConns > 0 && hp.open >= t.maxConns || len(hp.waiters) > 0 {
		return false
	}
	hp.open++
	return true
}

// takeIdle removes the most recently pooled connection to addr from the pool and returns it, still
// counted in open, or nil when there is none; an event loop takes it over (see evLoop.acquire).
func (t *h1Transport) takeIdle(addr string) *h1Conn {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if hp := t.hosts[addr]; hp != nil {
		return t.popIdleLocked(hp, now)
	}
	return nil
}

// popIdleLocked takes hp's most recently pooled connection that has not passed the idle timeout,
// closing the expired ones on the way; nil when none is left. t.mu is held.
func (t *h1Transport) popIdleLocked(hp *hostPool, now time.Time) *h1Conn {
	for len(hp.idle) > 0 {
		pc := hp.idle[len(hp.idle)-1]
		hp.idle[len(hp.idle)-1] = nil
		hp.idle = hp.idle[:len(hp.idle)-1]
		if now.Sub(pc.idleAt) < t.idleTimeout {
			return pc
		}
		hp.open--
		_ = pc.c.Close()
	}
	return nil
}

// popWaiterLocked takes the first request waiting for a connection in hp (there is one); t.mu is
// held.
func (t *h1Transport) popWaiterLocked(hp *hostPool) chan *h1Conn {
	ch := hp.waiters[0]
	hp.waiters = hp.waiters[1:]
	t.waiting.Add(-1)
	return ch
}

// hasWaiters reports whether requests wait for a connection to addr.
func (t *h1Transport) hasWaiters(addr string) bool {
	if t.waiting.Load() == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	hp := t.hosts[addr]
	return hp != nil && len(hp.waiters) > 0
}

// dialConn opens a connection in a slot already counted in open.
func (t *h1Transport) dialConn(ctx context.Context, addr string) (*h1Conn, bool, error) {
	c, err := t.dial(ctx, "tcp", addr)
	if err != nil {
		t.releaseSlot(addr)
		return nil, false, err
	}
	return t.newConn(addr, c, c), false, nil
}

// newConn wraps c, a connection to addr counted in open; responses are read from r (c, or c after
// bytes already read from it).
func (t *h1Transport) newConn(addr string, c net.Conn, r io.Reader) *h1Conn {
	pc := &h1Conn{t: t, addr: addr, c: c, br: bufio.NewReaderSize(r, h1ConnBuffer), bw: bufio.NewWriterSize(c, 4<<10)}
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			pc.rc, pc.peekFn = rc, pc.peek
		}
	}
	return pc
}

// h1ConnBuffer is the size of an upstream connection's read buffer, which bounds the response heads
// the raw path passes on itself.
const h1ConnBuffer = 8 << 10

// releaseSlot gives up one open slot of addr: to the first waiter, or by counting it closed.
func (t *h1Transport) releaseSlot(addr string) {
	t.mu.Lock()
	hp := t.hosts[addr]
	if hp == nil {
		t.mu.Unlock()
		return
	}
	if len(hp.waiters) > 0 {
		ch := t.popWaiterLocked(hp)
		t.mu.Unlock()
		ch <- nil
		return
	}
	hp.open--
	if hp.open <= 0 && len(hp.idle) == 0 {
		delete(t.hosts, addr)
	}
	t.mu.Unlock()
}

// discard closes a connection that cannot be reused.
func (t *h1Transport) discard(pc *h1Conn) {
	_ = pc.c.Close()
	t.releaseSlot(pc.addr)
}

// staleConnError marks a failure on a connection before any response byte arrived.
type staleConnError struct{ err error }

func (e staleConnError) Error() string { return e.err.Error() }
func (e staleConnError) Unwrap() error { return e.err }

func (pc *h1Conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	// Cancelling the request (client gone, timeouts) closes the connection, which unblocks I/O.
	// stop reports false once this ran, so the body knows not to pool the connection.
	stop := context.AfterFunc(ctx, func() { _ = pc.c.Close() })
	if err := req.Write(pc.bw); err != nil {
		stop()
		return nil, staleConnError{fmt.Errorf("writing request: %w", err)}
	}
	if err := pc.bw.Flush(); err != nil {
		stop()
		return nil, staleConnError{fmt.Errorf("writing request: %w", err)}
	}
	return pc.readResponse(req, stop)
}

// readResponse reads the response to req (informational responses are dropped). Its body returns
// pc to the pool once read to its end, when stop (which unregisters whatever would close pc on
// cancellation) reports that it was not cancelled.
func (pc *h1Conn) readResponse(req *http.Request, stop func() bool) (*http.Response, error) {
	var resp *http.Response
	for {
		if _, err := pc.br.Peek(1); err != nil {
			stop()
			return nil, staleConnError{fmt.Errorf("reading response: %w", err)}
		}
		r, err := http.ReadResponse(pc.br, req)
		if err != nil {
			stop()
			return nil, fmt.Errorf("reading response: %w", err)
		}
		if r.StatusCode >= 100 && r.StatusCode < 200 && r.StatusCode != http.StatusSwitchingProtocols {
			continue // informational responses are dropped
		}
		resp = r
		break
	}
	keep := !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
	resp.Body = &h1Body{pc: pc, body: resp.Body, keep: keep, stop: stop}
	return resp, nil
}

// h1Body returns the connection to the pool once the body was read to its end.
type h1Body struct {
	pc   *h1Conn
	body io.ReadCloser
	keep bool
	done bool
	// stop unregisters what closes the connection on cancellation; false: it was cancelled.
	stop func() bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

func (b *h1Body) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *h1Body) finish(complete bool) {
	b.done = true
	stopped := b.stop()
	_ = b.body.Close()
	// Bytes after the body (a body sent with a HEAD or 204 answer, more than Content-Length, data
	// after the last chunk) would be read as the next request's response: such a connection is not
	// reused.
	if complete && b.keep && stopped {
		if b.pc.br.Buffered() == 0 {
			b.pc.t.put(b.pc)
			return
		}
		b.pc.t.discarded.Leftover.Inc()
	}
	b.pc.t.discard(b.pc)
}

// put returns a connection after a complete response: to the first waiter, else to the pool.
func (t *h1Transport) put(pc *h1Conn) {
	now := t.now()
	pc.idleAt = now
	t.mu.Lock()
	hp := t.hosts[pc.addr]
	if hp == nil { // CloseIdle forgot the address
		t.mu.Unlock()
		_ = pc.c.Close()
		return
	}
	if len(hp.waiters) > 0 {
		ch := t.popWaiterLocked(hp)
		t.mu.Unlock()
		ch <- pc
		return
	}
	if len(hp.idle) >= t.maxIdle {
		hp.open--
		t.mu.Unlock()
		_ = pc.c.Close()
		return
	}
	hp.idle = append(hp.idle, pc)
	if now.Sub(t.lastSweep) > t.idleTimeout/2 {
		t.sweepLocked(now)
	}
	t.mu.Unlock()
}

// sweepLocked closes expired idle connections, e.g. to pods that went away.
func (t *h1Transport) sweepLocked(now time.Time) {
	t.lastSweep = now
	for addr, hp := range t.hosts {
		kept := hp.idle[:0]
		for _, pc := range hp.idle {
			if now.Sub(pc.idleAt) < t.idleTimeout {
				kept = append(kept, pc)
			} else {
				hp.open--
				_ = pc.c.Close()
			}
		}
		clear(hp.idle[len(kept):])
		hp.idle = kept
		if hp.open <= 0 && len(hp.waiters) == 0 {
			delete(t.hosts, addr)
		}
	}
}

// dropIdle closes the idle connections to addr. It runs when a pooled connection turned out to be
// closed by the upstream: the others pooled before it were most likely closed too (the pod
// restarted on the same address, or its idle timeout passed), and trying them one by one would
// spend a request's retries on them and answer 502.
func (t *h1Transport) dropIdle(addr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	hp := t.hosts[addr]
	if hp == nil {
		return
	}
	for _, pc := range hp.idle {
		_ = pc.c.Close()
	}
	hp.open -= len(hp.idle)
	clear(hp.idle)
	hp.idle = hp.idle[:0]
}

// CloseIdle closes every pooled connection.
func (t *h1Transport) CloseIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, hp := range t.hosts {
		for _, pc := range hp.idle {
			_ = pc.c.Close()
		}
		hp.open -= len(hp.idle)
		hp.idle = nil
	}
}
