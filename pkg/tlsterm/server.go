package tlsterm

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
)

// Server is a controller-runtime Runnable serving Handler over TLS with the Store's certificates:
// HTTP/2 to clients that offer h2 in ALPN, HTTP/1.1 otherwise. Requests reach Handler as net/http
// requests (the cleartext port's event loops read the socket directly and do not apply) with
// their TLS state, from which the engine's forwarding rules set X-Forwarded-Proto: https for
// every client that is not a trusted proxy; HTTP/1.1 connections are watched as on
// the cleartext port (engine.ServeTLS): a request with both Content-Length and Transfer-Encoding is
// answered with the connection closed.
//
// A request whose host was not what the connection's certificate was chosen for (SNI of one app,
// Host of another with a different certificate, see Store.Serves) is answered 421 Misdirected
// Request without reaching Handler: the client retries it on a connection of its own. A client
// that sends plain HTTP to the port gets net/http's 400 "Client sent an HTTP request to an HTTPS
// server" and a close; one that does not finish its handshake within ReadHeaderTimeout is
// disconnected.
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
	// ReadHeaderTimeout bounds the TLS handshake, from the connection's accept, and then each
	// HTTP/1.1 request's header block from its first byte (default 30s, as the cleartext port).
	ReadHeaderTimeout time.Duration
	// MaxHeaderBytes bounds a request's header block (0: net/http's default, 1 MiB).
	MaxHeaderBytes int

	DrainDelay   time.Duration
	DrainTimeout time.Duration
	WaitIdle     func(ctx context.Context) error
	// Drained is closed when the server has stopped; may be nil.
	Drained chan struct{}
	Log     logr.Logger

	// Lifecycle gives the listener, ListenAddr, NeedLeaderElection and the drain, the same as the
	// cleartext server's.
	engine.Lifecycle
}

// Ready fails once the server drains.
func (s *Server) Ready() error {
	if err := s.Lifecycle.Ready(); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	return nil
}

// Start serves until ctx ends, then drains.
func (s *Server) Start(ctx context.Context) error {
	if s.Drained != nil {
		defer close(s.Drained)
	}
	ln, err := s.Listen("tls", s.Listener, s.Addr)
	if err != nil {
		return err
	}
	hard, cut := context.WithCancel(context.Background())
	defer cut()
	// net/http bounds the handshake by the smallest of its read timeouts: ReadHeaderTimeout.
	srv := engine.NewHTTPServer(httpsHandler{store: s.Store, h: s.Handler}, s.ReadHeaderTimeout, hard)
	srv.TLSConfig = s.config()
	srv.MaxHeaderBytes = s.MaxHeaderBytes
	// A failed handshake (a client asking for a name no certificate serves) is the client's
	// business: debug level, not a log line per connection.
	srv.ErrorLog = log.New(debugWriter{s.Log.V(1)}, "", 0)
	serveErr := make(chan error, 1)
	// The engine's ServeTLS: net/http with the cleartext port's rules (see engine.ServeTLS).
	go func() { serveErr <- engine.ServeTLS(srv, ln) }()
	return s.Run(ctx, engine.Drain{Name: "tls", Log: s.Log, Delay: s.DrainDelay, Timeout: s.DrainTimeout, WaitIdle: s.WaitIdle},
		engine.Serving{Errs: serveErr, Goroutines: 1, Shutdown: srv.Shutdown, Close: func() {
			cut()
			_ = srv.Close()
		}})
}

func (s *Server) config() *tls.Config {
	if s.Config != nil {
		return s.Config
	}
	return s.Store.Config()
}

// httpsHandler answers misdirected requests 421 and passes the others on.
type httpsHandler struct {
	store *Store
	h     http.Handler
}

func (p httpsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.TLS != nil && !p.store.Serves(r.TLS.ServerName, r.Host) {
		misdirected(w, r.TLS.ServerName, r.Host)
		return
	}
	p.h.ServeHTTP(w, r)
}

// misdirected answers 421 Misdirected Request (RFC 9110 15.5.20): the certificate this connection
// presented was chosen for serverName, not for host, so the client must ask again on a connection
// of its own whose handshake names host. Browsers do so by themselves.
func misdirected(w http.ResponseWriter, serverName, host string) {
	body := fmt.Sprintf("Misdirected Request: this connection was opened for %q (TLS server name), which does not serve %q; connect with server name %q\n", serverName, host, host)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusMisdirectedRequest)
	_, _ = io.WriteString(w, body)
}

// debugWriter turns net/http's error log lines into debug-level log entries.
type debugWriter struct{ log logr.Logger }

func (d debugWriter) Write(p []byte) (int, error) {
	d.log.Info("tls server", "message", strings.TrimSpace(string(p)))
	return len(p), nil
}
