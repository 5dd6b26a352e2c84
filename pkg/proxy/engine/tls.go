package engine

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// ServeTLS serves srv on ln over TLS with srv.TLSConfig, like http.Server.ServeTLS, but with the
// cleartext port's rules: every HTTP/1.1 connection is watched for requests with both
// Content-Length and Transfer-Encoding (see headwatch.go), which are answered with the connection
// closed. For that the handshake runs here, before net/http gets the connection (net/http does not
// let a handler see the bytes it reads): an HTTP/1.1 connection then reaches net/http wrapped, and
// its requests still carry the connection's TLS state (Request.TLS); an h2 connection reaches it
// as it is (HTTP/2 frames its messages itself). The handshake is bounded by srv.ReadHeaderTimeout
// from the accept, as net/http bounds it; a client that sends plain HTTP gets net/http's 400
// "Client sent an HTTP request to an HTTPS server"; a failed handshake is logged to srv.ErrorLog.
// ServeTLS sets srv's Handler wrapper and ConnContext; it returns what srv.Serve returns.
func ServeTLS(srv *http.Server, ln net.Listener) error {
	srv.Handler = closeAfterBothLengths{srv.Handler}
	srv.ConnContext = watchedContext
	tl := &tlsListener{Listener: ln, srv: srv, conns: make(chan net.Conn), errs: make(chan error), done: make(chan struct{})}
	go tl.run()
	return srv.Serve(tl)
}

// tlsListener accepts connections, completes each one's handshake on a goroutine of its own, and
// hands the connections whose handshake succeeded to net/http.
type tlsListener struct {
	net.Listener
	srv   *http.Server
	conns chan net.Conn
	errs  chan error
	once  sync.Once
	done  chan struct{}
}

func (l *tlsListener) run() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err: // net/http backs off on temporary errors and asks again
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go l.handshake(c)
	}
}

func (l *tlsListener) handshake(c net.Conn) {
	if d := l.srv.ReadHeaderTimeout; d > 0 {
		_ = c.SetDeadline(time.Now().Add(d))
	}
	tc := tls.Server(c, l.srv.TLSConfig)
	if err := tc.Handshake(); err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader) {
			_, _ = io.WriteString(re.Conn, "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n")
			_ = re.Conn.Close()
			return
		}
		if l.srv.ErrorLog != nil {
			l.srv.ErrorLog.Printf("http: TLS handshake error from %s: %v", c.RemoteAddr(), err)
		}
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	var conn net.Conn = tc
	if st := tc.ConnectionState(); st.NegotiatedProtocol != "h2" {
		wc := newWatchedConn(tc, tc, time.Time{})
		wc.tls = &st
		conn = wc
	}
	select {
	case l.conns <- conn:
	case <-l.done:
		_ = conn.Close()
	}
}

// looksLikeHTTP reports whether a TLS record header is the start of a plain HTTP request, as
// net/http decides it.
func looksLikeHTTP(hdr [5]byte) bool {
	switch string(hdr[:]) {
	case "GET /", "HEAD ", "POST ", "PUT /", "OPTIO":
		return true
	}
	return false
}

func (l *tlsListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *tlsListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}
