package h1

import (
	"bytes"
	"testing"
)

// BenchmarkRequestWrite is the event loops' per-request work on a request head: Parse, then Write
// for an untrusted client (the default) and for a trusted proxy. A browser-like head, and one
// carrying a proxy's forwarding headers.
func BenchmarkRequestWrite(b *testing.B) {
	heads := map[string]string{
		"browser": "GET /products/42?ref=home HTTP/1.1\r\nHost: shop.example.com\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n" +
			"Accept: text/html,application/xhtml+xml\r\nAccept-Language: en-US,en;q=0.5\r\nAccept-Encoding: gzip, deflate, br\r\n" +
			"Cookie: session=abc123; theme=dark\r\nConnection: keep-alive\r\n\r\n",
		"forwarded": "GET /products/42 HTTP/1.1\r\nHost: shop.example.com\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n" +
			"X-Forwarded-For: 203.0.113.9, 198.51.100.1\r\nX-Forwarded-Host: shop.example.com\r\nX-Forwarded-Proto: https\r\n" +
			"X-Real-IP: 203.0.113.9\r\n\r\n",
	}
	peers := map[string]Peer{"untrusted": {IP: "10.1.2.3"}, "trusted": {IP: "10.1.2.3", Trusted: true}}
	for hn, head := range heads {
		for pn, p := range peers {
			b.Run(hn+"/"+pn, func(b *testing.B) {
				rq := new(Request)
				var out bytes.Buffer
				b.ReportAllocs()
				for b.Loop() {
					if !rq.Parse(head) {
						b.Fatal("Parse refused the head")
					}
					out.Reset()
					rq.Write(&out, p)
				}
			})
		}
	}
}
