package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy"
)

// Tests of what a hostile upstream cannot do through the proxy: bytes it sends after a complete
// response never become another request's response (response desync), on every path.

// evilReply is a whole response smuggled after a complete one: a desynced connection would give it
// to the next request.
var evilReply = okReply("EVIL")

const discardedMetric = "httpscale_interceptor_upstream_conns_discarded_total"

// oneUpstreamConn lets the proxy open a single connection to an endpoint, so that every request
// would reuse the connection the previous one left behind.
func oneUpstreamConn(o *proxy.Options) { o.MaxConnsPerEndpoint = 1 }

func TestUpstreamBytesAfterAResponseDoNotDesync(t *testing.T) {
	chunked := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
	headAnswer := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n"
	for _, tc := range []struct {
		name     string
		req      string
		reply    rawReply
		wantCode int
		wantBody string
	}{
		{"204 with a body", rawGet("/r"), rawReply{resp: "HTTP/1.1 204 No Content\r\n\r\n" + evilReply}, 204, ""},
		{"204, a body later", rawGet("/r"), rawReply{resp: "HTTP/1.1 204 No Content\r\n\r\n", late: evilReply}, 204, ""},
		{"304 with a body", rawGet("/r"), rawReply{resp: "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n" + evilReply}, 304, ""},
		{"304, a body later", rawGet("/r"), rawReply{resp: "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n", late: evilReply}, 304, ""},
		{"more than Content-Length, later", rawGet("/r"), rawReply{resp: okReply("ok"), late: evilReply}, 200, "ok"},
		{"data after the last chunk", rawGet("/r"), rawReply{resp: chunked + evilReply}, 200, "ok"},
		{"data after the last chunk, later", rawGet("/r"), rawReply{resp: chunked, late: evilReply}, 200, "ok"},
		{"HEAD answer, its body later", rawReq("HEAD", "/r"), rawReply{resp: headAnswer, late: "EVIL" + evilReply}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onBothPathsWith(t, oneUpstreamConn, func(t *testing.T, h *harness, fast bool) {
				be := newRawBackend(t, func(i int, r *http.Request) rawReply {
					if i == 0 {
						return tc.reply
					}
					return rawReply{resp: okReply("for " + r.URL.Path)}
				})
				h.src.Set(key("app"), be.ep)
				if a := dialRaw(t, h).do(tc.req); a.Err != "" || a.Code != tc.wantCode || a.Body != tc.wantBody {
					t.Fatalf("first client: %+v, want %d %q", a, tc.wantCode, tc.wantBody)
				}
				time.Sleep(3 * lateAfter) // the late bytes are in the proxy's socket
				// Another client, then the same one again: each gets its own answer.
				c := dialRaw(t, h)
				for _, p := range []string{"/next", "/again"} {
					if a := c.do(rawGet(p)); a.Err != "" || a.Code != http.StatusOK || a.Body != "for "+p {
						t.Errorf("GET %s: %+v, want 200 %q", p, a, "for "+p)
					}
				}
				seen := be.requests()
				if len(seen) != 3 {
					t.Fatalf("the backend got %d requests, want 3: %+v", len(seen), seen)
				}
				if seen[1].Conn == seen[0].Conn {
					t.Errorf("GET /next went over the connection the surplus bytes came on")
				}
				got := h.metric(discardedMetric, map[string]string{"reason": "leftover"}) +
					h.metric(discardedMetric, map[string]string{"reason": "unsolicited"})
				if got < 1 {
					t.Errorf("%s{reason=leftover|unsolicited} = %v, want at least 1", discardedMetric, got)
				}
			})
		})
	}
}
