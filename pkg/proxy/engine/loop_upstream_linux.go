//go:build linux

package engine

import (
	"bytes"
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// A loop's upstream connections. Each loop keeps its own idle connections, as nginx's workers do,
// and counts every connection in the engine's pool (pool.go) with the net/http path's, so that
// MaxConnsPerEndpoint bounds them together; a request finds one in this order: an idle one of the
// loop, an idle one of the net/http path, a new one (dialled on a goroutine), or a place in the
// pool's line for the next one that comes free.
//
// An idle connection that the upstream closes or writes to is closed the moment epoll reports it
// (dropStirredIdle); one pooled within the current batch of events (nothing could report on it
// since its response ended), and any one a non-replayable request is about to use, is first
// peeked at.

// loopPool is a loop's share of the engine's upstream pool (pool.go): its idle connections, by
// address, and the connections it dials or is granted, all counted in the shared pool.
type loopPool struct {
	l    *evLoop
	p    *pool
	idle map[string][]*evUp
}

// evUp is an upstream connection owned by a loop: in use by c, or idle.
type evUp struct {
	fd       int
	addr     string
	in       []byte
	out      bytes.Buffer // request bytes the socket did not take yet
	readable bool
	writable bool
	hup      bool
	c        *evClient
	idleAt   time.Time
	reused   bool
	// idleBatch is the batch of events (evLoop.batch) in which the connection was pooled.
	idleBatch uint64
}

// loopWaiter is a request of a loop waiting in the pool's line.
type loopWaiter struct {
	l     *evLoop
	c     *evClient
	reqID uint64
}

func (w *loopWaiter) grant(h handed) {
	w.l.post(evMsg{kind: evGranted, c: w.c, reqID: w.reqID, h: h, w: w})
}

// acquire finds the attempt's endpoint an upstream connection and sends the request on it.
func (u *loopPool) acquire(c *evClient) {
	addr := c.addr
	c.step = stepConnecting
	check := !h1.Replayable(c.rq.Method, c.rq.IdempotencyKey)
	for up := u.popIdle(addr); up != nil; up = u.popIdle(addr) {
		if (check || up.idleBatch == u.l.batch) && !u.quietUp(up) {
			u.closeUp(up)
			continue
		}
		up.reused = true
		u.l.send(c, up)
		return
	}
	for pc := u.p.takeIdle(addr); pc != nil; pc = u.p.takeIdle(addr) {
		if !pc.quiet() {
			pc.discard()
			continue
		}
		if up := u.adoptUp(addr, pc.nc); up != nil {
			up.reused = true
			u.l.send(c, up)
			return
		}
	}
	if u.p.reserve(addr) {
		u.dial(c)
		return
	}
	w := &loopWaiter{l: u.l, c: c, reqID: c.reqID}
	if queued, err := u.p.wait(addr, w); err != nil {
		u.l.fail(c, fmt.Errorf("connecting to %s: %w", addr, err))
		return
	} else if !queued {
		u.dial(c) // a slot came free
		return
	}
	c.waiter = w
}

// adoptUp moves a connection of the net/http path (counted in the pool) to the loop; nil when its
// socket could not be taken (its slot is given back).
func (u *loopPool) adoptUp(addr string, nc net.Conn) *evUp {
	fd, err := takeFD(nc)
	if err != nil {
		u.p.release(addr)
		return nil
	}
	return u.registerUp(addr, fd)
}

// registerUp watches a socket counted in the pool as an upstream connection of the loop; nil when
// it cannot (the socket is closed and its slot given back).
func (u *loopPool) registerUp(addr string, fd int) *evUp {
	up := &evUp{fd: fd, addr: addr, in: make([]byte, 0, evUpBuffer), writable: true}
	if err := u.l.setFD(fd, up); err != nil {
		_ = unix.Close(fd)
		u.p.release(addr)
		return nil
	}
	return up
}

// dial opens a connection in a slot counted in the pool, on a goroutine that reports back.
func (u *loopPool) dial(c *evClient) {
	u.l.pending++
	dial, ctx, addr, reqID := u.p.dial, u.l.ls.base, c.addr, c.reqID
	go func() {
		m := evMsg{kind: evDialed, c: c, reqID: reqID, addr: addr, fd: -1}
		nc, err := dial(ctx, "tcp", addr)
		if err == nil {
			m.fd, err = takeFD(nc)
		}
		m.err = err
		u.l.post(m)
	}()
}

// current reports whether c still waits for what a report about its request reqID brings.
func current(c *evClient, reqID uint64) bool {
	return !c.closed && c.reqID == reqID && c.step == stepConnecting
}

// dialed takes the result of a dial.
func (u *loopPool) dialed(m evMsg) {
	u.l.pending--
	c := m.c
	if m.err != nil {
		u.p.release(m.addr)
		if current(c, m.reqID) {
			u.l.refused(c, m.err)
		}
		return
	}
	up := u.registerUp(m.addr, m.fd)
	switch {
	case up == nil:
		if current(c, m.reqID) {
			u.l.fail(c, errRegister)
		}
	case current(c, m.reqID) && c.waiter == nil:
		u.l.send(c, up)
	default:
		u.putIdle(up) // the request ended meanwhile
	}
}

var errRegister = &unregisteredError{}

type unregisteredError struct{}

func (*unregisteredError) Error() string { return "watching a new upstream connection failed" }

// granted takes what the pool gave a request waiting in its line: a connection, or a slot to dial.
func (u *loopPool) granted(m evMsg) {
	c, h := m.c, m.h
	var up *evUp
	switch {
	case h.c != nil:
		up = u.adoptUp(h.addr, h.c.nc)
	case h.fd >= 0:
		up = u.registerUp(h.addr, h.fd)
	}
	if !current(c, m.reqID) || c.waiter != m.w {
		if up != nil {
			u.putIdle(up) // the request ended meanwhile: the next waiter may take it
		} else if h.c == nil && h.fd < 0 {
			u.p.release(h.addr)
		}
		return
	}
	c.waiter = nil
	switch {
	case up != nil:
		up.reused = true
		u.l.send(c, up)
	case h.c == nil && h.fd < 0:
		u.dial(c)
	default:
		u.acquire(c) // the connection could not be taken: try again
	}
}

// leaveLine takes c's request out of the pool's line, if it waits there. A grant already on its
// way is passed on when it arrives (granted).
func (u *loopPool) leaveLine(c *evClient) {
	if w := c.waiter; w != nil {
		u.p.cancel(c.addr, w)
		c.waiter = nil
	}
}

// putIdle pools an upstream connection after a complete response: to the first request waiting
// for a connection to its address (the same loop's at once), else in the loop's idle list.
func (u *loopPool) putIdle(up *evUp) {
	if u.l.quitting {
		u.closeUp(up)
		return
	}
	for {
		w := u.p.nextWaiter(up.addr)
		if w == nil {
			break
		}
		if lw, ok := w.(*loopWaiter); ok && lw.l == u.l {
			c := lw.c
			if !current(c, lw.reqID) || c.waiter != lw {
				continue // ended meanwhile; it left the line without knowing (see leaveLine)
			}
			c.waiter = nil
			up.reused = true
			u.l.send(c, up)
			return
		}
		fd := up.fd
		up.fd = -1
		u.l.dropFD(fd)
		w.grant(handed{addr: up.addr, fd: fd})
		return
	}
	up.idleAt, up.idleBatch = u.l.now, u.l.batch
	u.idle[up.addr] = append(u.idle[up.addr], up)
}

// quietUp reports whether an idle upstream connection is open with nothing to read (one
// non-blocking peek); bytes on it are counted as an unsolicited discard.
func (u *loopPool) quietUp(up *evUp) bool {
	switch sysPeek(up.fd) {
	case peekQuiet:
		return true
	case peekData:
		u.p.discarded.Unsolicited.Inc()
	}
	return false
}

// popIdle takes an idle connection to addr, nil when there is none: the most recently pooled one
// of those pooled before the current batch of events, else the most recent one. An epoll wait has
// reported whatever arrived on the former since they were pooled (see dropStirredIdle), so acquire
// uses them without the peek a connection pooled during this batch needs: under load, a response
// that ends and a request that starts in one batch would otherwise cost a system call more.
func (u *loopPool) popIdle(addr string) *evUp {
	idle := u.idle[addr]
	n := len(idle)
	if n == 0 {
		return nil
	}
	i := n - 1
	for j := n - 1; j >= max(0, n-evIdleScan); j-- {
		if idle[j].idleBatch != u.l.batch {
			i = j
			break
		}
	}
	up := idle[i]
	copy(idle[i:], idle[i+1:])
	idle[n-1] = nil
	u.idle[addr] = idle[:n-1]
	return up
}

// dropStirredIdle closes the idle upstream connections that events report readable (closed by the
// upstream, or bytes nobody asked for) before any client's event of the batch is handled, so that
// a request of the batch cannot take one of them. What arrives later is found by acquire's peek
// (for connections pooled in this batch) or reported by the next batch.
func (u *loopPool) dropStirredIdle(events []unix.EpollEvent) {
	for i := range events {
		ev := &events[i]
		fd := int(ev.Fd)
		if fd == u.l.wakefd || fd >= len(u.l.fds) || u.l.fds[fd].gen != ev.Pad {
			continue
		}
		if up, ok := u.l.fds[fd].h.(*evUp); ok && up.c == nil {
			u.l.upEvent(up, ev.Events)
		}
	}
}

// closeUp closes an upstream connection that is idle or was detached from its client; its slot
// goes to the next request waiting in the pool's line.
func (u *loopPool) closeUp(up *evUp) {
	if up.fd < 0 {
		return
	}
	if idle := u.idle[up.addr]; up.c == nil {
		for i := len(idle) - 1; i >= 0; i-- { // the most recent last: dropIdle's pops are quick
			if idle[i] == up {
				u.idle[up.addr] = append(idle[:i], idle[i+1:]...)
				idle[len(idle)-1] = nil
				break
			}
		}
		if len(u.idle[up.addr]) == 0 {
			delete(u.idle, up.addr)
		}
	}
	u.l.dropFD(up.fd)
	_ = unix.Close(up.fd)
	up.fd = -1
	u.p.release(up.addr)
}

// releaseIdle hands the loop's idle connections to addr to the requests waiting in the pool's
// line (on other loops, or on the net/http path).
func (u *loopPool) releaseIdle(addr string) {
	for u.p.hasWaiters(addr) {
		up := u.popIdle(addr)
		if up == nil {
			break
		}
		u.putIdle(up)
	}
	if len(u.idle[addr]) == 0 {
		delete(u.idle, addr)
	}
}

// dropIdle closes the loop's idle connections to addr (see pool.dropIdle).
func (u *loopPool) dropIdle(addr string) {
	for len(u.idle[addr]) > 0 {
		idle := u.idle[addr]
		u.closeUp(idle[len(idle)-1])
	}
}
