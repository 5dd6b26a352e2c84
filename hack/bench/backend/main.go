// Command backend is the benchmark's upstream: a tiny HTTP/1.1 server answering "ok" on every path.
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18090", "listen address")
	flag.Parse()
	body := []byte("ok")
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}
