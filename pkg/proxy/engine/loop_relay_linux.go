//go:build linux

package engine

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// The relay: a request's head and body sent upstream, and the response read and passed on. A
// response head that h1.ParseResponse accepts (HTTP/1.1, one Content-Length: the common case) is
// passed on as it came and its body copied through the loop's body buffer without a copy of its
// own where the sockets allow (relayBody); any other response goes through h1.Relay, which frames
// it from the bytes as net/http reads them (relayOther). A response head over maxResponseHead is
// refused (502).

// send writes the request's head to up, with the part of its body read with the head; pumpBody
// sends the rest.
func (l *evLoop) send(c *evClient, up *evUp) {
	c.up, up.c = up, c
	c.step = stepSending
	up.out.Reset()
	c.rq.Write(&up.out, c.peer)
	if k := min(int64(len(c.in)), c.bodyLeft); k > 0 {
		_, _ = up.out.Write(c.in[:k])
		c.bodyLeft -= k
		l.free.consume(c, int(k))
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
			// The rest of the body: the read goes on into the request buffer, so that a short read
			// tells the socket is drained (else the next request's read would find nothing: a
			// system call more per upload), and the first bytes of a pipelined request land where
			// serveNext reads them.
			if c.in == nil {
				c.in = l.free.buf()
			}
			n, eof, err = readvInto(c.fd, l.body[:c.bodyLeft], c.in[:cap(c.in)], &c.readable, &c.hup)
			if extra := int64(n) - c.bodyLeft; extra > 0 {
				c.in, n = c.in[:extra], int(c.bodyLeft)
			}
			l.free.releaseIn(c)
		} else {
			n, eof, err = readInto(c.fd, l.body, &c.readable, &c.hup)
		}
		if eof {
			c.eof = true
			if err == nil {
				err = io.ErrUnexpectedEOF
			}
			l.e.log.V(1).Info("reading the request body failed; closing the connection", "host", c.rq.Host, "error", err.Error())
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
	if c.up == up && !c.closed && c.bodyLeft == 0 && c.hup && c.step != stepRelaying {
		l.hungUp(c) // closed its side after the body: as for a request without one
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
	if c := up.c; c.step == stepRelaying { // answered already (before the whole request was read)
		c.closeAfter = true
		c.bodyLeft = 0 // what is left of it is not read: the connection closes
		l.relay(c)
	} else {
		l.upFailed(c, staleConnError{fmt.Errorf("writing request: %w", err)})
	}
}

func (l *evLoop) upEvent(up *evUp, ev uint32) {
	if ev&unixIn != 0 {
		up.readable = true
	}
	if ev&unixOut != 0 {
		up.writable = true
	}
	if ev&unixHangUp != 0 {
		up.readable, up.hup = true, true
	}
	c := up.c
	if c == nil {
		if up.readable && up.fd >= 0 {
			l.ups.quietUp(up) // counts bytes nobody asked for
			l.ups.closeUp(up) // closed by the upstream, or bytes nobody asked for: not reusable
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
	for c.up == up && up != nil && !c.closed {
		if c.step == stepRelaying {
			if c.relay != nil {
				l.relayOther(c)
			} else {
				l.relayBody(c)
			}
			return
		}
		if end := h1.HeadEnd(up.in); end >= 0 {
			if res, ok := h1.ParseResponse(up.in[:end]); ok {
				l.passHead(c, end, res)
				continue
			}
		}
		if end := h1.LooseHeadEnd(up.in); end >= 0 {
			l.otherHead(c, end)
			continue
		}
		if len(up.in) == cap(up.in) {
			if cap(up.in) >= maxResponseHead {
				l.upFailed(c, fmt.Errorf("reading response: %w", errHeadTooLarge))
				return
			}
			up.in = append(make([]byte, 0, min(2*cap(up.in), maxResponseHead)), up.in...)
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

// headArrived records a response head: the attempt reached its endpoint (Forwarded) and the
// status is known (Responded, whose fields the logic adds go in l.hdr).
func (l *evLoop) headArrived(c *evClient, code int, h http.Header) {
	l.timers.clear(c, timerHeader)
	c.x.Forwarded(c.addr)
	c.x.Responded(code, h)
	c.step = stepRelaying
	// An answer that comes before the whole request body was read ends the connection: what is
	// left of the body must not be read as a request.
	c.closeAfter = c.rq.Close || c.hup || l.ls.shuttingDown() || c.bodyLeft > 0
}

// passHead writes a response head h1.ParseResponse accepted (headLen bytes of up.in).
func (l *evLoop) passHead(c *evClient, headLen int, res h1.Response) {
	up := c.up
	l.headArrived(c, res.Code, l.hdr)
	h1.WritePassedHead(&c.out, up.in[:headLen], res, l.hdr, c.closeAfter)
	clear(l.hdr)
	up.in = up.in[:copy(up.in, up.in[headLen:])]
	c.res, c.remaining = res, res.Length
	if c.rq.Method == http.MethodHead {
		c.remaining = 0
	}
}

// otherHead reads a response head h1.ParseResponse did not accept (headLen bytes of up.in, as
// net/http's parser delimits it) with h1.Relay.
func (l *evLoop) otherHead(c *evClient, headLen int) {
	up := c.up
	r := l.free.relay()
	code, informational, err := r.Head(up.in[:headLen], c.rq.Method)
	if err == nil && informational {
		l.free.putRelay(r)
		up.in = up.in[:copy(up.in, up.in[headLen:])] // dropped; the final response follows
		return
	}
	if err != nil {
		l.free.putRelay(r)
		l.upFailed(c, err)
		return
	}
	c.relay = r
	l.headArrived(c, code, r.Header())
	r.WriteHead(&c.out, c.closeAfter)
	up.in = up.in[:copy(up.in, up.in[headLen:])]
}

// relayBody passes on the body of a response whose head was passed on (to c.out), as far as the
// sockets allow. The body bytes that came with the head (in up.in) and what the next read brings go
// out with the pending head in one write (writev), and the rest of the body is read straight into
// the loop's body buffer and written from there: a body is copied only when the client's socket does
// not take all of it (the rest waits in c.out). A read asks for at most one byte more than the
// body's remaining length, so that a short read tells the connection is drained and a byte more
// tells the upstream sent more than it announced.
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
			part := up.in[:take]
			if eof && c.remaining > 0 {
				// The upstream broke off the body: the client must not take a short body for a
				// whole one.
				if err == nil {
					err = io.ErrUnexpectedEOF
				}
				_ = flushOutv(c.fd, &c.out, &c.writable, part, direct)
				l.abort(c, err)
				return
			}
			// Recorded before it is sent (see finish): the parts go out with the flush there.
			up.in = up.in[:0]
			l.finish(c, over, part, direct)
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

// relayOther passes on the body of a response h1.Relay frames, as far as the sockets allow: what
// arrived is framed into c.out and written, and more is read once the client took it.
func (l *evLoop) relayOther(c *evClient) {
	up, r := c.up, c.relay
	for {
		n, done, err := r.Body(up.in, &c.out)
		up.in = up.in[:copy(up.in, up.in[n:])]
		if err != nil {
			l.abort(c, err)
			return
		}
		if done {
			l.finish(c, false, nil, nil)
			return
		}
		if err := flushOut(c.fd, &c.out, &c.writable); err != nil {
			l.clientGone(c)
			return
		}
		if c.out.Len() > 0 || !up.readable && !up.hup {
			return // the client's socket is full, or nothing more arrived: on at the next event
		}
		_, eof, err := fill(up.fd, &up.in, &up.readable, &up.hup)
		if eof {
			up.hup = true // read on to the end of the stream
		}
		if eof && len(up.in) == 0 {
			done, ferr := r.EOF()
			if !done {
				if ferr == nil {
					ferr = err
				}
				l.abort(c, fmt.Errorf("reading the response body: %w", ferr))
				return
			}
			up.hup = true
			l.finish(c, false, nil, nil)
			return
		}
	}
}

// finish ends a relayed response: the request is recorded, the response sent (with the last parts
// of the body, a and b), and then the upstream connection goes back to the pool when it can carry
// another request (after the send: a and b may be in the loop's body buffer, which the next
// request on the connection may use at once); over: the upstream sent bytes after the body that
// are no longer in up.in.
func (l *evLoop) finish(c *evClient, over bool, a, b []byte) {
	up := c.up
	c.up, up.c = nil, nil
	keep := c.res.Keep
	if r := c.relay; r != nil {
		keep = r.Keep
		if !r.End(&c.out) {
			c.closeAfter = true
		}
	}
	// Bytes after the body would be read as the next request's response: not reusable. A socket
	// not known to be empty (the last read filled the buffer, so no new arrival will be reported)
	// is peeked at.
	complete := c.remaining == 0 && !up.hup && c.bodyLeft == 0 // else the upstream has part of a request
	if c.bodyLeft > 0 {
		c.closeAfter = true
	}
	leftover := len(up.in) > 0 || over
	if complete && keep && !leftover && up.readable {
		switch sysPeek(up.fd) {
		case peekQuiet:
			up.readable = false // empty: the next arrival is reported
		case peekData:
			leftover = true
		default:
			complete = false // closed by the upstream
		}
	}
	reuse := l.e.pool.reusable(complete, keep, leftover)
	if !reuse {
		l.ups.closeUp(up)
	}
	l.endRequest(c) // closeAfter stays: the connection closes once the response is out
	c.since = l.now
	sent := true
	if len(a)+len(b) > 0 {
		sent = flushOutv(c.fd, &c.out, &c.writable, a, b) == nil
	}
	if reuse {
		l.ups.putIdle(up)
	}
	if !sent {
		l.closeClient(c)
		return
	}
	if !l.flushClient(c) {
		return
	}
	if c.out.Len() == 0 {
		l.serveNext(c)
	}
}

// upFailed handles an upstream connection that failed before the response head: a pooled one the
// upstream had closed is replaced for a replayable request without a body, at most h1.MaxReplays
// times (as on the net/http path); otherwise the failure is answered.
func (l *evLoop) upFailed(c *evClient, err error) {
	up := c.up
	c.up, up.c = nil, nil
	l.ups.closeUp(up)
	if staleReused(up.reused, err) {
		l.ups.dropIdle(up.addr)
		if l.e.pool.replay(up.addr, up.reused, err, h1.Replayable(c.rq.Method, c.rq.IdempotencyKey) && c.rq.BodyLen == 0, c.replays, false) {
			c.replays++
			l.ups.acquire(c)
			return
		}
	}
	var stale staleConnError
	if errors.As(err, &stale) && c.bodyLeft > 0 {
		c.closeAfter = true
	}
	l.fail(c, fmt.Errorf("forwarding to %s: %w", up.addr, err))
}
