// Command backend is the benchmark's upstream: a tiny HTTP/1.1 server answering "ok" on every path,
// and a Content-Length framed body of N KiB on /<N>k (/16k, /256k, /1024k). A request body is read
// to its end before the answer (the upload scenarios).
package main

import (
	"bytes"
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:18090", "listen address")
	flag.Parse()
	body := []byte("ok")
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB, sliced for each size
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 {
			_, _ = io.Copy(io.Discard, r.Body)
		}
		w.Header().Set("Content-Type", "text/plain")
		if kib, ok := strings.CutSuffix(strings.TrimPrefix(r.URL.Path, "/"), "k"); ok {
			if n, err := strconv.Atoi(kib); err == nil && n > 0 && n<<10 <= len(big) {
				// Content-Length framed, as the tiny answer (net/http would chunk it otherwise).
				w.Header().Set("Content-Length", strconv.Itoa(n<<10))
				_, _ = w.Write(big[:n<<10])
				return
			}
		}
		_, _ = w.Write(body)
	})
	log.Fatal(http.ListenAndServe(*addr, h))
}
