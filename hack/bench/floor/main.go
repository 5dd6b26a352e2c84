// Command floor is the least a Go reverse proxy built on net/http can do: no routing, counting,
// ReverseProxy or metrics, one pooled keep-alive connection per request, request and response copied
// as they are. It is a reference point for the interceptor's benchmark, not a proxy to use.
package main

import (
	"bufio"
	"flag"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
)

type conn struct {
	c  net.Conn
	br *bufio.Reader
	bw *bufio.Writer
}

func main() {
	listen := flag.String("listen", "127.0.0.1:18083", "listen address")
	backend := flag.String("backend", "127.0.0.1:18090", "backend host:port")
	flag.Parse()
	var mu sync.Mutex
	var idle []*conn
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		var pc *conn
		if n := len(idle); n > 0 {
			pc, idle = idle[n-1], idle[:n-1]
		}
		mu.Unlock()
		if pc == nil {
			c, err := net.Dial("tcp", *backend)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			pc = &conn{c: c, br: bufio.NewReader(c), bw: bufio.NewWriter(c)}
		}
		out := r.Clone(r.Context())
		out.URL.Scheme, out.URL.Host, out.RequestURI = "http", *backend, ""
		if err := out.Write(pc.bw); err != nil || pc.bw.Flush() != nil {
			_ = pc.c.Close()
			http.Error(w, "write failed", http.StatusBadGateway)
			return
		}
		resp, err := http.ReadResponse(pc.br, out)
		if err != nil {
			_ = pc.c.Close()
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, err = io.Copy(w, resp.Body)
		resp.Body.Close()
		if err != nil || resp.Close {
			_ = pc.c.Close()
			return
		}
		mu.Lock()
		idle = append(idle, pc)
		mu.Unlock()
	})
	log.Fatal(http.ListenAndServe(*listen, h))
}
