//go:build linux

package engine

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// evLoops serve the raw path's requests (see raw.go) on event loops: a few goroutines, one per
// GOMAXPROCS, each watching many client and upstream sockets in an edge-triggered epoll set, as
// nginx's workers do. On the goroutine-per-connection raw path a request costs two reads that find
// nothing (the runtime's poller reads before it waits), and a park and a wake-up of the
// connection's goroutine on each side; on loopback those, not the proxying, are most of its CPU. A
// loop reads a socket only once epoll said it is readable, and a short read means the socket is
// drained, so an exchange is four socket calls (see docs/benchmarks/interceptor.md).
//
// The loops are an accelerator for the common request, not a second implementation: a loop only
// reads request heads, forwards the screened requests (body-less, or with a body of one
// Content-Length, see pumpBody) to warm apps over its own pooled upstream connections, and passes
// on Content-Length responses. Everything else goes, with the
// bytes read so far, to the goroutine-per-connection path (h1ServerConn):
//   - a request the raw path declines (fastRequest, rawRoute): before anything is counted or sent;
//   - a new upstream connection that could not be made: with another endpoint to try, the endpoint
//     is marked bad and the request goes uncounted, so the goroutine path tries the next one;
//   - a response the loop does not pass on itself (chunked, 1xx, 204/304, …): the upstream
//     connection goes along and rawRelay relays it;
//   - an upstream failure after the request was sent: rawFail answers it.
//
// The connection comes back once it carries a request the raw path serves (backToLoop).
//
// Counts and metrics are recorded before the response is sent, as on the other paths. Upstream
// connections count against MaxConnsPerEndpoint with h1Transport's, and the loops give their idle
// ones to requests waiting there (releaseIdle). An idle connection is closed at once when the
// upstream closes it or writes to it (epoll reports it), and peeked at before a non-replayable
// request uses it.
type evLoops struct {
	s     *h1Server
	e     *Engine
	loops []*evLoop
	next  atomic.Uint32
}

// evClientBuffer is the request head buffer (as h1ReadBuffer); evUpBuffer the response buffer, as
// large as h1Conn's reader so that a head the loop saw whole fits there when handed over.
// evBodyBuffer is the loop's one body buffer (see relayBody): the most of a response body read by
// one system call, and so the most a client that does not keep up holds in its output buffer.
const (
	evClientBuffer = h1ReadBuffer
	evUpBuffer     = h1ConnBuffer
	evBodyBuffer   = 64 << 10
	evCopyMax      = 2 << 10 // body bytes flushOutv copies after the head rather than write with writev
	evSweepEvery   = time.Second
	evIdleScan     = 64 // idle connections popIdle looks through for one pooled before the batch
	evFreeRequests = 16 // request parses a loop keeps for its next requests
)

// newEvLoops starts n loops serving s's connections for p.
func newEvLoops(s *h1Server, e *Engine, n int) (*evLoops, error) {
	ls := &evLoops{s: s, e: e}
	for range n {
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
	e.fast.onWait.Store(&release)
	return ls, nil
}

// releaseIdle asks every loop to give its idle connections to addr to the requests waiting for
// one on the goroutine path: the loops' idle connections count against MaxConnsPerEndpoint too.
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
		ls.s.log.Error(err, "moving a connection to an event loop; closing it", "remote", remote)
		return
	}
	if !ls.s.loopConn(1) {
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

// shutdown closes idle connections; the others close after their current response, and the loops
// end once they have none.
func (ls *evLoops) shutdown() {
	for _, l := range ls.loops {
		l.post(evMsg{kind: evShutdown})
	}
}

// close closes every connection and ends the loops.
func (ls *evLoops) close() {
	for _, l := range ls.loops {
		l.post(evMsg{kind: evClose})
	}
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

// fdConn turns a socket the loop gives up into a net.Conn of the runtime's poller.
func fdConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	defer func() { _ = f.Close() }()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("handing a socket back to the runtime: %w", err)
	}
	return c, nil
}

type evMsgKind int

const (
	evAdopt    evMsgKind = iota // a client connection (fd, remote)
	evDialed                    // a new upstream connection for c (fd, addr), or err
	evShutdown                  // close idle connections; end once none is left
	evSweep                     // close connections idle for too long
	evHungUp                    // c's request reqID, whose client closed its side, has run for watchAfter
	evRelease                   // requests wait for a connection to addr: give them the idle ones
	evClose                     // close everything and end
)

type evMsg struct {
	kind   evMsgKind
	fd     int
	remote string
	c      *evClient
	addr   string
	err    error
	reqID  uint64
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
	rqs      []*rawRequest // request parses not in use (see getRequest)
	body     []byte        // response body bytes on their way from an upstream to a client (see relayBody)
	gen      int32
	clients  int
	dialing  int
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
	return &evLoop{ls: ls, e: ls.e, epfd: epfd, epf: os.NewFile(uintptr(epfd), "epoll"), wakefd: wakefd,
		idle: map[string][]*evUp{}, body: make([]byte, evBodyBuffer)}, nil
}

// post queues m for the loop and wakes it. A loop that has ended no longer reads its inbox: what
// m carries is closed here.
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
	l.discard(m) // not under inboxMu: loopConn takes the server's lock, held while posting to loops
}

// discard closes what a message for a loop that has ended carries.
func (l *evLoop) discard(m evMsg) {
	switch m.kind {
	case evAdopt:
		_ = unix.Close(m.fd)
		l.ls.s.loopConn(-1)
	case evDialed:
		if m.err == nil {
			_ = unix.Close(m.fd)
		}
		l.e.fast.releaseSlot(m.addr)
	}
}

