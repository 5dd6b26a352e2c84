//go:build linux

package engine

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// evLoops serve the cleartext port's HTTP/1.1 connections on event loops: a few goroutines, one
// per GOMAXPROCS, each watching many client and upstream sockets in an edge-triggered epoll set,
// as nginx's workers do. A loop reads a socket only once epoll said it is readable, and a short
// read means the socket is drained, so a proxied request costs four socket calls (read the
// request, write it upstream, read the response, write it back) and no goroutine switch.
//
// A loop carries a request from its head to the end of its response: it routes it, counts it,
// holds it while its app is cold (the wait runs on a goroutine of its own, which reports back),
// waits in line for an upstream connection, forwards it with its body, relays the response
// whatever its framing, answers failures, and ends the exchange (see loop_request.go for the
// order). What a loop leaves to net/http, with the bytes read so far and for the rest of the
// connection, is what it does not parse (see h1.Request.Parse: chunked uploads, upgrades, Expect,
// HTTP/1.0, odd syntax, large heads) and requests to h2c backends; net/http serves those with the
// ReverseProxy, as it serves the TLS port.
//
// This file is the loops as the Server sees them (start, adopt a connection, drain). A loop's parts:
// polling and messages (loop_linux.go), timers (loop_timer_linux.go), client connections
// (loop_client_linux.go), the request's steps (loop_request_linux.go), upstream connections
// (loop_upstream_linux.go), the relay of requests and responses (loop_relay_linux.go), and the
// system calls (loop_sys_linux.go).
type evLoops struct {
	e       *Engine
	base    context.Context // waits and dials derive from it; cancelled when a drain is cut short
	handoff *handoffListener
	// heads bounds the handed-over connections whose heads are parsed at once (see headGate).
	heads *headGate
	log   logr.Logger
	// idleTimeout closes a kept-alive connection idle for longer; headerTimeout bounds a request
	// head from its first byte; watchAfter is how long a request whose client closed its sending
	// side still gets to be answered (see hungUp).
	idleTimeout, headerTimeout, watchAfter time.Duration
	// maxHead is the largest request head the loops read (the server's MaxHeaderBytes): a client's
	// buffer grows from evClientBuffer up to it while a head arrives (see growIn).
	maxHead int
	// arriving is the memory of the buffers grown for heads still arriving, every loop together
	// (each buffer's whole capacity; see loopFree.grown); maxArriving bounds it (0: no bound).
	arriving     atomic.Int64
	maxArriving  int64
	refusedHeads atomic.Uint64 // heads answered 503 for want of room (see refuseHead)

	loops []*evLoop
	next  atomic.Uint32

	mu       sync.Mutex
	conns    int // client connections on the loops (and on their way to net/http)
	shutting bool
	zero     chan struct{} // closed when conns drops to zero while shutting
	// closing mirrors shutting for the loops, which read it on every request.
	closing atomic.Bool
}

// loopConfig is what a Server gives its loops.
type loopConfig struct {
	e                                      *Engine
	n                                      int
	base                                   context.Context
	handoff                                *handoffListener
	heads                                  *headGate
	idleTimeout, headerTimeout, watchAfter time.Duration
	log                                    logr.Logger
	maxHead                                int
	maxArriving                            int64
}

// evClientBuffer is a client's request buffer (it grows up to evLoops.maxHead for a larger head); evUpBuffer is the response
// buffer a head is read into (it grows to maxResponseHead for a larger head); evBodyBuffer is the
// loop's one body buffer (see relayBody): the most of a body read by one system call, and so the
// most a client that does not keep up holds in its output buffer.
const (
	evClientBuffer = 4 << 10
	evUpBuffer     = 8 << 10
	evBodyBuffer   = 64 << 10
	evCopyMax      = 2 << 10 // body bytes flushOutv copies after the head rather than write with writev
	evSweepEvery   = time.Second
	evIdleScan     = 64 // idle connections popIdle looks through for one pooled before the batch
	evFreeRequests = 16 // request parses a loop keeps for its next requests
	// evHeavyBudget is how many bytes of large request heads a loop reads and parses after each
	// batch of events (see evLoop.heavy): about 0.1 ms of work.
	evHeavyBudget = 256 << 10
	evLinger      = 500 * time.Millisecond // see evClient.lingering; net/http's rstAvoidanceDelay
)

