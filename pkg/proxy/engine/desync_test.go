package engine

import (
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// Tests of what a hostile upstream cannot do through the proxy: bytes it sends after a complete
// response never become another request's response (response desync), on every path.

// evilReply is a whole response smuggled after a complete one: a desynced connection would give it
// to the next request.
var evilReply = proxytest.OKReply("EVIL")

// oneUpstreamConn lets the proxy open a single connection to an endpoint, so that every request
// would reuse the connection the previous one left behind.
func oneUpstreamConn(o *Options, _ *Server) { o.MaxConnsPerEndpoint = 1 }

func TestUpstreamBytesAfterAResponseDoNotDesync(t *testing.T) {
	chunked := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
	headAnswer := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n"
	for _, tc := range []struct {
		name     string
		req      string
		reply    proxytest.Reply
		wantCode int
		wantBody string
	}{
		{"204 with a body", proxytest.RawGet("/r"), proxytest.Reply{Resp: "HTTP/1.1 204 No Content\r\n\r\n" + evilReply}, 204, ""},
		{"204, a body later", proxytest.RawGet("/r"), proxytest.Reply{Resp: "HTTP/1.1 204 No Content\r\n\r\n", Late: evilReply}, 204, ""},
		{"304 with a body", proxytest.RawGet("/r"), proxytest.Reply{Resp: "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n" + evilReply}, 304, ""},
		{"304, a body later", proxytest.RawGet("/r"), proxytest.Reply{Resp: "HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n", Late: evilReply}, 304, ""},
		{"more than Content-Length, later", proxytest.RawGet("/r"), proxytest.Reply{Resp: proxytest.OKReply("ok"), Late: evilReply}, 200, "ok"},
		{"data after the last chunk", proxytest.RawGet("/r"), proxytest.Reply{Resp: chunked + evilReply}, 200, "ok"},
		{"data after the last chunk, later", proxytest.RawGet("/r"), proxytest.Reply{Resp: chunked, Late: evilReply}, 200, "ok"},
		{"HEAD answer, its body later", proxytest.RawReq("HEAD", "/r"), proxytest.Reply{Resp: headAnswer, Late: "EVIL" + evilReply}, 200, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onBothPathsWith(t, oneUpstreamConn, func(t *testing.T, h *harness, fast bool) {
				be := proxytest.NewRawBackend(t, func(i int, r *http.Request) proxytest.Reply {
					if i == 0 {
						return tc.reply
					}
					return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
				})
				h.src.Set(key("app"), be.Addr)
				if a := dialRaw(t, h).Do(tc.req); a.Err != "" || a.Code != tc.wantCode || a.Body != tc.wantBody {
					t.Fatalf("first client: %+v, want %d %q", a, tc.wantCode, tc.wantBody)
				}
				time.Sleep(3 * proxytest.LateAfter) // the late bytes are in the proxy's socket
				// Another client, then the same one again: each gets its own answer.
				c := dialRaw(t, h)
				for _, p := range []string{"/next", "/again"} {
					if a := c.Do(proxytest.RawGet(p)); a.Err != "" || a.Code != http.StatusOK || a.Body != "for "+p {
						t.Errorf("GET %s: %+v, want 200 %q", p, a, "for "+p)
					}
				}
				seen := be.Requests()
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

// halfClosed sends req on a new client connection, closes the client's sending side and returns
// every byte the client then receives, to the end of the connection.
func halfClosed(t *testing.T, h *harness, req string) string {
	t.Helper()
	c := dialRaw(t, h)
	if _, err := io.WriteString(c.Conn(), req); err != nil {
		t.Fatal(err)
	}
	if err := c.Conn().(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c.Conn())
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading to the end: %v (got %q)", err, got)
	}
	return string(got)
}

// A client that closes its sending side after its request gets the backend's own answer, or the
// connection closed without an answer: never a response the backend did not send.
func TestHalfClosedClientGetsTheRealAnswerOrNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply proxytest.Reply
	}{
		{"answered at once", proxytest.Reply{Resp: proxytest.OKReply("real")}},
		{"never answered", proxytest.Reply{Hang: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
				be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return tc.reply })
				h.src.Set(key("app"), be.Addr)
				got := halfClosed(t, h, proxytest.RawGet("/"))
				if tc.reply.Hang {
					if got != "" {
						t.Errorf("the client got %q for a request the backend never answered, want nothing", got)
					}
					return
				}
				if got != "" && !(strings.HasPrefix(got, "HTTP/1.1 200 OK\r\n") && strings.HasSuffix(got, "\r\n\r\nreal")) {
					t.Errorf("the client got %q, want the backend's answer or nothing", got)
				}
			})
		})
	}
}