func (l *evLoop) run() {
	// The loop waits in the runtime's poller, which watches the epoll descriptor like a socket,
	// not in a blocking epoll_wait: a P blocked in a system call is taken over by sysmon after
	// 20µs, and a loop doing that tens of thousands of times a second keeps sysmon polling every
	// 20µs and hands Ps between threads, which costs more than the wait.
	rc, err := l.epf.SyscallConn()
	if err != nil {
		l.ls.s.log.Error(err, "reaching the epoll descriptor; closing the event loop's connections")
		l.closeAll()
		return
	}
	stopTick := make(chan struct{})
	defer close(stopTick)
	go func() { // sweeps (see sweep) while the loop has connections
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
		// One clock reading per batch of events serves the timeouts (see sweep) and hungUp, instead
		// of readings per request.
		l.now = time.Now()
		l.batch++
		if err != nil {
			l.ls.s.log.Error(err, "waiting for socket events; closing the event loop's connections")
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
		if l.quitting && l.clients == 0 && l.dialing == 0 {
			l.closeAll()
			return
		}
	}
}

// dropStirredIdle closes the idle upstream connections that events report readable (closed by the
// upstream, or bytes nobody asked for) before any client's event of the batch is handled, so that
// a request of the batch cannot take one of them. What arrives later is found by acquire's peek
// (for connections pooled in this batch) or reported by the next batch.
func (l *evLoop) dropStirredIdle(events []unix.EpollEvent) {
	for i := range events {
		ev := &events[i]
		fd := int(ev.Fd)
		if fd == l.wakefd || fd >= len(l.fds) || l.fds[fd].gen != ev.Pad {
			continue
		}
		if up, ok := l.fds[fd].h.(*evUp); ok && up.c == nil {
			l.upEvent(up, ev.Events)
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
		case evHungUp:
			if c := m.c; !c.closed && c.busy() && c.reqID == m.reqID {
				l.clientGone(c)
			}
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

// closeAll closes every connection and the loop's own descriptors.
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
	l.inboxMu.Lock()
	l.ended.Store(true)
	msgs := l.inbox
	l.inbox = nil
	_ = l.epf.Close()
	_ = unix.Close(l.wakefd)
	l.inboxMu.Unlock()
	for _, m := range msgs { // what arrived since the last look: closed as post does from now on
		l.discard(m)
	}
}

// sweep closes connections idle for too long: clients past the idle timeout (or the header timeout
// with part of a head read), upstream connections past the pool's idle timeout.
func (l *evLoop) sweep(now time.Time) {
	s := l.ls.s
	for _, slot := range l.fds {
		switch h := slot.h.(type) {
		case *evClient:
			if h.busy() || h.out.Len() > 0 {
				continue
			}
			if len(h.in) == 0 && s.idleTimeout > 0 && now.Sub(h.since) > s.idleTimeout ||
				len(h.in) > 0 && s.headerTimeout > 0 && now.Sub(h.since) > s.headerTimeout {
				l.closeClient(h)
			}
		case *evUp:
			if h.c == nil && now.Sub(h.idleAt) >= l.e.fast.idleTimeout {
				l.closeUp(h)
			}
		}
	}
}

// evClient is a client connection owned by a loop.
type evClient struct {
	fd       int
	ip       string // X-Forwarded-For; "" when the address has none
	in       []byte // request bytes not yet served
	out      bytes.Buffer
	readable bool // an arrival was reported and the socket not read empty since
	writable bool
	eof      bool // a read found the end of the stream (or failed)
	hup      bool // epoll reported the client's side closed (or the connection failed)
	since    time.Time
	closed   bool

	// The request being forwarded (rq set: busy).
	reqID      uint64
	begun      time.Time // when the request started (monotonic; start is the metrics clock's)
	rq         *rawRequest
	headLen    int
	x          Exchange // the request's exchange (see Exchange)
	addr       string   // the endpoint picked
	counted    bool     // x.Begin and x.Forwarding were called
	up         *evUp
	attempts   int
	res        rawResponse
	remaining  int64
	bodyLeft   int64 // request body bytes not yet read from the client (see pumpBody)
	closeAfter bool
}

// busy reports whether c has a request being forwarded.
func (c *evClient) busy() bool { return c.rq != nil }

// relaying reports whether the response head was written (a passed-on response has a status).
func (c *evClient) relaying() bool { return c.res.code != 0 }

// evUp is an upstream connection owned by a loop: in use by c, or idle.
type evUp struct {
	fd       int
	addr     string
	in       []byte
	out      bytes.Buffer
	readable bool
	writable bool
	hup      bool
	c        *evClient
	idleAt   time.Time
	reused   bool
	// idleBatch is the batch of events (evLoop.batch) in which the connection was pooled.
	idleBatch uint64
}

func (l *evLoop) addClient(fd int, remote string) {
	if l.quitting {
		_ = unix.Close(fd)
		l.ls.s.loopConn(-1)
		return
	}
	c := &evClient{fd: fd, since: l.now, writable: true}
	if ip, _, err := net.SplitHostPort(remote); err == nil {
		c.ip = ip
	}
	if err := l.setFD(fd, c); err != nil {
		l.ls.s.log.Error(err, "serving a connection on an event loop; closing it", "remote", remote)
		_ = unix.Close(fd)
		l.ls.s.loopConn(-1)
		return
	}
	l.clients++
}

// closeClient closes an idle client connection (see clientGone for one with a request).
func (l *evLoop) closeClient(c *evClient) {
	if c.closed {
		return
	}
	c.closed = true
	l.dropFD(c.fd)
	_ = unix.Close(c.fd)
	l.clients--
	l.ls.s.loopConn(-1)
	c.in = c.in[:0]
	l.releaseIn(c)
}

// clientGone ends a connection whose client went away (or that is being closed), with its
// request: the upstream connection is closed and the request recorded as the raw path does.
func (l *evLoop) clientGone(c *evClient) {
	if c.closed {
		return
	}
	if c.busy() {
		if up := c.up; up != nil {
			c.up, up.c = nil, nil
			l.closeUp(up)
		}
		// A relayed response's status was recorded when its head was written (passHead).
		if c.counted && !c.relaying() {
			// Nothing is sent: the answer's headers go nowhere (a rare path, allocated here).
			c.x.Fail(fmt.Errorf("%w: host %s, path %s", ErrClientGone, c.rq.host, c.rq.path), http.Header{})
		}
		l.endRequest(c)
	}
	l.closeClient(c)
}

// endRequest forgets the request, ending its exchange (recorded with what the caller told it) or
// releasing it when it was not counted.
func (l *evLoop) endRequest(c *evClient) {
	if c.rq != nil {
		l.putRequest(c.rq)
	}
	switch {
	case c.x == nil:
	case c.counted:
		c.x.End()
	default:
		c.x.Release()
	}
	c.rq, c.x, c.addr, c.counted, c.up = nil, nil, "", false, nil
	c.attempts, c.res, c.remaining, c.bodyLeft = 0, rawResponse{}, 0, 0
}

func (l *evLoop) clientEvent(c *evClient, ev uint32) {
	if ev&unix.EPOLLIN != 0 {
		c.readable = true
	}
	if ev&unix.EPOLLOUT != 0 {
		c.writable = true
	}
	if ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		if c.busy() {
			l.clientGone(c) // reset, or closed both ways: no response can reach it
			return
		}
		c.readable, c.hup = true, true
	}
	if ev&unix.EPOLLRDHUP != 0 {
		c.readable = true // read what is left, then the end
		if c.busy() && !c.hup {
			l.hungUp(c)
			if c.closed {
				return
			}
		}
		c.hup = true
	}
	if !l.flushClient(c) {
		return
	}
	if c.bodyLeft > 0 && c.up != nil {
		l.pumpBody(c) // more of the request body arrived
		if c.closed {
			return
		}
	}
	switch {
	case !c.busy():
		l.serveNext(c)
	case c.relaying() && c.out.Len() == 0:
		l.relay(c) // the client took what was pending: pass on more of the body
	}
}

// hungUp handles a client that closed its sending side while its request runs. Like the
// goroutine path's client watch (see h1Server), which is only armed once a request has run for
// watchAfter, a request running that long has lost its client, and a quicker one gets until then
// to be answered (then the connection is closed): a client may close its side once it sent its
// request.
func (l *evLoop) hungUp(c *evClient) {
	if len(c.in) > c.headLen {
		return // it sent its next request: it is still there (as the client watch assumes)
	}
	if c.bodyLeft > 0 {
		return // the rest of the body is read first (pumpBody): its end, or the end of the stream
	}
	after := l.ls.s.watchAfter
	ran := time.Since(c.begun)
	if after <= 0 || ran >= after {
		l.clientGone(c)
		return
	}
	id := c.reqID
	time.AfterFunc(after-ran, func() { l.post(evMsg{kind: evHungUp, c: c, reqID: id}) })
}

// flushClient writes what is pending; false: the connection was closed.
func (l *evLoop) flushClient(c *evClient) bool {
	if err := flushOut(c.fd, &c.out, &c.writable); err != nil {
		l.clientGone(c)
		return false
	}
	if c.out.Len() == 0 && !c.busy() && c.closeAfter {
		l.closeClient(c)
		return false
	}
	return true
}

// fill reads once into the free part of *buf. It reports whether bytes arrived; eof is set at the
// end of the stream or on an error (err, nil at the end). A short read means the socket is empty:
// readable is cleared, and the next arrival is reported again.
func fill(fd int, buf *[]byte, readable, hup *bool) (got, eof bool, err error) {
	b := *buf
	n, eof, err := readInto(fd, b[len(b):cap(b)], readable, hup)
	*buf = b[:len(b)+n]
	return n > 0, eof, err
}

// readInto reads once into p (not empty), with fill's rules: n bytes arrived; eof at the end of the
// stream or on an error; a short read clears readable.
func readInto(fd int, p []byte, readable, hup *bool) (n int, eof bool, err error) {
	return readvInto(fd, p, nil, readable, hup)
}

// readvInto is readInto into p and then q (one readv when q is not empty).
func readvInto(fd int, p, q []byte, readable, hup *bool) (n int, eof bool, err error) {
	for {
		var n int
		var err error
		if len(q) == 0 {
			n, err = sysRead(fd, p)
		} else {
			n, err = sysReadv2(fd, p, q)
		}
		switch {
		case n > 0:
			if n < len(p)+len(q) {
				*readable = false
			}
			return n, false, nil
		case n == 0 && err == nil:
			*readable = false
			return 0, true, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			// Nothing to read, not even the end: whatever reported a hang-up, the stream has not
			// ended (waiting for an arrival is right, reading again is not).
			*readable, *hup = false, false
			return 0, false, nil
		default:
			*readable = false
			return 0, true, err
		}
	}
}

// A client connection holds a request buffer only while it has request bytes: a kept-alive
// connection waiting for its next request, or one whose request went to the goroutine path to be
// held, holds none (10,000 held requests would otherwise keep 40 MiB of them).
func (l *evLoop) getBuf() []byte {
	if n := len(l.free); n > 0 {
		b := l.free[n-1]
		l.free[n-1] = nil
		l.free = l.free[:n-1]
		return b
	}
	return make([]byte, 0, evClientBuffer)
}

// getRequest returns a request parse from the loop's own free list (no sync.Pool on the loop).
func (l *evLoop) getRequest() *rawRequest {
	if n := len(l.rqs); n > 0 {
		rq := l.rqs[n-1]
		l.rqs[n-1] = nil
		l.rqs = l.rqs[:n-1]
		return rq
	}
	return rawRequests.Get().(*rawRequest)
}

// putRequest gives back a request parse the loop took (one carried to the goroutine path is
// released there instead).
func (l *evLoop) putRequest(rq *rawRequest) {
	if len(l.rqs) >= evFreeRequests {
		rq.release()
		return
	}
	rq.reset() // drops its references into the head
	l.rqs = append(l.rqs, rq)
}

// releaseIn gives c's request buffer back when it is empty; a large response buffer goes too.
func (l *evLoop) releaseIn(c *evClient) {
	if c.in != nil && len(c.in) == 0 {
		if len(l.free) < 256 {
			l.free = append(l.free, c.in)
		}
		c.in = nil
	}
	if c.out.Len() == 0 && c.out.Cap() > evClientBuffer {
		c.out = bytes.Buffer{}
	}
}

// serveNext starts the next request once the previous response is out.
func (l *evLoop) serveNext(c *evClient) {
	for !c.busy() && !c.closed && c.out.Len() == 0 {
		end := headerEnd(c.in)
		if end < 0 {
			if c.in != nil && (len(c.in) == cap(c.in) || bareLF(c.in)) {
				l.handOff(c, false, nil) // too large, or bare LF: net/http decides
				return
			}
			if (c.readable || c.hup) && !c.eof {
				had := len(c.in)
				if c.in == nil {
					c.in = l.getBuf()
				}
				got, eof, _ := fill(c.fd, &c.in, &c.readable, &c.hup)
				l.releaseIn(c)
				if eof {
					c.eof = true
				}
				if got && had == 0 {
					c.since = l.now // the header timeout runs from the first byte
				}
				continue
			}
			if c.eof || len(c.in) == 0 && l.ls.s.shuttingDown() {
				l.closeClient(c)
			}
			return
		}
		if l.ls.s.shuttingDown() {
			l.closeClient(c) // as the goroutine path does with a request that comes after the drain began
			return
		}
		n, ok := screenRequest(c.in[:end])
		if !ok {
			l.handOff(c, false, nil) // the goroutine path serves it
			return
		}
		l.startRequest(c, end, n)
	}
}

// startRequest routes a screened request head (the first end bytes of c.in), with a body of
// bodyLen bytes after it.
func (l *evLoop) startRequest(c *evClient, end int, bodyLen int64) {
	rq := l.getRequest()
	if !rq.parse(string(c.in[:end])) {
		l.putRequest(rq)
		l.handOff(c, false, nil)
		return
	}
	rq.bodyLen = bodyLen
	x := l.e.rawRoute(rq)
	if x == nil {
		l.putRequest(rq)
		l.handOff(c, false, nil)
		return
	}
	c.rq, c.headLen, c.x, c.bodyLeft = rq, end, x, bodyLen
	c.reqID++
	c.begun = l.now
	if c.hup {
		l.hungUp(c) // closed its side with (or before) the request: watchAfter to answer it
		if c.closed {
			return
		}
	}
	addr, ok := x.Pick(0)
	if !ok {
		l.giveBack(c) // no endpoint after all: the goroutine path answers
		return
	}
	c.addr = addr
	l.acquire(c)
}

// acquire finds c an upstream connection to its endpoint: an idle one of the loop, else a new one
// (dialled by a goroutine), else — every connection to the endpoint in use — c goes back to the
// goroutine path, which waits for one in line.
func (l *evLoop) acquire(c *evClient) {
	addr := c.addr
	// An idle connection the upstream closed or wrote to before this batch's wait was closed by
	// its event (see dropStirredIdle). One pooled during this batch has had no wait to report
	// anything since its response ended: it is peeked at (as h1Transport peeks at every one), and
	// so is every one a non-replayable request would use.
	check := !replayable(c.rq.method, c.rq.idempotencyKey)
	for up := l.popIdle(addr); up != nil; up = l.popIdle(addr) {
		if (check || up.idleBatch == l.batch) && !l.quietUp(up) {
			l.closeUp(up)
			continue
		}
		up.reused = true
		l.send(c, up)
		return
	}
	// One the goroutine path pooled (a connection handed over with its request returns there).
	for pc := l.e.fast.takeIdle(addr); pc != nil; pc = l.e.fast.takeIdle(addr) {
		if !pc.quiet() {
			l.e.fast.discard(pc)
			continue
		}
		fd, err := takeFD(pc.c)
		if err != nil {
			l.e.fast.releaseSlot(addr)
			continue
		}
		up := &evUp{fd: fd, addr: addr, in: make([]byte, 0, evUpBuffer), writable: true, reused: true}
		if err := l.setFD(fd, up); err != nil {
			_ = unix.Close(fd)
			l.e.fast.releaseSlot(addr)
			continue
		}
		l.send(c, up)
		return
	}
	if !l.e.fast.reserve(addr) {
		if !c.counted {
			l.giveBack(c)
		} else {
			l.continueForward(c)
		}
		return
	}
	l.dialing++
	dial, ctx := l.e.fast.dial, l.ls.s.base
	go func() {
		m := evMsg{kind: evDialed, c: c, addr: addr, fd: -1}
		nc, err := dial(ctx, "tcp", addr)
		if err == nil {
			m.fd, err = takeFD(nc)
		}
		m.err = err
		l.post(m)
	}()
}

// dialed takes the result of a dial started by acquire.
func (l *evLoop) dialed(m evMsg) {
	l.dialing--
	c := m.c
	if m.err != nil {
		l.e.fast.releaseSlot(m.addr)
		if c.closed {
			return
		}
		if !IsDialError(m.err) {
			if !c.counted {
				l.giveBack(c) // e.g. a dialer whose connections have no socket: the goroutine path dials
			} else {
				l.handOffFailed(c, fmt.Errorf("forwarding to %s: %w", m.addr, m.err))
			}
			return
		}
		// As tryEndpoints: when the exchange allows another endpoint (it marks this one bad), the
		// goroutine path tries the next (from the start: nothing was counted or sent); without, the
		// request fails.
		if c.x.Refused(m.addr, 0, m.err) {
			if !c.counted {
				l.giveBack(c)
			} else {
				l.continueForward(c)
			}
			return
		}
		l.count(c)
		l.handOffFailed(c, fmt.Errorf("forwarding to %s: %w", m.addr, m.err))
		return
	}
	up := &evUp{fd: m.fd, addr: m.addr, in: make([]byte, 0, evUpBuffer), writable: true}
	if err := l.setFD(m.fd, up); err != nil {
		_ = unix.Close(m.fd)
		l.e.fast.releaseSlot(m.addr)
		if !c.closed {
			l.fail(c, err)
		}
		return
	}
	if c.closed {
		l.putIdle(up)
		return
	}
	l.send(c, up)
}

// send counts the request (the first time) and writes its head to up, with the part of its body
// read with the head; pumpBody sends the rest.
func (l *evLoop) send(c *evClient, up *evUp) {
	c.up, up.c = up, c
	l.count(c)
	up.out.Reset()
	c.rq.write(&up.out, c.ip)
	if k := min(int64(len(c.in)-c.headLen), c.bodyLeft); k > 0 {
		_, _ = up.out.Write(c.in[c.headLen : c.headLen+int(k)])
		c.headLen += int(k) // consumed with the head
		c.bodyLeft -= k
	}
	if c.bodyLeft > 0 {
		l.pumpBody(c) // the head goes out with the next part of the body
		return
	}
	l.flushUp(up)
}

// pumpBody relays the request body from the client to the upstream connection, as far as the
// sockets allow: read into the loop's body buffer (never past the body: what follows is the next
// request) and written from there, what the upstream's socket does not take waiting in up.out. A
// client that ends its stream before the whole body is gone: the upstream connection is closed
// and nothing is answered. A request with a body is never replayed; a failure, or a response that
// comes before the whole body was read, closes the client connection after its answer.
func (l *evLoop) pumpBody(c *evClient) {
	up := c.up
	for c.up == up && !c.closed && c.bodyLeft > 0 {
		if !up.writable {
			return // the upstream's socket is full: on once it is writable
		}
		if !c.readable && !c.hup {
			l.flushUp(up) // what is pending (the head, with the body bytes read with it)
			return
		}
		var n int
		var eof bool
		var err error
		if c.bodyLeft <= int64(len(l.body)) {
			// The rest of the body: the read goes on into the request buffer, which the body does
			// not use (send took what the head came with), so that a short read tells the socket is
			// drained (else the next request's read would find nothing: a system call more per
			// upload), and the first bytes of a pipelined request land where serveNext reads them.
			c.in, c.headLen = c.in[:0], 0
			n, eof, err = readvInto(c.fd, l.body[:c.bodyLeft], c.in[:cap(c.in)], &c.readable, &c.hup)
			if extra := int64(n) - c.bodyLeft; extra > 0 {
				c.in, n = c.in[:extra], int(c.bodyLeft)
			}
		} else {
			n, eof, err = readInto(c.fd, l.body[:len(l.body)], &c.readable, &c.hup)
		}
		if eof {
			c.eof = true
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			l.e.log.V(1).Info("reading the request body failed; closing the connection", "host", c.rq.host, "error", err.Error())
			l.clientGone(c)
			return
		}
		if n == 0 {
			l.flushUp(up) // nothing more yet: what is pending goes
			return
		}
		c.bodyLeft -= int64(n)
		// Written after what is pending in up.out, in one writev.
		if err := flushOutv(up.fd, &up.out, &up.writable, l.body[:n], nil); err != nil {
			l.upWriteFailed(up, err)
			return
		}
	}
	if c.up == up && !c.closed && c.bodyLeft == 0 && c.hup && !c.relaying() {
		l.hungUp(c) // closed its side after the body: as for a request without one
	}
}

// count counts c's request once (see serveRaw).
func (l *evLoop) count(c *evClient) {
	if !c.counted {
		c.x.Begin()
		c.x.Forwarding()
		c.counted = true
	}
}

// flushUp writes up's pending request bytes.
func (l *evLoop) flushUp(up *evUp) {
	if err := flushOut(up.fd, &up.out, &up.writable); err != nil {
		l.upWriteFailed(up, err)
	}
}

// upWriteFailed handles a failed write of the request to up.
func (l *evLoop) upWriteFailed(up *evUp, err error) {
	if c := up.c; c.relaying() { // answered already (before the whole request was read)
		c.closeAfter = true
		l.finish(c)
	} else {
		l.upFailed(c, staleConnError{fmt.Errorf("writing request: %w", err)})
	}
}

// flushOut writes out to fd while the socket takes it; a full socket clears writable (the next
// writable edge is reported). It returns the error of a failed write.
func flushOut(fd int, out *bytes.Buffer, writable *bool) error {
	for out.Len() > 0 && *writable {
		n, err := sysWrite(fd, out.Bytes())
		if n > 0 {
			out.Next(n)
		}
		switch {
		case err == nil, errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			*writable = false
		default:
			return err
		}
	}
	return nil
}

// flushOutv writes out, then a and b, in one system call while the socket takes them (writev); what
// it does not take is copied to out, which flushOut writes on.
func flushOutv(fd int, out *bytes.Buffer, writable *bool, a, b []byte) error {
	// A few bytes cost less to copy than the vector (a tiny answer's body after its head).
	if *writable && len(a)+len(b) > evCopyMax {
		var iov [3]unix.Iovec
		n := 0
		for _, p := range [3][]byte{out.Bytes(), a, b} {
			if len(p) > 0 {
				iov[n].Base = &p[0]
				iov[n].SetLen(len(p))
				n++
			}
		}
		var wrote int
		var err error
		for {
			wrote, err = sysWritev(fd, iov[:n])
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, unix.EAGAIN):
			*writable = false
		default:
			return err
		}
		skip := min(wrote, out.Len())
		out.Next(skip)
		wrote -= skip
		skip = min(wrote, len(a))
		a = a[skip:]
		wrote -= skip
		b = b[wrote:]
	}
	_, _ = out.Write(a)
	_, _ = out.Write(b)
	return flushOut(fd, out, writable)
}

func (l *evLoop) upEvent(up *evUp, ev uint32) {
	if ev&unix.EPOLLIN != 0 {
		up.readable = true
	}
	if ev&unix.EPOLLOUT != 0 {
		up.writable = true
	}
	if ev&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		up.readable, up.hup = true, true
	}
	c := up.c
	if c == nil {
		if up.readable && up.fd >= 0 {
			l.quietUp(up) // counts bytes nobody asked for
			l.closeUp(up) // closed by the upstream, or bytes nobody asked for: not reusable
		}
		return
	}
	if up.out.Len() > 0 {
		l.flushUp(up)
		if up.c != c {
			return
		}
	}
	if c.bodyLeft > 0 {
		l.pumpBody(c)
		if up.c != c {
			return
		}
	}
	l.relay(c)
}

