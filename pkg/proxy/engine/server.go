package engine

import (
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

// Server is a controller-runtime Runnable serving one HTTP handler, with a graceful drain when its
// context ends: Ready turns to an error at once, the server keeps serving for DrainDelay (so load
// balancers notice the failing readiness probe and stop sending), then stops accepting and waits up
// to DrainTimeout for in-flight and held requests and, when WaitIdle is set, for upgraded connections
// (WebSockets). Whatever is still running then is cut off.
type Server struct {
	// Name appears in logs.
	Name string
	// Addr is the listen address; ignored when Listener is set.
	Addr     string
	Listener net.Listener
	// Handler serves the requests; nil means Engine.
	Handler http.Handler
	// Engine, when set, serves the fast path's screened requests on its raw path (and on event
	// loops, see EventLoops) without going through Handler.
	Engine *Engine
	// H2C also accepts cleartext HTTP/2 with prior knowledge (gRPC clients without TLS).
	H2C bool
	// FastHTTP1 serves simple HTTP/1.1 requests (no body, no upgrade) on a fast path that reads
	// them from the connection directly and hands every other connection to net/http (see
	// h1Server).
	FastHTTP1 bool
	// EventLoops, with FastHTTP1 and an Engine on Linux, is how many event loops serve the
	// raw path's requests (see evLoops): 0 none, negative one per GOMAXPROCS.
	EventLoops int
	// WatchClientAfter is how long a fast-path request runs before the server starts watching for
	// the client going away (default 50ms; negative watches from the start).
	WatchClientAfter time.Duration
	// ReadHeaderTimeout bounds the time from a request's first byte to the end of its header block
	// (default 30s), once for the whole connection's path: a connection the fast path hands to
	// net/http keeps the deadline the fast path started.
	ReadHeaderTimeout time.Duration

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

	draining atomic.Bool
	addr     atomic.Pointer[string]
	fast     atomic.Pointer[h1Server]
}

// FastConnections reports how many client connections the fast path serves on event loops and on
// their own goroutines (not counting those handed to net/http), for diagnostics.
func (s *Server) FastConnections() (loops, goroutines int) {
	f := s.fast.Load()
	if f == nil {
		return 0, 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loopConns, len(f.conns)
}

// NeedLeaderElection is false: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Ready returns an error once the drain began; wire it to the readiness probe.
func (s *Server) Ready() error {
	if s.draining.Load() {
		return errors.New("draining")
	}
	return nil
}

// Draining reports whether the drain began.
func (s *Server) Draining() bool { return s.draining.Load() }

// ListenAddr returns the bound address once Start listens, else "".
func (s *Server) ListenAddr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
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
	ln := s.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.Addr); err != nil {
			return fmt.Errorf("%s: listening on %s: %w", s.Name, s.Addr, err)
		}
	}
	a := ln.Addr().String()
	s.addr.Store(&a)
	// Requests derive from hard, which is cancelled when the drain deadline passes: held requests
	// and WebSockets then end instead of keeping the process alive.
	hard, cut := context.WithCancel(context.Background())
	defer cut()
	headerTimeout := s.ReadHeaderTimeout
	if headerTimeout <= 0 {
		headerTimeout = 30 * time.Second
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return hard },
	}
	// Every connection net/http serves is watched for requests with both lengths (see headwatch.go).
	srv.Handler = closeAfterBothLengths{handler}
	srv.ConnContext = watchedContext
	if s.H2C {
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		srv.Protocols = &p
	}
	serveErr := make(chan error, 2)
	var fast *h1Server
	if s.FastHTTP1 {
		watch := s.WatchClientAfter
		if watch == 0 {
			watch = 50 * time.Millisecond
		}
		fast = &h1Server{handler: handler, engine: s.Engine, base: hard, srv: srv, handoff: newHandoffListener(ln.Addr()),
			idleTimeout: srv.IdleTimeout, headerTimeout: srv.ReadHeaderTimeout, watchAfter: watch, log: s.Log}
		if s.Engine != nil && s.EventLoops != 0 {
			n := s.EventLoops
			if n < 0 {
				n = runtime.GOMAXPROCS(0)
			}
			loops, err := newEvLoops(fast, s.Engine, n)
			if err != nil {
				_ = ln.Close()
				return fmt.Errorf("%s: starting event loops: %w", s.Name, err)
			}
			fast.loops = loops // nil where there are none (not Linux)
		}
		s.fast.Store(fast)
		go func() { serveErr <- srv.Serve(fast.handoff) }()
		go func() { serveErr <- fast.serve(ln) }()
	} else {
		go func() { serveErr <- srv.Serve(watchedListener{ln}) }()
	}
	serving := cap(serveErr)
	if fast == nil {
		serving = 1
	}
	s.Log.Info("serving", "server", s.Name, "addr", a)

	select {
	case err := <-serveErr:
		if fast != nil {
			fast.close()
			_ = ln.Close()
			_ = srv.Close()
		}
		return fmt.Errorf("%s: serving on %s: %w", s.Name, a, err)
	case <-ctx.Done():
	}
	if s.After != nil {
		<-s.After
	}
	s.draining.Store(true)
	s.Log.Info("draining", "server", s.Name, "delay", s.DrainDelay, "timeout", s.DrainTimeout)
	if s.DrainDelay > 0 {
		t := time.NewTimer(s.DrainDelay)
		select {
		case <-t.C:
		case err := <-serveErr:
			t.Stop()
			if fast != nil {
				fast.close()
				_ = ln.Close()
				_ = srv.Close()
			}
			return fmt.Errorf("%s: serving on %s: %w", s.Name, a, err)
		}
	}
	if s.OnShutdown != nil {
		s.OnShutdown()
	}
	dctx, cancel := context.WithTimeout(context.Background(), s.DrainTimeout)
	defer cancel()
	var err error
	if fast != nil {
		_ = ln.Close() // the fast path owns the listener; net/http only sees handed-over connections
		err = fast.shutdown(dctx)
	}
	if serr := srv.Shutdown(dctx); err == nil {
		err = serr
	}
	if err == nil && s.WaitIdle != nil {
		err = s.WaitIdle(dctx)
	}
	if err != nil {
		s.Log.Info("drain timeout passed; cutting off remaining requests", "server", s.Name, "error", err.Error())
		cut()
		_ = srv.Close()
		if fast != nil {
			fast.close()
		}
	}
	for range serving {
		<-serveErr // http.ErrServerClosed, errFastClosed
	}
	s.Log.Info("stopped", "server", s.Name)
	return nil
}

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