// A client that sends part of a request body and closes its sending side gets no success: the
// backend never saw a whole request.
func TestClientLeavingMidBodyGetsNoSuccess(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		var whole atomic.Int32
		s, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				panic(http.ErrAbortHandler) // an incomplete request gets no answer
			}
			whole.Add(1)
			_, _ = io.WriteString(w, "whole")
		})
		s.Config.ErrorLog = log.New(io.Discard, "", 0)
		h.src.Set(key("app"), ep)
		head := "POST /upload HTTP/1.1\r\nhost: app.example.com\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n"
		got := halfClosed(t, h, head+strings.Repeat("x", 1000))
		if strings.HasPrefix(got, "HTTP/1.1 2") {
			t.Errorf("the client got %q for 1000 of 100000 body bytes, want no success", got)
		}
		if n := whole.Load(); n != 0 {
			t.Errorf("the backend got %d whole requests, want 0", n)
		}
	})
}

// The request target reaches the backend as the client sent it, query included, on every path:
// net/http's ReverseProxy would drop query parameters it cannot parse ("a=1;b=2", "%zz").
func TestQueryPassesAsSent(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("ok")} })
		h.src.Set(key("app"), be.Addr)
		targets := []string{"/q?a=1;b=2", "/q?q=%zz", "/q?a=%ZZ&b=2&c", "/q?x=1&&y=%2", "/q?"}
		c := dialRaw(t, h)
		for _, target := range targets {
			if a := c.Do(proxytest.RawGet(target)); a.Code != http.StatusOK {
				t.Errorf("GET %s: %+v", target, a)
			}
		}
		post := "POST /q?a=1;b=%zz HTTP/1.1\r\nhost: app.example.com\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"
		if a := c.Do(post); a.Code != http.StatusOK {
			t.Errorf("POST: %+v", a)
		}
		var got []string
		for _, r := range be.Requests() {
			got = append(got, r.RequestURI)
		}
		want := append(targets, "/q?a=1;b=%zz")
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("request targets the backend got (-sent +got):\n%s", diff)
		}
	})
}

// Header names with "_" are not forwarded, on every path (nginx's default): a backend that reads
// "Transfer_Encoding" as Transfer-Encoding cannot be handed one past the proxy's rules.
func TestUnderscoreHeadersAreDropped(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("ok")} })
		h.src.Set(key("app"), be.Addr)
		under := []string{"Transfer_Encoding: chunked", "X_Forwarded_For: 6.6.6.6", "My_Header: x", "My-Header: y"}
		c := dialRaw(t, h)
		if a := c.Do(proxytest.RawGet("/u", under...)); a.Code != http.StatusOK {
			t.Errorf("GET: %+v", a)
		}
		post := proxytest.RawReq("POST", "/u", append(under, "Content-Type: text/plain", "Content-Length: 2")...) + "hi"
		if a := c.Do(post); a.Code != http.StatusOK {
			t.Errorf("POST: %+v", a)
		}
		seen := be.Requests()
		if len(seen) != 2 {
			t.Fatalf("the backend got %d requests, want 2", len(seen))
		}
		for _, r := range seen {
			for k := range r.Wire {
				if strings.Contains(k, "_") {
					t.Errorf("%s %s: the backend got %s: %q", r.Method, r.RequestURI, k, r.Wire[k])
				}
			}
			if got := r.Wire["My-Header"]; len(got) != 1 || got[0] != "y" {
				t.Errorf("%s %s: My-Header = %q, want [y]", r.Method, r.RequestURI, got)
			}
			if got := r.Wire["X-Forwarded-For"]; len(got) != 1 || got[0] != "127.0.0.1" {
				t.Errorf("%s %s: X-Forwarded-For = %q, want [127.0.0.1]", r.Method, r.RequestURI, got)
			}
		}
	})
}

// A client that sends its header block slowly is cut off once the header timeout passed since its
// first byte, on every path: a connection the fast path hands to net/http (here at a bare LF that
// arrives late) does not get a second full timeout there.
func TestHeaderTimeoutRunsFromTheFirstByteAcrossAHandOff(t *testing.T) {
	const timeout = time.Second
	headerTimeout := func(_ *Options, s *Server) { s.ReadHeaderTimeout = timeout }
	onBothPathsWith(t, headerTimeout, func(t *testing.T, h *harness, fast bool) {
		c := dialRaw(t, h)
		start := time.Now()
		if _, err := io.WriteString(c.Conn(), "GET / HTTP/1.1\r\nhost: app.example.com\r\nX-Pad: "); err != nil {
			t.Fatal(err)
		}
		time.Sleep(timeout * 6 / 10)
		if _, err := io.WriteString(c.Conn(), strings.Repeat("a", 5000)+"\nX-More: b"); err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(c.Conn()) // until the proxy closes the connection
		if took := time.Since(start); took > timeout*14/10 {
			t.Errorf("the connection was closed %v after the first byte (got %q), want about %v", took.Round(time.Millisecond), got, timeout)
		}
	})
}

