package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// upTransport is the net/http path's synchronous HTTP/1.1 client for requests without a body and
// without an upgrade, over the engine's pool (the same connections, limits and waiting line as the
// event loops'). It writes the request and reads the response on the calling goroutine, where
// http.Transport hands every request to two more goroutines. Requests with a body or an upgrade go
// through http.Transport.
//
// The rules are the event loops': a pooled connection the upstream closed before any response
// byte is replaced, at most h1.MaxReplays times, for a replayable request (h1.Replayable); a
// connection goes back to the pool only when its response ended exactly where its framing said,
// with nothing after it, and it is peeked at (one non-blocking recv) before it carries another
// request, so that bytes an upstream sent after a response are never read as the next request's
// response: the connection is closed and counted (DiscardCounters). A response head longer than
// maxResponseHead is refused.
type upTransport struct{ p *pool }

// maxResponseHead bounds an upstream response head on every path: a backend cannot make the
// interceptor buffer more.
const maxResponseHead = 64 << 10

// upConn is an upstream connection of the net/http path.
type upConn struct {
	p      *pool
	addr   string
	nc     net.Conn
	lim    headLimit
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	// rc is nc's socket for the peek before reuse (nil when it has none); peekFn, c.peek bound
	// once, and peeked keep the peek free of allocations.
	rc     syscall.RawConn
	peekFn func(fd uintptr) bool
	peeked peekState
}

// upConnBuffer is the size of an upstream connection's read buffer.
const upConnBuffer = 8 << 10

func (p *pool) newConn(addr string, nc net.Conn) *upConn {
	c := &upConn{p: p, addr: addr, nc: nc, bw: bufio.NewWriterSize(nc, 4<<10)}
	c.lim.r = nc
	c.br = bufio.NewReaderSize(&c.lim, upConnBuffer)
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			c.rc, c.peekFn = rc, c.peek
		}
	}
	return c
}

// headLimit fails reads once more than left bytes were read while it is armed (a response head
// being read).
type headLimit struct {
	r     io.Reader
	armed bool
	left  int
}

var errHeadTooLarge = errors.New("response head too large")

func (l *headLimit) Read(p []byte) (int, error) {
	if !l.armed {
		return l.r.Read(p)
	}
	if l.left <= 0 {
		return 0, errHeadTooLarge
	}
	n, err := l.r.Read(p[:min(len(p), l.left)])
	l.left -= n
	return n, err
}

// quiet reports whether an idle connection is still open with nothing to read, by a non-blocking
// peek (one system call). Anything else — closed by the upstream, or bytes nobody asked for — means
// it must not carry a request; bytes are counted as an unsolicited discard.
func (c *upConn) quiet() bool {
	if c.br.Buffered() > 0 {
		c.p.discarded.Unsolicited.Inc()
		return false
	}
	if c.rc == nil {
		return true
	}
	c.peeked = peekQuiet
	if err := c.rc.Read(c.peekFn); err != nil {
		return false
	}
	if c.peeked == peekData {
		c.p.discarded.Unsolicited.Inc()
	}
	return c.peeked == peekQuiet
}

func (c *upConn) peek(fd uintptr) bool {
	c.peeked = peekFD(int(fd))
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

// fdConn turns a socket an event loop gives up into a net.Conn of the runtime's poller.
func fdConn(fd int) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), "")
	defer func() { _ = f.Close() }()
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("handing a socket back to the runtime: %w", err)
	}
	return c, nil
}

// fastEligible reports whether req can use upTransport.
func fastEligible(req *http.Request) bool {
	return (req.Body == nil || req.Body == http.NoBody) && req.ContentLength == 0 &&
		req.Header.Get("Upgrade") == "" && len(req.TransferEncoding) == 0 && req.Header.Get("Expect") == ""
}

// staleConnError marks a failure on a connection before any response byte arrived.
type staleConnError struct{ err error }

func (e staleConnError) Error() string { return e.err.Error() }
func (e staleConnError) Unwrap() error { return e.err }

// staleReused reports whether err is the failure of a pooled (reused) connection before any
// response byte: the upstream had closed it.
func staleReused(reused bool, err error) bool {
	var stale staleConnError
	return reused && errors.As(err, &stale)
}

// replay reports whether a request that failed on a connection may be sent again on another one
// (see h1.Replayable), and drops the idle connections to the address when the failed one was a
// pooled connection the upstream had closed. Both paths decide with it.
func (p *pool) replay(addr string, reused bool, err error, replayable bool, attempt int, gone bool) bool {
	if !staleReused(reused, err) {
		return false
	}
	p.dropIdle(addr) // pooled before it, the others are likely closed too
	return replayable && attempt < h1.MaxReplays && !gone
}

