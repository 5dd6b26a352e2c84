package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Server is a controller-runtime Runnable serving one port, with a graceful drain when its context
// ends: Ready turns to an error at once, the server keeps serving for DrainDelay (so load balancers
// notice the failing readiness probe and stop sending), then stops accepting and waits up to
// DrainTimeout for in-flight and held requests and, when WaitIdle is set, for upgraded connections
// (WebSockets). Whatever is still running then is cut off. The listener, readiness and drain are
// Lifecycle's, which it embeds.
//
// With an Engine and event loops (FastHTTP1, EventLoops, Linux) the loops serve the port's
// HTTP/1.1 connections (see evLoops) and net/http serves those the loops leave to it; otherwise
// net/http serves every connection. Every connection net/http serves is watched for requests with
// both Content-Length and Transfer-Encoding (see headwatch.go), as on the TLS port.
type Server struct {
	// Name appears in logs.
	Name string
	// Addr is the listen address; ignored when Listener is set.
	Addr     string
	Listener net.Listener
	// Handler serves the requests net/http reads; nil means Engine.
	Handler http.Handler
	// Engine, when set, serves the event loops' requests (and, without Handler, net/http's).
	Engine *Engine
	// H2C also accepts cleartext HTTP/2 with prior knowledge (gRPC clients without TLS).
	H2C bool
	// FastHTTP1 serves HTTP/1.1 on the event loops (with an Engine, on Linux, and EventLoops not 0);
	// off, net/http serves every connection.
	FastHTTP1 bool
	// EventLoops is how many event loops serve the port: 0 none, negative one per GOMAXPROCS.
	EventLoops int
	// WatchClientAfter is how long a request whose client closed its sending side still gets to be
	// answered before the client counts as gone (default 50ms; negative: gone at once).
	WatchClientAfter time.Duration
	// ReadHeaderTimeout bounds the time from a request's first byte to the end of its header block
	// (default 30s), once for the whole connection's path: a connection the loops hand to net/http
	// keeps the deadline they started.
	ReadHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block as net/http's does (0: its default, 1 MiB).
	// The event loops read heads up to that size themselves and hand a larger one, with the
	// connection, to net/http, which answers 431 (or takes it within its own slack).
	MaxHeaderBytes int
	// MaxArrivingHeaderBytes bounds the event loops' buffers grown for heads still arriving (beyond
	// each connection's first 4 KiB), every connection together; a head that would need more is
	// answered 503 with Retry-After and its connection closed. 0: no bound.
	MaxArrivingHeaderBytes int64
	// HeadParsers bounds how many of the connections the event loops hand to net/http have their
	// request heads parsed at once (0: half of GOMAXPROCS, at least one; see headGate).
	HeadParsers int

	DrainDelay   time.Duration
	DrainTimeout time.Duration
	// WaitIdle, when set, is waited for after http.Server.Shutdown (which ignores hijacked
	// connections); the proxy passes its WaitUpgrades.
	WaitIdle func(ctx context.Context) error
	// After, when set, delays the start of the drain until it is closed once the context ended:
	// the admin server stays up until the proxy has drained, so probes and counts keep answering.
	After <-chan struct{}
	// OnShutdown, when set, runs when the server stops accepting (after the delay), e.g. to end
	// streaming responses that Shutdown would otherwise wait for.
	OnShutdown func()
	// Drained is closed when the server has stopped; may be nil.
	Drained chan struct{}
	// Log receives lifecycle messages.
	Log logr.Logger

	Lifecycle
	loops atomic.Pointer[evLoops]
}

// LoopConnections reports how many client connections the event loops serve (not counting those
// net/http serves), for diagnostics.
func (s *Server) LoopConnections() int {
	if ls := s.loops.Load(); ls != nil {
		return ls.connections()
	}
	return 0
}

// ArrivingHeads returns the memory the event loops' buffers of request heads still arriving take
// (see MaxArrivingHeaderBytes) and how many heads were answered 503 for want of it.
func (s *Server) ArrivingHeads() (bytes int64, refused uint64) {
	if ls := s.loops.Load(); ls != nil {
		return ls.arrivingHeads()
	}
	return 0, 0
}

