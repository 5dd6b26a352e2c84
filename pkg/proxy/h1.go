package proxy

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
	"time"
)

// h1Transport is a synchronous HTTP/1.1 client for requests without a body and without an upgrade,
// which is most proxied traffic. It writes the request and reads the response on the calling
// goroutine over a pooled keep-alive connection, where http.Transport hands every request to two
// more goroutines (a writer and a reader per connection); on a busy host those hand-offs cost more
// than the proxying itself. Everything else (bodies, upgrades, h2c) goes through http.Transport.
//
// Because such a request has no body, it can be sent again safely when a pooled connection turns
// out to have been closed by the upstream before any response byte arrived; that is the only retry.
type h1Transport struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int           // per address
	idleTimeout time.Duration // pooled connections older than this are closed
	now         func() time.Time

	mu        sync.Mutex
	idle      map[string][]*h1Conn
	lastSweep time.Time
}

type h1Conn struct {
	t      *h1Transport
	addr   string
	c      net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
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
	for attempt := 0; ; attempt++ {
		pc, reused := t.get(req.URL.Host)
		if pc == nil {
			c, err := t.dial(ctx, "tcp", req.URL.Host)
			if err != nil {
				return nil, err
			}
			pc = &h1Conn{t: t, addr: req.URL.Host, c: c, br: bufio.NewReaderSize(c, 8<<10), bw: bufio.NewWriterSize(c, 4<<10)}
		}
		resp, err := pc.roundTrip(ctx, req)
		if err == nil {
			return resp, nil
		}
		_ = pc.c.Close()
		var stale staleConnError
		if reused && errors.As(err, &stale) && attempt < 2 && ctx.Err() == nil {
			continue // the upstream closed the pooled connection; nothing was processed
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return nil, err
	}
}

// staleConnError marks a failure on a connection before any response byte arrived.
type staleConnError struct{ err error }

func (e staleConnError) Error() string { return e.err.Error() }
func (e staleConnError) Unwrap() error { return e.err }

func (pc *h1Conn) roundTrip(ctx context.Context, req *http.Request) (*http.Response, error) {
	// Cancelling the request (client gone, timeouts) closes the connection, which unblocks I/O.
	var cancelled atomic.Bool
	stop := context.AfterFunc(ctx, func() {
		cancelled.Store(true)
		_ = pc.c.Close()
	})
	if err := req.Write(pc.bw); err != nil {
		stop()
		return nil, staleConnError{fmt.Errorf("writing request: %w", err)}
	}
	if err := pc.bw.Flush(); err != nil {
		stop()
		return nil, staleConnError{fmt.Errorf("writing request: %w", err)}
	}
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
	resp.Body = &h1Body{pc: pc, body: resp.Body, keep: keep, stop: stop, cancelled: &cancelled}
	return resp, nil
}

// h1Body returns the connection to the pool once the body was read to its end.
type h1Body struct {
	pc        *h1Conn
	body      io.ReadCloser
	keep      bool
	done      bool
	stop      func() bool
	cancelled *atomic.Bool
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
	if complete && b.keep && stopped && !b.cancelled.Load() {
		b.pc.t.put(b.pc)
		return
	}
	_ = b.pc.c.Close()
}

// get takes the most recently used idle connection to addr, closing expired ones.
func (t *h1Transport) get(addr string) (*h1Conn, bool) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	conns := t.idle[addr]
	for len(conns) > 0 {
		pc := conns[len(conns)-1]
		conns[len(conns)-1] = nil
		conns = conns[:len(conns)-1]
		if now.Sub(pc.idleAt) < t.idleTimeout {
			t.idle[addr] = conns
			return pc, true
		}
		_ = pc.c.Close()
	}
	delete(t.idle, addr)
	return nil, false
}

func (t *h1Transport) put(pc *h1Conn) {
	now := t.now()
	pc.idleAt = now
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.idle == nil {
		t.idle = map[string][]*h1Conn{}
	}
	if len(t.idle[pc.addr]) >= t.maxIdle {
		_ = pc.c.Close()
		return
	}
	t.idle[pc.addr] = append(t.idle[pc.addr], pc)
	if now.Sub(t.lastSweep) > t.idleTimeout/2 {
		t.sweepLocked(now)
	}
}

// sweepLocked closes expired idle connections, e.g. to pods that went away.
func (t *h1Transport) sweepLocked(now time.Time) {
	t.lastSweep = now
	for addr, conns := range t.idle {
		kept := conns[:0]
		for _, pc := range conns {
			if now.Sub(pc.idleAt) < t.idleTimeout {
				kept = append(kept, pc)
			} else {
				_ = pc.c.Close()
			}
		}
		clear(conns[len(kept):])
		if len(kept) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = kept
		}
	}
}

// CloseIdle closes every pooled connection.
func (t *h1Transport) CloseIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, conns := range t.idle {
		for _, pc := range conns {
			_ = pc.c.Close()
		}
	}
	t.idle = nil
}