// relay reads the response and passes it on, as far as the sockets allow.
func (l *evLoop) relay(c *evClient) {
	up := c.up
	for c.up == up && !c.closed {
		if c.relaying() {
			l.relayBody(c)
			return
		}
		if i := bytes.Index(up.in, crlfcrlf); i >= 0 {
			l.passHead(c, i+4)
			continue
		}
		if len(up.in) == cap(up.in) || bareLF(up.in) {
			l.handOffRelay(c, 0) // too large or bare LF: net/http's parser reads it
			return
		}
		if !up.readable && !up.hup { // after a hang-up, read on to the end of the stream
			return
		}
		had := len(up.in)
		_, eof, err := fill(up.fd, &up.in, &up.readable, &up.hup)
		if !eof {
			continue
		}
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		if had == 0 && len(up.in) == 0 {
			l.upFailed(c, staleConnError{fmt.Errorf("reading response: %w", err)})
		} else {
			l.upFailed(c, fmt.Errorf("reading response: %w", err))
		}
		return
	}
}

// relayBody passes on the body of a response whose head is written (to c.out), as far as the
// sockets allow. The body bytes that came with the head (in up.in) and what the next read brings go
// out with the pending head in one write (writev), and the rest of the body is read straight into
// the loop's body buffer and written from there: a body is copied only when the client's socket does
// not take all of it (the rest waits in c.out), where it used to be copied into c.out in 8 KiB reads.
// A read asks for at most one byte more than the body's remaining length, so that a short read tells
// the connection is drained and a byte more tells the upstream sent more than it announced.
func (l *evLoop) relayBody(c *evClient) {
	up := c.up
	for {
		take := min(int64(len(up.in)), c.remaining)
		over := int64(len(up.in)) > take // bytes after the body: the connection is not reused
		var direct []byte
		eof, err := false, error(nil)
		if !over && c.remaining > take && (up.readable || up.hup) && c.writable {
			want := min(c.remaining-take+1, int64(len(l.body)))
			var n int
			n, eof, err = readInto(up.fd, l.body[:want], &up.readable, &up.hup)
			if rest := c.remaining - take; int64(n) > rest {
				over, n = true, int(rest)
			}
			direct = l.body[:n]
		}
		c.remaining -= take + int64(len(direct))
		if c.remaining == 0 || eof {
			if eof && c.remaining > 0 {
				// The upstream broke off the body: the client must not take a short body for a
				// whole one.
				if err == nil {
					err = io.ErrUnexpectedEOF
				}
				l.e.log.V(1).Info("copying the response body failed; aborting the response", "host", c.rq.host, "error", err.Error())
				c.closeAfter = true
			}
			// Recorded before it is sent (see finish): the parts go out with the flush there.
			part := up.in[:take]
			up.in = up.in[:0]
			l.finishWith(c, over, part, direct)
			return
		}
		if err := flushOutv(c.fd, &c.out, &c.writable, up.in[:take], direct); err != nil {
			l.clientGone(c)
			return
		}
		up.in = up.in[:copy(up.in, up.in[take:])]
		if c.out.Len() > 0 || !c.writable || !up.readable && !up.hup {
			return // the client's socket is full, or nothing more arrived: on at the next event
		}
	}
}

