package engine

import (
	"context"
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
// (WebSockets). Whatever is still running then is cut off. The listener, readiness and drain are
// Lifecycle's, which it embeds.
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
	// MaxHeaderBytes bounds a request's header block as net/http's does (0: its default, 1 MiB);
	// the fast path hands heads over 4 KiB to net/http.
	MaxHeaderBytes int

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
	fast atomic.Pointer[h1Server]
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
	// Every connection net/http serves is watched for requests with both lengths (see headwatch.go).
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
	if s.FastHTTP1 {
		watch := s.WatchClientAfter
		if watch == 0 {
			watch = 50 * time.Millisecond
		}
		fast := &h1Server{handler: handler, engine: s.Engine, base: hard, srv: srv, handoff: newHandoffListener(ln.Addr()),
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
		run.Goroutines = 2
		run.Shutdown = func(ctx context.Context) error {
			_ = ln.Close() // the fast path owns the listener; net/http only sees handed-over connections
			err := fast.shutdown(ctx)
			if serr := srv.Shutdown(ctx); err == nil {
				err = serr
			}
			return err
		}
		run.Close = func() {
			cut()
			_ = srv.Close()
			fast.close()
		}
		run.Abort = func() {
			fast.close()
			_ = ln.Close()
			_ = srv.Close()
		}
	} else {
		go func() { serveErr <- srv.Serve(watchedListener{ln}) }()
	}
	return s.Run(ctx, Drain{Name: s.Name, Log: s.Log, Delay: s.DrainDelay, Timeout: s.DrainTimeout,
		WaitIdle: s.WaitIdle, After: s.After, OnShutdown: s.OnShutdown}, run)
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