// RoundTrip sends req (which must satisfy fastEligible) to req.URL.Host. A dial failure is returned
// as the dialer's error so that the caller can try another endpoint.
func (t upTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	replayable := h1.Replayable(req.Method, key || xkey)
	for attempt := 0; ; attempt++ {
		c, reused, err := t.p.acquire(ctx, req.URL.Host)
		if err != nil {
			return nil, err
		}
		resp, err := c.roundTrip(ctx, req)
		if err == nil {
			return resp, nil
		}
		c.discard()
		if t.p.replay(c.addr, reused, err, replayable, attempt, ctx.Err() != nil) {
			continue // the upstream closed the pooled connection; a replay is safe
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, err
	}
}

// acquire returns an idle connection to addr (reused true), checked with quiet, or dials a new one
// when fewer than maxConns are open, or waits in line for one of the two.
func (p *pool) acquire(ctx context.Context, addr string) (*upConn, bool, error) {
	for c := p.takeIdle(addr); c != nil; c = p.takeIdle(addr) {
		if c.quiet() {
			return c, true, nil
		}
		c.discard()
	}
	if p.reserve(addr) {
		return p.dialConn(ctx, addr)
	}
	ch := make(chanWaiter, 1)
	if queued, err := p.wait(addr, ch); err != nil {
		return nil, false, fmt.Errorf("connecting to %s: %w", addr, err)
	} else if !queued {
		return p.dialConn(ctx, addr) // a slot came free
	}
	select {
	case h := <-ch:
		return p.granted(ctx, h)
	case <-ctx.Done():
	}
	if !p.cancel(addr, ch) {
		// Granted something while giving up: pass it on.
		if h := <-ch; h.c == nil && h.fd < 0 {
			p.release(h.addr)
		} else if c, _, _ := p.granted(context.Background(), h); c != nil {
			p.put(c)
		}
	}
	return nil, false, ctx.Err()
}

// granted takes what a waiter of the net/http path got: a connection, or a slot to dial.
func (p *pool) granted(ctx context.Context, h handed) (*upConn, bool, error) {
	switch {
	case h.c != nil:
		return h.c, true, nil
	case h.fd >= 0:
		nc, err := fdConn(h.fd)
		if err != nil {
			p.release(h.addr)
			return nil, false, err
		}
		return p.newConn(h.addr, nc), true, nil
	}
	if ctx.Err() != nil {
		p.release(h.addr)
		return nil, false, ctx.Err()
	}
	return p.dialConn(ctx, h.addr)
}

// dialConn opens a connection in a slot already counted as open.
func (p *pool) dialConn(ctx context.Context, addr string) (*upConn, bool, error) {
	nc, err := p.dial(ctx, "tcp", addr)
	if err != nil {
		p.release(addr)
		return nil, false, err
	}
	return p.newConn(addr, nc), false, nil
}

// discard closes a connection that cannot be reused.
func (c *upConn) discard() {
	_ = c.nc.Close()
	c.p.release(c.addr)
}

func (c *upConn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	// Cancelling the request (client gone, timeouts) closes the connection, which unblocks I/O.
	// stop reports false once this ran, so the body knows not to pool the connection.
	stop := context.AfterFunc(ctx, func() { _ = c.nc.Close() })
	if err := req.Write(c.bw); err != nil {
		stop()
		return nil, staleConnError{fmt.Errorf("writing request: %w", err)}
	}
	if err := c.bw.Flush(); err != nil {
		stop()
		return nil, staleConnError{fmt.Errorf("writing request: %w", err)}
	}
	return c.readResponse(req, stop)
}

// readResponse reads the response to req (informational responses are dropped). Its body returns
// c to the pool once read to its end, when stop (which unregisters whatever would close c on
// cancellation) reports that it was not cancelled.
func (c *upConn) readResponse(req *http.Request, stop func() bool) (*http.Response, error) {
	var resp *http.Response
	for {
		if _, err := c.br.Peek(1); err != nil {
			stop()
			return nil, staleConnError{fmt.Errorf("reading response: %w", err)}
		}
		c.lim.armed, c.lim.left = true, maxResponseHead-c.br.Buffered()
		r, err := http.ReadResponse(c.br, req)
		c.lim.armed = false
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
	resp.Body = &upBody{c: c, body: resp.Body, keep: keep, stop: stop}
	return resp, nil
}

// upBody returns the connection to the pool once the body was read to its end.
type upBody struct {
	c    *upConn
	body io.ReadCloser
	keep bool
	done bool
	// stop unregisters what closes the connection on cancellation; false: it was cancelled.
	stop func() bool
}

func (b *upBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.finish(true)
	}
	return n, err
}

func (b *upBody) Close() error {
	if !b.done {
		b.finish(false)
	}
	return nil
}

func (b *upBody) finish(complete bool) {
	b.done = true
	stopped := b.stop()
	_ = b.body.Close()
	// Bytes after the body (a body sent with a HEAD or 204 answer, more than Content-Length, data
	// after the last chunk) would be read as the next request's response: such a connection is not
	// reused.
	if b.c.p.reusable(complete && stopped, b.keep, b.c.br.Buffered() > 0) {
		b.c.p.put(b.c)
		return
	}
	b.c.discard()
}
