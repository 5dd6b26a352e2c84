// Command backend is the benchmark's upstream: a tiny HTTP/1.1 server answering "ok" on every path,
// and 16 KiB (Content-Length framed) on /16k.
package main

import (
	"bytes"
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18090", "listen address")
	flag.Parse()
	body := []byte("ok")
	big := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if r.URL.Path == "/16k" {
			// Content-Length framed, as the tiny answer (net/http would chunk 16 KiB otherwise).
			w.Header().Set("Content-Length", "16384")
			_, _ = w.Write(big)
			return
		}
		_, _ = w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}