// passHead writes the response head (headLen bytes of up.in) when the loop passes the response on
// itself, else hands the request over.
func (l *evLoop) passHead(c *evClient, headLen int) {
	up := c.up
	res, ok := parseRawResponse(up.in[:headLen])
	if !ok {
		l.handOffRelay(c, headLen)
		return
	}
	c.x.Forwarded(c.addr)
	// The status is recorded, and the logic's header fields added, before the head is written.
	extra := c.rq.respHeader()
	c.x.Responded(res.code, extra)
	// An answer that comes before the whole request body was read ends the connection: what is
	// left of the body must not be read as a request.
	c.closeAfter = c.rq.close || c.hup || l.ls.s.shuttingDown() || c.bodyLeft > 0
	writeRawResponseHead(&c.out, up.in[:headLen], res, extra, c.closeAfter)
	up.in = up.in[:copy(up.in, up.in[headLen:])]
	c.res, c.remaining = res, res.length
	if c.rq.method == http.MethodHead {
		c.remaining = 0
	}
}

// finish ends a relayed response: the upstream connection goes back to the pool when it can carry
// another request, the request is recorded, and then the response is sent.
func (l *evLoop) finish(c *evClient) { l.finishWith(c, false, nil, nil) }

// finishWith is finish with the last parts of the body, a and b, sent after c.out; over: the
// upstream sent bytes after the body that are no longer in up.in.
func (l *evLoop) finishWith(c *evClient, over bool, a, b []byte) {
	up := c.up
	c.up, up.c = nil, nil
	// Bytes after the body would be read as the next request's response: not reusable. A socket
	// not known to be empty (the last read filled the buffer, so no new arrival will be reported)
	// is peeked at.
	switch {
	case c.remaining != 0 || !c.res.keep || up.hup || c.bodyLeft > 0: // the upstream has part of a request
		c.closeAfter = c.closeAfter || c.bodyLeft > 0
		l.closeUp(up)
	case len(up.in) > 0 || over:
		l.e.fast.discarded.Leftover.Inc()
		l.closeUp(up)
	case up.readable:
		switch sysPeek(up.fd) {
		case peekQuiet:
			up.readable = false // empty: the next arrival is reported
			l.putIdle(up)
		case peekData:
			l.e.fast.discarded.Leftover.Inc()
			l.closeUp(up)
		default:
			l.closeUp(up)
		}
	default:
		l.putIdle(up)
	}
	c.in = c.in[:copy(c.in, c.in[c.headLen:])]
	l.releaseIn(c)
	l.endRequest(c) // closeAfter stays: the connection closes once the response is out
	c.since = l.now
	if len(a)+len(b) > 0 {
		if err := flushOutv(c.fd, &c.out, &c.writable, a, b); err != nil {
			l.clientGone(c)
			return
		}
	}
	if !l.flushClient(c) {
		return
	}
	if c.out.Len() == 0 {
		l.serveNext(c)
	}
}