// A request with both Content-Length and Transfer-Encoding is read by its Transfer-Encoding, and the
// connection is closed after the answer (RFC 9112 section 6.1): what follows on it could be a
// smuggled request. On both paths of the cleartext port (fast=true: the event loops, which leave a
// request with Transfer-Encoding to net/http and hand it the connection; fast=false: net/http
// alone), and whichever request of the connection it is: the first, or a later one after requests
// the loops or net/http served. The TLS port's test is pkg/tlsterm's TestBothLengthsCloseTheConnection.
func TestBothLengthsCloseTheConnection(t *testing.T) {
	both := "POST /both HTTP/1.1\r\nhost: app.example.com\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
	bothLF := "POST /both HTTP/1.1\nhost: app.example.com\nTransfer-Encoding: chunked\ncontent-length: 5\n\n2\r\nhi\r\n0\r\n\r\n"
	plain := "POST /plain HTTP/1.1\r\nhost: app.example.com\r\nContent-Length: 2\r\n\r\nhi"
	chunked := "POST /chunked HTTP/1.1\r\nhost: app.example.com\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nX-Trailer: 1\r\n\r\n"
	get := proxytest.RawGet("/get")
	for _, tc := range []struct {
		name  string
		first []string // requests answered with the connection kept
		both  string
	}{
		{"first request", nil, both},
		{"first request, bare LF", nil, bothLF},
		{"after a POST", []string{plain}, both},
		{"after a chunked POST and a GET", []string{chunked, get}, both},
		{"after two POSTs, bare LF", []string{plain, plain}, bothLF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
				var bodies []string
				var mu sync.Mutex
				_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
					b, _ := io.ReadAll(r.Body)
					mu.Lock()
					bodies = append(bodies, string(b))
					mu.Unlock()
					_, _ = io.WriteString(w, "ok")
				})
				h.src.Set(key("app"), ep)
				c := dialRaw(t, h)
				var want []string
				for _, req := range tc.first {
					if a := c.Do(req); a.Code != http.StatusOK || a.Close {
						t.Fatalf("%.20q: %+v, want 200 keeping the connection", req, a)
					}
					if req == get {
						want = append(want, "")
					} else {
						want = append(want, "hi")
					}
				}
				a := c.Do(tc.both)
				if a.Code != http.StatusOK || a.Body != "ok" || !a.Close {
					t.Errorf("POST with both: %+v, want 200 %q with Connection: close", a, "ok")
				}
				if !c.Closed() {
					t.Errorf("the connection stayed open after a request with both Content-Length and Transfer-Encoding")
				}
				want = append(want, "hi")
				// A plain one afterwards on a new connection is not affected.
				c = dialRaw(t, h)
				if a := c.Do(plain); a.Code != http.StatusOK || a.Close {
					t.Errorf("plain POST: %+v, want 200 keeping the connection", a)
				}
				want = append(want, "hi")
				mu.Lock()
				defer mu.Unlock()
				if diff := cmp.Diff(want, bodies); diff != "" {
					t.Errorf("bodies the backend got (-want +got):\n%s", diff)
				}
			})
		})
	}
}

// A head whose last line ends in a bare LF before the final CRLF ("...\n\r\n") is complete for
// net/http's parsers; every path reads it at once (client request and upstream response) instead
// of waiting for bytes that never come.
func TestHeadsEndingInBareLFAreReadAtOnce(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		be := proxytest.NewRawBackend(t, func(i int, r *http.Request) proxytest.Reply {
			if r.URL.Path == "/lf-response" {
				return proxytest.Reply{Resp: "HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\r\nok"}
			}
			return proxytest.Reply{Resp: proxytest.OKReply("ok")}
		})
		h.src.Set(key("app"), be.Addr)
		for _, req := range []string{
			"GET /lf-request HTTP/1.1\nhost: app.example.com\n\r\n",
			proxytest.RawGet("/lf-response"),
		} {
			c := dialRaw(t, h)
			_ = c.Conn().SetDeadline(time.Now().Add(3 * time.Second))
			start := time.Now()
			if a := c.Do(req); a.Code != http.StatusOK || a.Body != "ok" {
				t.Errorf("%q: %+v after %v, want 200 %q at once", req, a, time.Since(start).Round(time.Millisecond), "ok")
			}
		}
	})
}

// A large head that a client trickles stays on the loops (it has no bare LF) and is cut off once the
// header timeout passed since its first byte, although it keeps growing and sits in the loops' line
// for large heads in between.
func TestHeaderTimeoutBoundsATrickledLargeHeadOnTheLoops(t *testing.T) {
	const timeout = time.Second
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(_ *Options, s *Server) {
		s.FastHTTP1, s.EventLoops, s.ReadHeaderTimeout = true, 1, timeout
	})
	c := dialRaw(t, h)
	start := time.Now()
	if _, err := io.WriteString(c.Conn(), "GET / HTTP/1.1\r\nhost: app.example.com\r\nX-Pad: "+strings.Repeat("a", 5000)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		time.Sleep(timeout * 3 / 10)
		if _, err := io.WriteString(c.Conn(), strings.Repeat("b", 3000)); err != nil {
			break // closed already
		}
	}
	got, _ := io.ReadAll(c.Conn()) // until the proxy closes the connection
	if took := time.Since(start); took > timeout*25/10 || len(got) > 0 {
		t.Errorf("the connection was closed %v after the first byte with %q, want about %v and nothing", took.Round(time.Millisecond), got, timeout)
	}
	// The loop uncounts the buffer right after it closes the socket.
	testenv.Eventually(t, 5*time.Second, "the cut-off head's buffer uncounted", func() bool { n, _ := h.srv.ArrivingHeads(); return n == 0 })
}
