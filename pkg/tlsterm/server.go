package tlsterm

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// Server is a controller-runtime Runnable serving Handler over TLS with the Store's certificates:
// HTTP/2 to clients that offer h2 in ALPN, HTTP/1.1 otherwise. Requests reach Handler as net/http
// requests (the HTTP/1.1 fast path and event loops of the cleartext port do not apply: they read
// the socket directly), with X-Forwarded-Proto set to https unless the client sent one.
//
// On shutdown it drains like the cleartext proxy server: Ready fails at once, it keeps serving for
// DrainDelay, then stops accepting and waits up to DrainTimeout for in-flight and held requests
// and, with WaitIdle, upgraded connections; what still runs then is cut off.
type Server struct {
	// Addr is the listen address; ignored when Listener is set.
	Addr     string
	Listener net.Listener
	Store    *Store
	Handler  http.Handler
	// Config, when set, replaces Store.Config() (benchmarks turn session resumption off with it);
	// its GetCertificate should be the Store's.
	Config *tls.Config

	DrainDelay   time.Duration
	DrainTimeout time.Duration
	WaitIdle     func(ctx context.Context) error
	// Drained is closed when the server has stopped; may be nil.
	Drained chan struct{}
	Log     logr.Logger

	draining atomic.Bool
	addr     atomic.Pointer[string]
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (s *Server) NeedLeaderElection() bool { return false }

// Ready fails once the server drains.
func (s *Server) Ready() error {
	if s.draining.Load() {
		return errors.New("tls: draining")
	}
	return nil
}

// ListenAddr returns the address listened on once serving, "" before.
func (s *Server) ListenAddr() string {
	if a := s.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// Start serves until ctx ends, then drains.
func (s *Server) Start(ctx context.Context) error {
	if s.Drained != nil {
		defer close(s.Drained)
	}
	ln := s.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.Addr); err != nil {
			return fmt.Errorf("tls: listening on %s: %w", s.Addr, err)
		}
	}
	a := ln.Addr().String()
	s.addr.Store(&a)
	hard, cut := context.WithCancel(context.Background())
	defer cut()
	srv := &http.Server{
		Handler:           httpsProto{s.Handler},
		TLSConfig:         s.config(),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return hard },
		// A failed handshake (a client asking for a name no certificate serves) is the client's
		// business: debug level, not a log line per connection.
		ErrorLog: log.New(debugWriter{s.Log.V(1)}, "", 0),
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ServeTLS(ln, "", "") }()
	s.Log.Info("serving", "server", "tls", "addr", a)
	select {
	case err := <-serveErr:
		return fmt.Errorf("tls: serving on %s: %w", a, err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.Log.Info("draining", "server", "tls", "delay", s.DrainDelay, "timeout", s.DrainTimeout)
	if s.DrainDelay > 0 {
		t := time.NewTimer(s.DrainDelay)
		select {
		case <-t.C:
		case err := <-serveErr:
			t.Stop()
			return fmt.Errorf("tls: serving on %s: %w", a, err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.DrainTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err == nil && s.WaitIdle != nil {
		err = s.WaitIdle(sctx)
	}
	if err != nil {
		s.Log.Info("drain cut short", "server", "tls", "error", err.Error())
		cut()
		_ = srv.Close()
	}
	return nil
}

func (s *Server) config() *tls.Config {
	if s.Config != nil {
		return s.Config
	}
	return s.Store.Config()
}

// httpsProto marks requests as having arrived over TLS for the app (X-Forwarded-Proto: https)
// unless the client, such as a load balancer in front, already said.
type httpsProto struct{ h http.Handler }

func (p httpsProto) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, ok := r.Header["X-Forwarded-Proto"]; !ok {
		r.Header["X-Forwarded-Proto"] = []string{"https"}
	}
	p.h.ServeHTTP(w, r)
}

// debugWriter turns net/http's error log lines into debug-level log entries.
type debugWriter struct{ log logr.Logger }

func (d debugWriter) Write(p []byte) (int, error) {
	d.log.Info("tls server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}