// upFailed handles an upstream connection that failed before the response head: a pooled one the
// upstream had closed is replaced for a replayable request, at most twice, as h1Transport does;
// otherwise rawFail answers on the goroutine path.
func (l *evLoop) upFailed(c *evClient, err error) {
	up := c.up
	c.up, up.c = nil, nil
	l.closeUp(up)
	var stale staleConnError
	if up.reused && errors.As(err, &stale) {
		l.dropIdle(up.addr)
		l.e.fast.dropIdle(up.addr)
		if replayable(c.rq.method, c.rq.idempotencyKey) && c.attempts < 2 && c.rq.bodyLen == 0 {
			c.attempts++
			l.acquire(c)
			return
		}
	}
	l.fail(c, fmt.Errorf("forwarding to %s: %w", up.addr, err))
}

// fail hands a request that could not be forwarded to the goroutine path: from the start when it
// was not counted yet, else to rawFail.
func (l *evLoop) fail(c *evClient, err error) {
	if !c.counted {
		l.giveBack(c)
		return
	}
	l.handOffFailed(c, err)
}

// putIdle pools an upstream connection, unless requests of the goroutine path wait for a
// connection to its address: then it is closed, which gives them its slot.
func (l *evLoop) putIdle(up *evUp) {
	if l.quitting || l.e.fast.hasWaiters(up.addr) {
		l.closeUp(up)
		return
	}
	up.idleAt, up.idleBatch = l.now, l.batch
	l.idle[up.addr] = append(l.idle[up.addr], up)
}

