// Command relay is the least a Go proxy can do on the benchmark's traffic: one goroutine per client
// connection with its own upstream connection, each read from one side written to the other as it
// is — no HTTP parsing, routing, counting or metrics. It only works for one small request and one
// small response at a time (wrk's GETs to hack/bench/backend), which is all it is for: the
// interceptor benchmark's reference for what the Go runtime and the kernel cost per request.
package main

import (
	"flag"
	"log"
	"net"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18084", "listen address")
	backend := flag.String("backend", "127.0.0.1:18090", "backend host:port")
	flag.Parse()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relay(c, *backend)
	}
}

func relay(c net.Conn, backend string) {
	defer c.Close()
	b, err := net.Dial("tcp", backend)
	if err != nil {
		log.Print(err)
		return
	}
	defer b.Close()
	buf := make([]byte, 16<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		if _, err := b.Write(buf[:n]); err != nil {
			return
		}
		if n, err = b.Read(buf); err != nil {
			return
		}
		if _, err := c.Write(buf[:n]); err != nil {
			return
		}
	}
}
