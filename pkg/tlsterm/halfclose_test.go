package tlsterm_test

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

// A client that half-closes its TLS connection after a complete request (close_notify, or a bare TCP
// FIN) gets, through the real proxy, the app's own answer or a closed connection: never an answer
// nobody gave (a 200 or an error page invented by the interceptor). Warm and cold (held, then woken)
// alike.
func TestHalfClosedClientAfterCompleteRequest(t *testing.T) {
	const realBody = "the app's real answer"
	var seen atomic.Int64
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		b, _ := io.ReadAll(r.Body)
		time.Sleep(200 * time.Millisecond)
		fmt.Fprintf(w, "%s: %s %s %q", realBody, r.Method, r.URL.Path, b)
	}))
	defer backend.Close()
	host, port, _ := net.SplitHostPort(backend.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	key := endpoints.ServiceKey{Namespace: "a", Service: "shop"}

	store, c := oneApp(t)
	tb := table(t, entry("a", "shop", "shop-tls", "shop.example.com"))
	src := proxytest.NewSource()
	px, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return tb }), Endpoints: src,
		Registry: queue.NewRegistry(nil), ReadinessTimeout: 10 * time.Second, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveHandler(t, store, px.Engine(), 0)

	for _, tc := range []struct {
		name   string
		cold   bool
		post   bool
		closeW func(c *tls.Conn) error
	}{
		{name: "warm GET, close_notify", closeW: (*tls.Conn).CloseWrite},
		{name: "warm GET, TCP FIN", closeW: func(c *tls.Conn) error { return c.NetConn().(*net.TCPConn).CloseWrite() }},
		{name: "warm POST with a body, close_notify", post: true, closeW: (*tls.Conn).CloseWrite},
		{name: "warm POST with a body, TCP FIN", post: true, closeW: func(c *tls.Conn) error { return c.NetConn().(*net.TCPConn).CloseWrite() }},
		{name: "held GET, close_notify", cold: true, closeW: (*tls.Conn).CloseWrite},
		{name: "held GET, TCP FIN", cold: true, closeW: func(c *tls.Conn) error { return c.NetConn().(*net.TCPConn).CloseWrite() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cold {
				src.Set(key)
			} else {
				src.Set(key, endpoints.Endpoint{IP: host, Port: int32(p)})
			}
			conn, err := tls.DialWithDialer(&netDialer, "tcp", addr, &tls.Config{ServerName: "shop.example.com", RootCAs: c.Pool, NextProtos: []string{"http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			req := "GET /half HTTP/1.1\r\nHost: shop.example.com\r\n\r\n"
			if tc.post {
				req = "POST /half HTTP/1.1\r\nHost: shop.example.com\r\nContent-Length: 5\r\n\r\nhello"
			}
			if _, err := io.WriteString(conn, req); err != nil {
				t.Fatal(err)
			}
			if err := tc.closeW(conn); err != nil {
				t.Fatal(err)
			}
			if tc.cold {
				time.Sleep(300 * time.Millisecond) // held meanwhile
				src.Set(key, endpoints.Endpoint{IP: host, Port: int32(p)})
			}
			_ = conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			got, err := io.ReadAll(conn)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("the connection was neither answered nor closed within 15s (read %q)", got)
			}
			if len(got) == 0 {
				t.Logf("closed without an answer (%v)", err)
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(got)), nil)
			if err != nil {
				t.Fatalf("a partial or garbled answer %q: %v", got, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(body, []byte(realBody)) {
				t.Fatalf("answered %d %q: not the app's answer", resp.StatusCode, body)
			}
			t.Logf("the app's answer: %d %q", resp.StatusCode, body)
		})
	}
	t.Logf("the app saw %d requests", seen.Load())
}
