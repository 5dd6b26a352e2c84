//go:build linux

package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
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
// The loop's parts: polling and messages (this file), timers (loop_timer_linux.go), client
// connections (loop_client_linux.go), the request's steps (loop_request_linux.go), upstream
// connections (loop_upstream_linux.go), the relay of requests and responses
// (loop_relay_linux.go), and the system calls (loop_sys_linux.go).
type evLoops struct {
	e       *Engine
	base    context.Context // waits and dials derive from it; cancelled when a drain is cut short
	handoff *handoffListener
	log     logr.Logger
	// idleTimeout closes a kept-alive connection idle for longer; headerTimeout bounds a request
	// head from its first byte; watchAfter is how long a request whose client closed its sending
	// side still gets to be answered (see hungUp).
	idleTimeout, headerTimeout, watchAfter time.Duration

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
	idleTimeout, headerTimeout, watchAfter time.Duration
	log                                    logr.Logger
}

// evClientBuffer bounds a request head (a larger one goes to net/http); evUpBuffer is the response
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
)

// newEvLoops starts cfg.n loops.
func newEvLoops(cfg loopConfig) (*evLoops, error) {
	ls := &evLoops{e: cfg.e, base: cfg.base, handoff: cfg.handoff, log: cfg.log,
		idleTimeout: cfg.idleTimeout, headerTimeout: cfg.headerTimeout, watchAfter: cfg.watchAfter}
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

type evMsgKind int

const (
	evAdopt    evMsgKind = iota // a client connection (fd, remote)
	evDialed                    // a new upstream connection for c's request reqID (fd, addr), or err
	evWaited                    // the wait of c's request ended with err
	evGranted                   // the pool gave c's request reqID a connection or a slot (h)
	evTimer                     // a timer is due
	evShutdown                  // close idle connections; end once none is left
	evSweep                     // close connections idle for too long
	evRelease                   // requests wait for a connection to addr: give them the idle ones
	evClose                     // close everything and end
)

type evMsg struct {
	kind   evMsgKind
	fd     int
	remote string
	c      *evClient
	reqID  uint64
	addr   string
	err    error
	h      handed
	w      *loopWaiter
}

// evLoop is one event loop. Everything but the inbox belongs to its goroutine.
type evLoop struct {
	ls     *evLoops
	e      *Engine
	epfd   int
	epf    *os.File // epfd in the runtime's poller
	wakefd int      // eventfd: the inbox has messages

	inboxMu sync.Mutex
	inbox   []evMsg
	spare   []evMsg
	ended   atomic.Bool // the loop returned (set under inboxMu); adopt passes it over

	fds      []evSlot      // by descriptor
	free     [][]byte      // request buffers not in use (see releaseIn)
	rqs      []*h1.Request // request parses not in use (see getRequest)
	relays   []*h1.Relay   // relays not in use
	body     []byte        // body bytes on their way between two sockets (see relayBody, pumpBody)
	hdr      http.Header   // the request logic's header fields for the answer being written
	rw       h1.ResponseWriter
	timers   timerHeap
	gen      int32
	clients  int
	pending  int // dials and waits running on goroutines, which report back
	idle     map[string][]*evUp
	quitting bool
	now      time.Time // when the batch of events being handled arrived
	batch    uint64    // counts the batches of events
}

func newEvLoop(ls *evLoops) (*evLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("creating an epoll instance: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		_ = unix.Close(epfd)
		return nil, fmt.Errorf("creating an eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}); err != nil {
		_ = unix.Close(epfd)
		_ = unix.Close(wakefd)
		return nil, fmt.Errorf("watching the eventfd: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil { // so that os.NewFile puts it in the poller
		_ = unix.Close(epfd)
		_ = unix.Close(wakefd)
		return nil, fmt.Errorf("setting up the epoll descriptor: %w", err)
	}
	l := &evLoop{ls: ls, e: ls.e, epfd: epfd, epf: os.NewFile(uintptr(epfd), "epoll"), wakefd: wakefd,
		idle: map[string][]*evUp{}, body: make([]byte, evBodyBuffer), hdr: http.Header{}}
	l.timers.l = l
	return l, nil
}

// post queues m for the loop and wakes it. A loop that has ended no longer reads its inbox: what
// m carries is released here.
func (l *evLoop) post(m evMsg) {
	l.inboxMu.Lock()
	if !l.ended.Load() {
		l.inbox = append(l.inbox, m)
		one := [8]byte{1}
		_, _ = unix.Write(l.wakefd, one[:]) // under the lock: closeAll closes it under the lock
		l.inboxMu.Unlock()
		return
	}
	l.inboxMu.Unlock()
	l.discard(m) // not under inboxMu: conn takes the loops' lock, held while posting to loops
}

// discard releases what a message for a loop that has ended carries. The loop no longer touches
// the request of a message that reports back to it, so its exchange is ended here.
func (l *evLoop) discard(m evMsg) {
	switch m.kind {
	case evAdopt:
		_ = unix.Close(m.fd)
		l.ls.conn(-1)
	case evDialed:
		if m.err == nil {
			_ = unix.Close(m.fd)
		}
		l.e.pool.release(m.addr)
	case evGranted:
		l.e.pool.discardHanded(m.h)
	case evWaited:
		if c := m.c; c.x != nil {
			c.x.Fail(fmt.Errorf("%w: the interceptor stopped", ErrClientGone), http.Header{})
			c.x.End()
			c.x = nil
		}
	}
}

func (l *evLoop) run() {
	// The loop waits in the runtime's poller, which watches the epoll descriptor like a socket,
	// not in a blocking epoll_wait: a P blocked in a system call is taken over by sysmon after
	// 20µs, and a loop doing that tens of thousands of times a second keeps sysmon polling every
	// 20µs and hands Ps between threads, which costs more than the wait.
	rc, err := l.epf.SyscallConn()
	if err != nil {
		l.ls.log.Error(err, "reaching the epoll descriptor; closing the event loop's connections")
		l.closeAll()
		return
	}
	stopTick := make(chan struct{})
	defer close(stopTick)
	go func() { // sweeps (see sweep) while the loop runs
		t := time.NewTicker(evSweepEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.post(evMsg{kind: evSweep})
			case <-stopTick:
				return
			}
		}
	}()
	events := make([]unix.EpollEvent, 128)
	for {
		var n int
		var werr error
		err := rc.Read(func(uintptr) bool {
			n, werr = epollNow(l.epfd, events)
			return n > 0 || werr != nil && !errors.Is(werr, unix.EINTR)
		})
		if err == nil && werr != nil && !errors.Is(werr, unix.EINTR) {
			err = werr
		}
		// One clock reading per batch of events serves the timeouts and timers, instead of
		// readings per request.
		l.now = time.Now()
		l.batch++
		if err != nil {
			l.ls.log.Error(err, "waiting for socket events; closing the event loop's connections")
			l.closeAll()
			return
		}
		l.dropStirredIdle(events[:n])
		for i := range n {
			ev := &events[i]
			fd := int(ev.Fd)
			if fd == l.wakefd {
				var b [8]byte
				_, _ = unix.Read(l.wakefd, b[:])
				if l.drainInbox() {
					return
				}
				continue
			}
			if fd >= len(l.fds) || l.fds[fd].gen != ev.Pad {
				continue // closed (and maybe reused) since the event was reported
			}
			switch h := l.fds[fd].h.(type) {
			case *evClient:
				l.clientEvent(h, ev.Events)
			case *evUp:
				l.upEvent(h, ev.Events)
			}
		}
		if l.quitting && l.clients == 0 && l.pending == 0 {
			l.closeAll()
			return
		}
	}
}

// drainInbox handles the queued messages; it returns true when the loop has ended.
func (l *evLoop) drainInbox() bool {
	l.inboxMu.Lock()
	msgs := l.inbox
	l.inbox = l.spare[:0]
	l.inboxMu.Unlock()
	defer func() {
		clear(msgs)
		l.spare = msgs[:0]
	}()
	for i, m := range msgs {
		switch m.kind {
		case evAdopt:
			l.addClient(m.fd, m.remote)
		case evDialed:
			l.dialed(m)
		case evWaited:
			l.waited(m.c, m.err)
		case evGranted:
			l.granted(m)
		case evTimer:
			l.timers.fire(l.now)
		case evShutdown:
			l.quitting = true
			for _, slot := range l.fds {
				if c, ok := slot.h.(*evClient); ok && !c.busy() && len(c.in) == 0 && c.out.Len() == 0 {
					l.closeClient(c)
				}
			}
		case evSweep:
			l.sweep(l.now)
		case evRelease:
			l.releaseIdle(m.addr)
		case evClose:
			l.closeAll()
			for _, m := range msgs[i+1:] {
				l.discard(m)
			}
			return true
		}
	}
	return false
}

// evSlot is what a descriptor is registered for: h is an *evClient or *evUp. gen tells a
// registration from an earlier one of the same descriptor number, whose events may still be in the
// batch being handled when the number is reused.
type evSlot struct {
	h   any
	gen int32
}

// setFD registers h for fd's events (edge-triggered: each new arrival is reported once).
func (l *evLoop) setFD(fd int, h any) error {
	for fd >= len(l.fds) {
		l.fds = append(l.fds, evSlot{})
	}
	l.gen++
	l.fds[fd] = evSlot{h: h, gen: l.gen}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET, Fd: int32(fd), Pad: l.gen}
	if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		l.fds[fd] = evSlot{}
		return fmt.Errorf("watching a socket: %w", err)
	}
	return nil
}

