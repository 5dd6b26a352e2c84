//go:build linux

package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// evClient is a client connection owned by a loop, with the request it serves (rq set: busy).
type evClient struct {
	fd   int
	peer h1.Peer // the forwarding rules' view of the connection, fixed at its accept
	in   []byte  // bytes read and not yet consumed: after a request's head, its body and what follows
	// scan is how much of in (before a head was found in it) holds no head end and no bare LF:
	// a head arriving in many reads is searched once, not again from its start on every read.
	scan   int
	out    bytes.Buffer
	queued bool // in the loop's line for large heads (see evLoop.heavy)
	// lingering: the connection was answered without its request being read (refuseHead); what the
	// client still sends is read and dropped until it ends, or for evLinger (then the sweep closes
	// it), so that the answer reaches the client: a close with unread bytes resets the connection,
	// which can destroy the answer on its way. net/http does the same after a 431.
	lingering bool
	wrShut    bool // the sending side was shut (lingering)
	readable  bool // an arrival was reported and the socket not read empty since
	writable  bool
	eof       bool // a read found the end of the stream (or failed)
	hup       bool // epoll reported the client's side closed (or the connection failed)
	since     time.Time
	closed    bool
	timers    [timerKinds]loopTimer

	reqID uint64 // counts the connection's requests; tells a late report for an earlier one
	step  reqStep
	begun time.Time
	rq    *h1.Request
	x     Exchange
	plan  Plan
	// cancel ends the wait of a held request (stepWaiting); the wait reports back.
	cancel context.CancelFunc
	// gone: the client went away (or the server cut it off) while the request was out of the
	// loop's hands; it is ended when the request comes back.
	gone     bool
	addr     string // the endpoint of the current attempt
	attempt  int    // endpoints tried before this one
	replays  int    // times the request was sent again after a pooled connection turned out closed
	waiter   *loopWaiter
	up       *evUp
	res      h1.Response // the response head passed on as it came (relay nil)
	relay    *h1.Relay   // the response relayed otherwise
	relaying bool        // the response head was written
	// remaining is the body length of a passed-on response still to relay.
	remaining int64
	bodyLeft  int64 // request body bytes not yet read from the client (see pumpBody)
	// closeAfter: the connection closes once the response is out.
	closeAfter bool
}

// reqStep is where a client's request is (see loop_request_linux.go).
type reqStep uint8

const (
	stepNone       reqStep = iota // no request
	stepWaiting                   // held: its wait runs on a goroutine
	stepConnecting                // its upstream connection is being dialled, or it waits in line for one
	stepSending                   // on an upstream connection, the response head not read yet
	stepRelaying                  // the response head was written to the client
)

// busy reports whether c has a request in progress.
func (c *evClient) busy() bool { return c.rq != nil }

func (l *evLoop) addClient(fd int, remote string) {
	if l.quitting {
		_ = unix.Close(fd)
		l.ls.conn(-1)
		return
	}
	c := &evClient{fd: fd, since: l.now, writable: true, peer: l.e.trusted.Peer(remote, false)}
	if err := l.setFD(fd, c); err != nil {
		l.ls.log.Error(err, "serving a connection on an event loop; closing it", "remote", remote)
		_ = unix.Close(fd)
		l.ls.conn(-1)
		return
	}
	l.clients++
}

// closeClient closes a client connection. A request still in progress must have been ended or be
// out of the loop's hands (a wait, which reports back).
func (l *evLoop) closeClient(c *evClient) {
	if c.closed {
		return
	}
	c.closed = true
	l.timers.clearAll(c)
	l.dropFD(c.fd)
	_ = unix.Close(c.fd)
	l.clients--
	l.ls.conn(-1)
	c.in, c.scan = c.in[:0], 0
	c.out = bytes.Buffer{}
	l.free.releaseIn(c)
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
			c.hup = true
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
	case c.step == stepRelaying && c.out.Len() == 0:
		l.relay(c) // the client took what was pending: pass on more of the body
	}
}

