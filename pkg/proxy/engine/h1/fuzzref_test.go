package h1

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"time"
)

// The fuzz targets (fuzz_test.go) compare the byte-level HTTP/1.1 code with net/http. The
// reference for what a server accepts is not http.ReadRequest alone but the real net/http server
// (it also checks Host and header fields): refServe feeds it one connection's bytes in memory.

// refConn is an in-memory connection: reads return the input, then EOF; writes are collected.
type refConn struct {
	in     *bytes.Reader
	mu     sync.Mutex
	out    bytes.Buffer
	handle func(w http.ResponseWriter, r *http.Request)
	closed chan struct{}
	once   sync.Once
}

func (c *refConn) Read(p []byte) (int, error) { return c.in.Read(p) }

func (c *refConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

func (c *refConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

func (c *refConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }
func (c *refConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234} }
func (c *refConn) SetDeadline(time.Time) error      { return nil }
func (c *refConn) SetReadDeadline(time.Time) error  { return nil }
func (c *refConn) SetWriteDeadline(time.Time) error { return nil }

// refListener hands refServe's connections to the shared server.
type refListener struct{ ch chan net.Conn }

func (l refListener) Accept() (net.Conn, error) { return <-l.ch, nil }
func (l refListener) Close() error              { return nil }
func (l refListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }

type refConnKey struct{}

var (
	refOnce sync.Once
	refLn   = refListener{ch: make(chan net.Conn)}
)

// refServe serves input as one client connection of a net/http server whose handler is handle, and
// returns what the server wrote back once it closed the connection.
func refServe(input []byte, handle func(w http.ResponseWriter, r *http.Request)) []byte {
	refOnce.Do(func() {
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Context().Value(refConnKey{}).(*refConn).handle(w, r)
			}),
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				return context.WithValue(ctx, refConnKey{}, c)
			},
			ErrorLog: log.New(io.Discard, "", 0),
		}
		go func() { _ = srv.Serve(refLn) }()
	})
	c := &refConn{in: bytes.NewReader(input), handle: handle, closed: make(chan struct{})}
	refLn.ch <- c
	<-c.closed
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

// seenRequest is what a handler sees of a request.
type seenRequest struct {
	Method, RequestURI, Path, Proto, Host string
	Header                                http.Header
	ContentLength                         int64
	TransferEncoding                      []string
	Close                                 bool
}

func seen(r *http.Request) *seenRequest {
	return &seenRequest{
		Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path, Proto: r.Proto, Host: r.Host,
		Header: r.Header.Clone(), ContentLength: r.ContentLength,
		TransferEncoding: r.TransferEncoding, Close: r.Close,
	}
}

// refRequest returns the first request the net/http server hands its handler for head, or nil
// when it rejects the head.
func refRequest(head []byte) *seenRequest {
	var got *seenRequest
	refServe(head, func(w http.ResponseWriter, r *http.Request) {
		if got == nil {
			got = seen(r)
		}
	})
	return got
}