// quietUp reports whether an idle upstream connection is open with nothing to read (one
// non-blocking peek); bytes on it are counted as an unsolicited discard.
func (l *evLoop) quietUp(up *evUp) bool {
	switch sysPeek(up.fd) {
	case peekQuiet:
		return true
	case peekData:
		l.e.fast.discarded.Unsolicited.Inc()
	}
	return false
}

// popIdle takes an idle connection to addr, nil when there is none: the most recently pooled one
// of those pooled before the current batch of events, else the most recent one. An epoll wait has
// reported whatever arrived on the former since they were pooled (see dropStirredIdle), so acquire
// uses them without the peek a connection pooled during this batch needs: under load, a response
// that ends and a request that starts in one batch would otherwise cost a system call more.
func (l *evLoop) popIdle(addr string) *evUp {
	idle := l.idle[addr]
	n := len(idle)
	if n == 0 {
		return nil
	}
	i := n - 1
	for j := n - 1; j >= max(0, n-evIdleScan); j-- {
		if idle[j].idleBatch != l.batch {
			i = j
			break
		}
	}
	up := idle[i]
	copy(idle[i:], idle[i+1:])
	idle[n-1] = nil
	l.idle[addr] = idle[:n-1]
	return up
}

// closeUp closes an upstream connection that is idle or was detached from its client.
func (l *evLoop) closeUp(up *evUp) {
	if up.fd < 0 {
		return
	}
	if idle := l.idle[up.addr]; up.c == nil {
		for i := len(idle) - 1; i >= 0; i-- { // the most recent last: dropIdle's pops are quick
			if idle[i] == up {
				l.idle[up.addr] = append(idle[:i], idle[i+1:]...)
				idle[len(idle)-1] = nil
				break
			}
		}
		if len(l.idle[up.addr]) == 0 {
			delete(l.idle, up.addr)
		}
	}
	l.dropFD(up.fd)
	_ = unix.Close(up.fd)
	up.fd = -1
	l.e.fast.releaseSlot(up.addr)
}