// Start serves until ctx ends, then drains. It returns nil after a drain, even one cut short.
func (s *Server) Start(ctx context.Context) error {
	if s.Drained != nil {
		defer close(s.Drained)
	}
	var handler http.Handler = s.Engine
	if s.Handler != nil {
		handler = s.Handler
	} else if s.Engine == nil {
		return fmt.Errorf("%s: neither Handler nor Engine is set", s.Name)
	}
	ln, err := s.Listen(s.Name, s.Listener, s.Addr)
	if err != nil {
		return err
	}
	// Requests derive from hard, which is cancelled when the drain deadline passes: held requests
	// and WebSockets then end instead of keeping the process alive.
	hard, cut := context.WithCancel(context.Background())
	defer cut()
	srv := NewHTTPServer(closeAfterBothLengths{handler}, s.ReadHeaderTimeout, hard)
	srv.ConnContext = watchedContext
	srv.MaxHeaderBytes = s.MaxHeaderBytes
	if s.H2C {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = &p
	}
	serveErr := make(chan error, 2)
	run := Serving{
		Errs:       serveErr,
		Goroutines: 1,
		Shutdown:   srv.Shutdown,
		Close: func() {
			cut()
			_ = srv.Close()
		},
	}
	var loops *evLoops
	handoff := newHandoffListener(ln.Addr())
	if s.FastHTTP1 && s.Engine != nil && s.EventLoops != 0 {
		n := s.EventLoops
		if n < 0 {
			n = runtime.GOMAXPROCS(0)
		}
		watch := s.WatchClientAfter
		if watch == 0 {
			watch = 50 * time.Millisecond
		}
		parsers := s.HeadParsers
		if parsers <= 0 {
			parsers = defaultHeadParsers()
		}
		loops, err = newEvLoops(loopConfig{e: s.Engine, n: n, base: hard, handoff: handoff, heads: newHeadGate(parsers),
			idleTimeout: srv.IdleTimeout, headerTimeout: srv.ReadHeaderTimeout, watchAfter: watch, log: s.Log,
			maxHead: cmp.Or(s.MaxHeaderBytes, http.DefaultMaxHeaderBytes), maxArriving: s.MaxArrivingHeaderBytes})
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("%s: starting event loops: %w", s.Name, err)
		}
	}
	if loops == nil { // not Linux, or turned off
		go func() { serveErr <- srv.Serve(watchedListener{ln}) }()
	} else {
		s.loops.Store(loops)
		go func() { serveErr <- srv.Serve(handoff) }()
		go func() { serveErr <- acceptLoop(ln, loops, s.Log) }()
		run.Goroutines = 2
		run.Shutdown = func(ctx context.Context) error {
			_ = ln.Close() // the loops own the listener; net/http only sees handed-over connections
			err := loops.shutdown(ctx)
			if serr := srv.Shutdown(ctx); err == nil {
				err = serr
			}
			return err
		}
		run.Close = func() {
			cut()
			_ = srv.Close()
			loops.close()
		}
		run.Abort = func() {
			loops.close()
			_ = ln.Close()
			_ = srv.Close()
		}
	}
	return s.Run(ctx, Drain{Name: s.Name, Log: s.Log, Delay: s.DrainDelay, Timeout: s.DrainTimeout,
		WaitIdle: s.WaitIdle, After: s.After, OnShutdown: s.OnShutdown}, run)
}

var errLoopsClosed = errors.New("event loops closed")

// acceptLoop accepts connections from ln for the event loops until it is closed.
func acceptLoop(ln net.Listener, loops *evLoops, log logr.Logger) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if loops.shuttingDown() || errors.Is(err, net.ErrClosed) {
				return errLoopsClosed
			}
			// Out of file descriptors and the like: back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			log.Error(err, "accepting connection; retrying", "delay", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		loops.adopt(c)
	}
}

// handoffListener is the net.Listener net/http accepts the connections the event loops leave to it
// from.
type handoffListener struct {
	addr   net.Addr
	ch     chan net.Conn
	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// give passes c to Accept; it returns false (and c stays with the caller) once the listener closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }

// tracker counts active items and lets a caller wait for zero.
type tracker struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed while n == 0; nil means closed
}

func (t *tracker) add(d int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == 0 && d > 0 {
		t.zero = make(chan struct{})
	}
	t.n += d
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
}

func (t *tracker) wait(ctx context.Context) error {
	t.mu.Lock()
	ch := t.zero
	t.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for upgraded connections: %w", ctx.Err())
	}
}