// newEvLoops starts cfg.n loops.
func newEvLoops(cfg loopConfig) (*evLoops, error) {
	ls := &evLoops{e: cfg.e, base: cfg.base, handoff: cfg.handoff, log: cfg.log, heads: cfg.heads,
		idleTimeout: cfg.idleTimeout, headerTimeout: cfg.headerTimeout, watchAfter: cfg.watchAfter,
		maxHead: max(cfg.maxHead, evClientBuffer), maxArriving: cfg.maxArriving}
	for range cfg.n {
		l, err := newEvLoop(ls)
		if err != nil {
			for _, l := range ls.loops {
				l.closeAll() // not running yet
			}
			return nil, err
		}
		ls.loops = append(ls.loops, l)
	}
	for _, l := range ls.loops {
		go l.run()
	}
	release := ls.releaseIdle
	cfg.e.pool.onWait.Store(&release)
	return ls, nil
}

// releaseIdle asks every loop to give its idle connections to addr to the requests waiting for
// one: they count against MaxConnsPerEndpoint wherever they are idle.
func (ls *evLoops) releaseIdle(addr string) {
	for _, l := range ls.loops {
		l.post(evMsg{kind: evRelease, addr: addr})
	}
}

// adopt takes an accepted connection: its socket moves to a loop, out of the runtime's poller.
func (ls *evLoops) adopt(c net.Conn) {
	remote := c.RemoteAddr().String()
	fd, err := takeFD(c)
	if err != nil {
		ls.log.Error(err, "moving a connection to an event loop; closing it", "remote", remote)
		return
	}
	if !ls.conn(1) {
		_ = syscall.Close(fd)
		return
	}
	// A loop that ended on an error is skipped; post closes the connection when every one has.
	start := int(ls.next.Add(1))
	var l *evLoop
	for i := range ls.loops {
		if l = ls.loops[(start+i)%len(ls.loops)]; !l.ended.Load() {
			break
		}
	}
	l.post(evMsg{kind: evAdopt, fd: fd, remote: remote})
}

// conn counts a client connection a loop takes (d 1; false: shutting down, it must be closed) or
// gives up (d -1).
func (ls *evLoops) conn(d int) bool {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if d > 0 && ls.shutting {
		return false
	}
	ls.conns += d
	if ls.shutting && ls.conns == 0 && ls.zero != nil {
		close(ls.zero)
		ls.zero = nil
	}
	return true
}

func (ls *evLoops) shuttingDown() bool { return ls.closing.Load() }

// shutdown stops reading new requests: idle connections are closed at once, busy ones after their
// current response (held requests are still forwarded). It waits until every connection is closed
// or ctx ends.
func (ls *evLoops) shutdown(ctx context.Context) error {
	ls.mu.Lock()
	ls.shutting = true
	ls.closing.Store(true)
	var zero chan struct{}
	if ls.conns > 0 {
		if ls.zero == nil {
			ls.zero = make(chan struct{})
		}
		zero = ls.zero
	}
	ls.mu.Unlock()
	for _, l := range ls.loops {
		l.post(evMsg{kind: evShutdown})
	}
	if zero == nil {
		return nil
	}
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for connections to finish: %w", ctx.Err())
	}
}

// close closes every connection and ends the loops.
func (ls *evLoops) close() {
	ls.mu.Lock()
	ls.shutting = true
	ls.closing.Store(true)
	ls.mu.Unlock()
	for _, l := range ls.loops {
		l.post(evMsg{kind: evClose})
	}
}

// connections reports how many client connections the loops serve.
// arrivingHeads returns the memory of the buffers of heads still arriving and the heads refused
// for want of it.
func (ls *evLoops) arrivingHeads() (int64, uint64) {
	return ls.arriving.Load(), ls.refusedHeads.Load()
}

func (ls *evLoops) connections() int {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return ls.conns
}

// takeFD returns a duplicate of c's socket and closes c (which takes it out of the runtime's
// poller); the duplicate stays non-blocking.
func takeFD(c net.Conn) (int, error) {
	defer func() { _ = c.Close() }()
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("%T has no socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("reaching the socket: %w", err)
	}
	fd, dupErr := -1, error(nil)
	if err := rc.Control(func(s uintptr) { fd, dupErr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, fmt.Errorf("reaching the socket: %w", err)
	}
	if dupErr != nil {
		return -1, fmt.Errorf("duplicating the socket: %w", dupErr)
	}
	return fd, nil
}