// releaseIdle hands the loop's idle connections to addr to h1Transport, which gives each to a
// waiting request (or pools it, where the loops take it back from).
func (l *evLoop) releaseIdle(addr string) {
	for up := l.popIdle(addr); up != nil; up = l.popIdle(addr) {
		fd := up.fd
		up.fd = -1
		l.dropFD(fd)
		nc, err := fdConn(fd)
		if err != nil {
			l.e.fast.releaseSlot(addr) // a slot for a waiter to dial
			continue
		}
		l.e.fast.put(l.e.fast.newConn(addr, nc, nc))
	}
	delete(l.idle, addr)
}

// dropIdle closes the loop's idle connections to addr (see h1Transport.dropIdle).
func (l *evLoop) dropIdle(addr string) {
	for len(l.idle[addr]) > 0 {
		idle := l.idle[addr]
		l.closeUp(idle[len(idle)-1])
	}
}

// giveBack hands an uncounted request back to the goroutine path, which serves it from the start.
func (l *evLoop) giveBack(c *evClient) {
	l.endRequest(c)
	l.handOff(c, true, nil)
}

// carriedStep is what the goroutine path does with a counted request an event loop hands over.
type carriedStep int

const (
	carryForward carriedStep = iota // not sent (a retry that could not get a connection): rawForward
	carryFail                       // its forward failed: rawFail answers err
	carryRelay                      // its response is one the loop does not pass on: rawRelay reads it from pc
)

// carried is a counted request an event loop hands to the goroutine path with its connection: the
// exchange and, for carryRelay, the upstream connection go with it (the loop keeps neither).
type carried struct {
	step    carriedStep
	rq      *rawRequest
	x       Exchange
	err     error   // carryFail
	pc      *h1Conn // carryRelay: the upstream connection, its slot still counted by h1Transport
	headLen int     // carryRelay, as readHeadLen reports it
}

// finish runs the carried request on sc's goroutine (see rawComplete) and reports whether the
// connection can carry another request.
func (cr *carried) finish(e *Engine, sc *h1ServerConn) bool {
	defer cr.rq.release()
	return e.rawComplete(sc, cr.x, func() bool {
		switch cr.step {
		case carryForward:
			return e.rawForward(sc, cr.rq, cr.x)
		case carryFail:
			return e.rawFail(sc, cr.rq, cr.x, cr.err)
		default:
			if !sc.setPeer(cr.pc.c) {
				e.fast.discard(cr.pc)
				return e.rawFail(sc, cr.rq, cr.x, fmt.Errorf("%w: %w", ErrClientGone, sc.ctx.Err()))
			}
			return e.rawRelay(sc, cr.rq, cr.x, cr.pc, cr.headLen)
		}
	})
}