// hungUp handles a client that closed its sending side while its request runs (held, forwarded
// or answered). Like net/http, which notices a client going away with a background read, a request
// running for watchAfter has lost its client, and a quicker one gets until then to be answered
// (then the connection is closed): a client may close its side once it sent its request.
func (l *evLoop) hungUp(c *evClient) {
	if c.bodyLeft == 0 && len(c.in) > 0 {
		return // it sent its next request: it is still there
	}
	if c.bodyLeft > 0 {
		return // the rest of the body is read first (pumpBody): its end, or the end of the stream
	}
	after := l.ls.watchAfter
	ran := l.now.Sub(c.begun)
	if after <= 0 || ran >= after {
		l.clientGone(c)
		return
	}
	l.timers.set(c, timerHungUp, c.begun.Add(after))
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

// serveNext starts the next request once the previous response is out.
func (l *evLoop) serveNext(c *evClient) {
	if c.lingering {
		l.linger(c)
		return
	}
	for !c.busy() && !c.closed && c.out.Len() == 0 {
		from := max(c.scan-3, 0) // a CRLF CRLF may straddle what was searched and what came since
		end := h1.HeadEnd(c.in[from:])
		if end >= 0 {
			end += from
		} else {
			if h1.BareLFFrom(c.in, c.scan) {
				l.handOff(c) // bare LF: net/http decides
				return
			}
			c.scan = len(c.in)
			large := c.in != nil && (len(c.in) == cap(c.in) || cap(c.in) > evClientBuffer)
			if large && (c.readable || c.hup) && !c.eof && l.heavyBudget <= 0 {
				l.deferHeavy(c) // read in the loop's turn for large heads
				return
			}
			if c.in != nil && len(c.in) == cap(c.in) {
				switch l.growIn(c) {
				case headTooLarge:
					l.handOff(c) // larger than the server takes: net/http answers it (431)
					return
				case headNoRoom:
					l.refuseHead(c)
					return
				}
			}
			if (c.readable || c.hup) && !c.eof {
				had := len(c.in)
				if c.in == nil {
					c.in = l.free.buf()
				}
				got, eof, _ := fill(c.fd, &c.in, &c.readable, &c.hup)
				if large {
					l.heavyBudget -= len(c.in) - had
				}
				l.free.releaseIn(c)
				if eof {
					c.eof = true
				}
				if got && had == 0 {
					c.since = l.now // the header timeout runs from the first byte
				}
				continue
			}
			if c.eof || len(c.in) == 0 && l.ls.shuttingDown() {
				l.closeClient(c)
			}
			return
		}
		if l.ls.shuttingDown() {
			l.closeClient(c) // as net/http does with a request that comes after the drain began
			return
		}
		l.startRequest(c, end)
	}
}

// growIn doubles c's full request buffer, up to the largest head the server takes (maxHead). It
// answers headTooLarge when the buffer is that large already, and headNoRoom when the buffers of
// heads still arriving would take more than maxArriving. A large head is read, searched and parsed
// on the loop like a small one: handed to net/http, each needed a goroutine that parsed it again
// (and a copy for the head watch), and thousands of them arriving at once took the cores from the
// loops.
func (l *evLoop) growIn(c *evClient) growth {
	limit := l.ls.maxHead
	if cap(c.in) >= limit {
		return headTooLarge
	}
	in, ok := l.free.grow(c.in, min(2*cap(c.in), limit), l.ls.maxArriving)
	if !ok {
		return headNoRoom
	}
	l.free.putBuf(c.in)
	c.in = in
	return grown
}

type growth uint8

const (
	grown growth = iota
	headTooLarge
	headNoRoom
)

// refuseHead answers a client whose head found no room to arrive (see evLoops.maxArriving): 503
// with Retry-After, and the connection closed, since the rest of the head is not read.
func (l *evLoop) refuseHead(c *evClient) {
	l.ls.refusedHeads.Add(1)
	l.free.dropGrown(c.in)
	c.in, c.scan = nil, 0
	l.hdr.Set("Retry-After", "1")
	l.hdr.Set("Content-Type", "text/plain; charset=utf-8")
	h1.WriteAnswer(&c.out, &l.rw, "GET", true, http.StatusServiceUnavailable, l.hdr, "head_room\n")
	clear(l.hdr)
	c.lingering, c.since = true, l.now
	if l.flushClient(c) {
		l.linger(c)
	}
}

// linger reads and drops what a lingering client sends (see evClient.lingering), once its answer
// is out and the sending side shut; the connection is closed at the end of the stream.
func (l *evLoop) linger(c *evClient) {
	if c.out.Len() > 0 {
		return // the answer first
	}
	if !c.wrShut {
		_ = unix.Shutdown(c.fd, unix.SHUT_WR)
		c.wrShut = true
	}
	for (c.readable || c.hup) && !c.eof {
		n, eof, _ := readInto(c.fd, l.body, &c.readable, &c.hup)
		if eof {
			c.eof = true
		} else if n == 0 {
			break
		}
	}
	if c.eof {
		l.closeClient(c)
	}
}

// handOff moves c, with the request bytes it read, to net/http, which serves the rest of the
// connection. No request of c is in progress. When net/http no longer accepts connections (it is
// shutting down) the connection is closed.
func (l *evLoop) handOff(c *evClient) {
	ls := l.ls
	pending := bytes.Clone(c.in)
	c.in, c.scan = c.in[:0], 0
	l.free.releaseIn(c)
	c.closed = true
	l.timers.clearAll(c)
	l.dropFD(c.fd)
	l.clients--
	nc, err := fdConn(c.fd) // closes c.fd
	if err != nil {
		ls.log.Error(err, "handing a connection to net/http; closing it")
		ls.conn(-1)
		return
	}
	var headerBy time.Time
	if len(pending) > 0 && ls.headerTimeout > 0 {
		headerBy = c.since.Add(ls.headerTimeout) // the header timeout runs from its first byte
	}
	wc := newWatchedConn(nc, io.MultiReader(bytes.NewReader(pending), nc), headerBy)
	wc.gate.start(ls.heads, pending)
	// Counted until net/http has it, so that a drain never sees zero in between; given on a
	// goroutine, so that the loop never waits for net/http's accept.
	go func() {
		if !ls.handoff.give(wc) {
			_ = wc.Close()
		}
		ls.conn(-1)
	}()
}

// survive runs the handling of one event; a panic in it (a bug in the engine or the request logic)
// costs the connection it concerns, not the interceptor: it is logged, and the client connection c
// (nil: none) is closed with its request and upstream connection. net/http's server does the same
// for the connections it serves.
func (l *evLoop) survive(c *evClient, f func()) {
	defer func() {
		if v := recover(); v != nil {
			l.ls.log.Error(fmt.Errorf("%v", v), "panic in an event loop; closing the connection it concerns", "stack", string(debug.Stack()))
			clear(l.hdr)
			if c != nil {
				l.abandon(c)
			}
		}
	}()
	f()
}

// abandon closes c after a panic, as far as it goes: its upstream connection, its place in the
// pool's line, its request (End, so that the app's counts do not stay up; a held request ends when
// its wait reports back) and its socket.
func (l *evLoop) abandon(c *evClient) {
	defer func() { _ = recover() }()
	if up := c.up; up != nil {
		c.up, up.c = nil, nil
		l.ups.closeUp(up)
	}
	l.ups.leaveLine(c)
	if c.step == stepWaiting {
		c.gone = true
		c.cancel()
	} else if x := c.x; x != nil {
		c.x = nil
		x.End()
	}
	if !c.closed {
		c.rq = nil
		l.closeClient(c)
	}
}
