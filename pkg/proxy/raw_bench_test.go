package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/routing"
)

// BenchmarkProxy is one keep-alive GET through a real Server and Proxy to a loopback backend, on the
// raw path (fast=true) and with every request served by net/http and the ReverseProxy (fast=false).
// The client's and the backend's work are included; compare the two, and allocs/op.
func BenchmarkProxy(b *testing.B) {
	be, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	bs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	})}
	go func() { _ = bs.Serve(be) }()
	defer bs.Close()
	tb, err := routing.NewTable([]routing.Entry{entry("app", "app.example.com", "app")})
	if err != nil {
		b.Fatal(err)
	}
	src := proxytest.NewSource()
	src.Set(key("app"), endpointOf(&testing.T{}, "http://"+be.Addr().String(), ""))
	for _, fast := range []bool{true, false} {
		b.Run(fmt.Sprintf("fast=%v", fast), func(b *testing.B) {
			p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return tb }), Endpoints: src, Log: logr.Discard()})
			if err != nil {
				b.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			s := &proxy.Server{Name: "bench", Listener: ln, Handler: p, FastHTTP1: fast, DrainTimeout: 5 * time.Second, Log: logr.Discard()}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Start(ctx) }()
			defer func() { cancel(); <-done }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			req := []byte("GET /x HTTP/1.1\r\nHost: app.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.EqualFold(string(body), "ok") {
					b.Fatalf("got %d %q", resp.StatusCode, body)
				}
			}
		})
	}
}
