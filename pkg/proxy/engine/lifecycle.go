package engine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// ErrDraining is what Lifecycle.Ready returns once the drain began.
var ErrDraining = errors.New("draining")

// ErrNotListening is what Lifecycle.Ready returns until Listen has bound the port.
var ErrNotListening = errors.New("not listening yet")

// Lifecycle is the part of a server's life that does not depend on what it serves: the listener,
// readiness, and the graceful drain once its context ends. Servers embed it (Server here, the TLS
// terminating server in pkg/tlsterm), call Listen and then Run from their Start, and get
// NeedLeaderElection, Ready, Draining and ListenAddr from it. The zero value is ready to use; its
// methods are safe for concurrent use.
type Lifecycle struct {
	draining atomic.Bool
	addr     atomic.Pointer[string]
}

// Drain says how a server drains: Ready turns to ErrDraining once the context ended (and After,
// when set, was closed), the server keeps serving for Delay, then OnShutdown runs, it stops
// accepting and waits up to Timeout for in-flight requests and then WaitIdle.
type Drain struct {
	// Name appears in logs and errors.
	Name string
	Log  logr.Logger

	Delay   time.Duration
	Timeout time.Duration
	// WaitIdle, when set, is waited for after Serving.Shutdown (http.Server.Shutdown ignores
	// hijacked connections such as WebSockets).
	WaitIdle func(ctx context.Context) error
	// After, when set, delays the start of the drain until it is closed.
	After <-chan struct{}
	// OnShutdown, when set, runs when the server stops accepting (after Delay).
	OnShutdown func()
}

// Serving is a started server as Run sees it: its serve goroutines and how to stop them.
type Serving struct {
	// Errs receives what each of the Goroutines serve goroutines returned.
	Errs       <-chan error
	Goroutines int
	// Shutdown stops accepting and waits for in-flight requests until ctx ends.
	Shutdown func(ctx context.Context) error
	// Close cuts off whatever still runs once the drain timed out.
	Close func()
	// Abort, when set, releases what the other goroutines hold after one of them failed.
	Abort func()
}

// NeedLeaderElection is false: every replica serves.
func (l *Lifecycle) NeedLeaderElection() bool { return false }

// Ready returns ErrNotListening until Listen bound the port and ErrDraining once the drain began;
// wire it to the readiness probe. A server started late (the proxy ports wait for the first
// routing table) is thus not reported ready while its port still refuses connections.
func (l *Lifecycle) Ready() error {
	if l.draining.Load() {
		return ErrDraining
	}
	if l.addr.Load() == nil {
		return ErrNotListening
	}
	return nil
}

// Draining reports whether the drain began.
func (l *Lifecycle) Draining() bool { return l.draining.Load() }

// ListenAddr returns the bound address once Listen returned, else "".
func (l *Lifecycle) ListenAddr() string {
	if a := l.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Listen returns ln, or when it is nil a new TCP listener on addr, and records its address for
// ListenAddr. name appears in the error.
func (l *Lifecycle) Listen(name string, ln net.Listener, addr string) (net.Listener, error) {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("%s: listening on %s: %w", name, addr, err)
		}
	}
	a := ln.Addr().String()
	l.addr.Store(&a)
	return ln, nil
}

// Run waits until ctx ends or a serve goroutine fails, then drains as d says. It returns the
// failure, wrapped with the server's name and address, or nil after a drain, even one cut short;
// after a drain it also waits for every serve goroutine to return.
func (l *Lifecycle) Run(ctx context.Context, d Drain, s Serving) error {
	addr := l.ListenAddr()
	failed := func(err error) error {
		if s.Abort != nil {
			s.Abort()
		}
		return fmt.Errorf("%s: serving on %s: %w", d.Name, addr, err)
	}
	d.Log.Info("serving", "server", d.Name, "addr", addr)
	select {
	case err := <-s.Errs:
		return failed(err)
	case <-ctx.Done():
	}
	if d.After != nil {
		<-d.After
	}
	l.draining.Store(true)
	d.Log.Info("draining", "server", d.Name, "delay", d.Delay, "timeout", d.Timeout)
	if d.Delay > 0 {
		t := time.NewTimer(d.Delay)
		select {
		case <-t.C:
		case err := <-s.Errs:
			t.Stop()
			return failed(err)
		}
	}
	if d.OnShutdown != nil {
		d.OnShutdown()
	}
	dctx, cancel := context.WithTimeout(context.Background(), d.Timeout)
	defer cancel()
	err := s.Shutdown(dctx)
	if err == nil && d.WaitIdle != nil {
		err = d.WaitIdle(dctx)
	}
	if err != nil {
		d.Log.Info("drain timeout passed; cutting off remaining requests", "server", d.Name, "error", err.Error())
		s.Close()
	}
	for range s.Goroutines {
		<-s.Errs // http.ErrServerClosed and the like
	}
	d.Log.Info("stopped", "server", d.Name)
	return nil
}

// NewHTTPServer returns the net/http server settings every port shares: requests derive from
// base (cancel it to end held requests and WebSockets when a drain is cut short), headers are
// bounded by readHeaderTimeout (default 30s), idle keep-alive connections close after 2 minutes.
func NewHTTPServer(h http.Handler, readHeaderTimeout time.Duration, base context.Context) *http.Server {
	if readHeaderTimeout <= 0 {
		readHeaderTimeout = 30 * time.Second
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
}
