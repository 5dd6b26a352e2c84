//go:build linux

package engine

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// An event loop's polling: the epoll wait in the runtime's poller, the inbox other goroutines post
// messages to (new connections, the reports of waits and dials, the pool's grants, timers, the
// drain), and the descriptors it watches.

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

	fds      []evSlot // by descriptor
	free     loopFree
	body     []byte      // body bytes on their way between two sockets (see relayBody, pumpBody)
	hdr      http.Header // the request logic's header fields for the answer being written
	rw       h1.ResponseWriter
	timers   timerHeap
	gen      int32
	clients  int
	pending  int // dials and waits running on goroutines, which report back
	ups      loopPool
	quitting bool
	now      time.Time // when the batch of events being handled arrived
	batch    uint64    // counts the batches of events

	// heavy are the clients whose request heads outgrew their first buffer, in the order they did:
	// such a head is read and parsed only in the loop's turns for them (heavyTurn), one after each
	// batch of events, each turn up to evHeavyBudget bytes. So a client sending a large head costs
	// the others one turn's work at most, not the time it takes to read and parse thousands of
	// them, and the heads still go as fast as the loop can read them when it has nothing else to do.
	heavy       clientQueue
	heavyBudget int // bytes the turn running now may still read and parse (0: no turn runs)
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
		body: make([]byte, evBodyBuffer), hdr: http.Header{}}
	l.ups = loopPool{l: l, p: ls.e.pool, idle: map[string][]*evUp{}}
	l.free.arriving = &ls.arriving
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
			return n > 0 || l.heavy.len() > 0 || werr != nil && !errors.Is(werr, unix.EINTR)
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
		l.ups.dropStirredIdle(events[:n])
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
				l.survive(h, func() { l.clientEvent(h, ev.Events) })
			case *evUp:
				l.survive(h.c, func() { l.upEvent(h, ev.Events) })
			}
		}
		l.heavyTurn()
		if l.quitting && l.clients == 0 && l.pending == 0 {
			l.closeAll()
			return
		}
	}
}

// heavyTurn reads and parses the large heads waiting for it (see evLoop.heavy), the longest waiting
// first, until evHeavyBudget bytes were read or parsed; a client whose head is not complete by then
// goes to the back of the line.
func (l *evLoop) heavyTurn() {
	l.heavyBudget = evHeavyBudget
	defer func() { l.heavyBudget = 0 }()
	for n := l.heavy.len(); n > 0 && l.heavyBudget > 0; n-- {
		c := l.heavy.pop()
		c.queued = false
		if !c.closed && !c.busy() {
			l.survive(c, func() { l.serveNext(c) })
		}
	}
}

// deferHeavy puts c in the line for the loop's next turn for large heads.
func (l *evLoop) deferHeavy(c *evClient) {
	if !c.queued {
		c.queued = true
		l.heavy.push(c)
	}
}

// clientQueue is a first-in first-out line of clients.
type clientQueue struct {
	q    []*evClient
	head int
}

func (q *clientQueue) len() int { return len(q.q) - q.head }

func (q *clientQueue) push(c *evClient) {
	if q.head > 0 && q.head >= len(q.q)/2 { // reuse the front once half of it is gone
		n := copy(q.q, q.q[q.head:])
		clear(q.q[n:])
		q.q, q.head = q.q[:n], 0
	}
	q.q = append(q.q, c)
}

func (q *clientQueue) pop() *evClient {
	c := q.q[q.head]
	q.q[q.head] = nil
	q.head++
	if q.head == len(q.q) {
		q.q, q.head = q.q[:0], 0
	}
	return c
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
			l.survive(m.c, func() { l.ups.dialed(m) })
		case evWaited:
			l.survive(m.c, func() { l.waited(m.c, m.err) })
		case evGranted:
			l.survive(m.c, func() { l.ups.granted(m) })
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
			l.ups.releaseIdle(m.addr)
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
				l.ups.closeUp(h)
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
			if h.lingering && now.Sub(h.since) >= evLinger {
				l.closeClient(h)
				continue
			}
			if h.busy() || h.out.Len() > 0 || h.lingering {
				continue
			}
			if len(h.in) == 0 && ls.idleTimeout > 0 && now.Sub(h.since) > ls.idleTimeout ||
				len(h.in) > 0 && ls.headerTimeout > 0 && now.Sub(h.since) > ls.headerTimeout {
				l.closeClient(h)
			}
		case *evUp:
			if h.c == nil && now.Sub(h.idleAt) >= l.e.pool.idleTimeout {
				l.ups.closeUp(h)
			}
		}
	}
}