// dropFD forgets fd; the caller closes it or hands it on.
func (l *evLoop) dropFD(fd int) {
	_ = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, fd, nil)
	l.fds[fd] = evSlot{}
}

// closeAll closes every connection and the loop's own descriptors. Requests whose wait or dial
// still runs are ended when it reports back (see discard).
func (l *evLoop) closeAll() {
	for _, slot := range l.fds {
		switch h := slot.h.(type) {
		case *evClient:
			l.clientGone(h)
		case *evUp:
			if h.c == nil {
				l.closeUp(h)
			}
		}
	}
	l.quitting = true
	l.timers.stop()
	l.inboxMu.Lock()
	l.ended.Store(true)
	msgs := l.inbox
	l.inbox = nil
	_ = l.epf.Close()
	_ = unix.Close(l.wakefd)
	l.inboxMu.Unlock()
	for _, m := range msgs { // what arrived since the last look: released as post does from now on
		l.discard(m)
	}
}

// sweep closes connections idle for too long: clients past the idle timeout (or the header timeout
// with part of a head read), upstream connections past the pool's idle timeout.
func (l *evLoop) sweep(now time.Time) {
	ls := l.ls
	for _, slot := range l.fds {
		switch h := slot.h.(type) {
		case *evClient:
			if h.busy() || h.out.Len() > 0 {
				continue
			}
			if len(h.in) == 0 && ls.idleTimeout > 0 && now.Sub(h.since) > ls.idleTimeout ||
				len(h.in) > 0 && ls.headerTimeout > 0 && now.Sub(h.since) > ls.headerTimeout {
				l.closeClient(h)
			}
		case *evUp:
			if h.c == nil && now.Sub(h.idleAt) >= l.e.pool.idleTimeout {
				l.closeUp(h)
			}
		}
	}
}