// drop ends a carried request that could not be handed over: what it holds is released and it is
// recorded as failed.
func (cr *carried) drop(e *Engine) {
	if cr.pc != nil {
		e.fast.discard(cr.pc)
	}
	cr.x.End() // no status: recorded as 502
	cr.rq.release()
}

// continueForward hands a counted request that has not been sent (a retry that could not get a
// connection) to the goroutine path's forward, which tries the endpoints.
func (l *evLoop) continueForward(c *evClient) {
	if c.rq.bodyLen > 0 { // not reached: a request with a body is not replayed (upFailed)
		l.handOffFailed(c, fmt.Errorf("forwarding to %s: %w", c.addr, errBodyNotReplayed))
		return
	}
	l.handOffCounted(c, &carried{step: carryForward})
}

var errBodyNotReplayed = errors.New("a request body is not sent twice")

// handOffFailed hands a counted request whose forward failed to rawFail.
func (l *evLoop) handOffFailed(c *evClient, err error) {
	l.handOffCounted(c, &carried{step: carryFail, err: err})
}

// handOffRelay hands a request with a response the loop does not pass on itself to rawRelay, with
// the upstream connection (headLen as readHeadLen reports it).
func (l *evLoop) handOffRelay(c *evClient, headLen int) {
	up := c.up
	c.up, up.c = nil, nil
	if c.bodyLeft > 0 {
		// The upstream answers before it has the whole body, in a form the goroutine path reads:
		// it would not send the rest. The connection is not reused and the client's is closed.
		l.closeUp(up)
		l.handOffFailed(c, fmt.Errorf("forwarding to %s: %w", up.addr, errEarlyAnswer))
		return
	}
	pending := bytes.Clone(up.in)
	fd := up.fd
	up.fd = -1
	l.dropFD(fd)
	nc, err := fdConn(fd)
	if err != nil {
		l.e.fast.releaseSlot(up.addr)
		l.handOffFailed(c, err)
		return
	}
	c.x.Forwarded(c.addr)
	// The connection keeps its slot in h1Transport's count; rawRelay pools or discards it there.
	pc := l.e.fast.newConn(up.addr, nc, &h1ConnReader{c: nc, pending: pending})
	l.handOffCounted(c, &carried{step: carryRelay, pc: pc, headLen: headLen})
}

var errEarlyAnswer = errors.New("the upstream answered before the request body was sent")

// handOffCounted hands c to the goroutine path with its counted request, which cr finishes there.
func (l *evLoop) handOffCounted(c *evClient, cr *carried) {
	cr.rq, cr.x = c.rq, c.x
	if c.rq.bodyLen > 0 {
		cr.rq.close = true // what is left of its body must not be read as a request: answered, then closed
	}
	c.in = c.in[:copy(c.in, c.in[c.headLen:])]
	c.rq, c.x = nil, nil // carried on: endRequest neither releases nor ends them
	l.endRequest(c)
	l.handOff(c, true, cr)
}

// handOff moves c, with the request bytes it read, to the goroutine-per-connection path (see
// h1ServerConn.backToLoop for the way back). started: the loop took the request, which is served
// even when the server began to drain since; cr, when set, is a counted request to finish first.
// When the connection cannot be handed over it is closed, and cr dropped.
func (l *evLoop) handOff(c *evClient, started bool, cr *carried) {
	s := l.ls.s
	pending := bytes.Clone(c.in)
	c.in = c.in[:0]
	l.releaseIn(c)
	c.closed = true
	l.dropFD(c.fd)
	l.clients--
	nc, err := fdConn(c.fd) // closes c.fd
	if err != nil {
		s.log.Error(err, "handing a connection to the goroutine path; closing it")
		s.loopConn(-1)
		if cr != nil {
			cr.drop(l.e)
		}
		return
	}
	sc := &h1ServerConn{s: s, c: nc}
	sc.cr.pending = pending
	if cr == nil && len(pending) > 0 && s.headerTimeout > 0 {
		sc.headerBy = c.since.Add(s.headerTimeout) // the header timeout runs from its first byte
	}
	if cr != nil {
		sc.busyConn.Store(true)
	}
	// Tracked before the loop's count drops, so that a shutdown never sees zero in between; a
	// started request is finished even when the server is shutting down.
	tracked := s.trackConn(sc, started)
	s.loopConn(-1)
	if !tracked {
		_ = nc.Close()
		if cr != nil {
			cr.drop(l.e)
		}
		return
	}
	go sc.serveFrom(cr)
}

// The loops' socket calls on non-blocking sockets never wait, so they are made as raw system calls:
// a P that enters the runtime's syscall state is, after 20µs, handed off by sysmon to another
// thread, and on a loop making a few hundred thousand calls a second that hand-off, the thread
// wake-ups it causes and sysmon's own polling cost more than the calls. Only the epoll wait that
// blocks goes through the runtime (see run).

func sysRead(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

// sysReadv2 reads into p, then q (neither empty).
func sysReadv2(fd int, p, q []byte) (int, error) {
	var iov [2]unix.Iovec
	iov[0].Base, iov[1].Base = &p[0], &q[0]
	iov[0].SetLen(len(p))
	iov[1].SetLen(len(q))
	n, _, e := unix.RawSyscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), 2)
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func sysWrite(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if e != 0 {
		return -1, e
	}
	return int(n), nil
}

func sysWritev(fd int, iov []unix.Iovec) (int, error) {
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// sysPeek is peekFD as a raw system call.
func sysPeek(fd int) peekState {
	var b [1]byte
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
			unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		switch {
		case e == unix.EINTR:
			continue
		case e == unix.EAGAIN:
			return peekQuiet
		case e == 0 && n > 0:
			return peekData
		}
		return peekClosed // the end of the stream, or an error
	}
}

// epollNow returns the events ready now, without waiting.
func epollNow(epfd int, events []unix.EpollEvent) (int, error) {
	n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])), uintptr(len(events)), 0, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
