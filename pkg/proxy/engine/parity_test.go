package engine

import (
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
)

// parityCase is requests sent one after another on one client connection, and the backend's
// replies in order (requests past the end, the probes, are answered proxytest.OKReply("probe")).
type parityCase struct {
	name    string
	reqs    []string
	replies []proxytest.Reply
	general bool   // the raw path declines: the general path serves it with FastHTTP1 on too
	want    string // when set, the body the first response must have (long ones as in proxytest.Answer)
	trusted bool   // the client (loopback) is a trusted proxy (Options.TrustedProxies)
}

// parityRun is everything observable of one case.
type parityRun struct {
	Backend []proxytest.SeenRequest // the case's requests, the probes
	Client  []proxytest.Answer      // the case's responses
	// Closed: the proxy closed the client connection after the case's requests (a probe on it got
	// no response).
	Closed bool
	// Fresh is a probe on a new client connection; Backend shows over which upstream connection it
	// went (a kept or a new one).
	Fresh proxytest.Answer
}

func runParityCase(t *testing.T, tc parityCase, fast bool, loops int) parityRun {
	t.Helper()
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(o *Options, s *Server) {
		s.FastHTTP1, s.EventLoops = fast, loops
		if tc.trusted {
			o.TrustedProxies = h1.TrustedProxies{netip.MustParsePrefix("127.0.0.0/8")}
		}
	})
	probe := proxytest.Reply{Resp: proxytest.OKReply("probe")}
	be := proxytest.NewRawBackend(t, func(i int, _ *http.Request) proxytest.Reply {
		if i < len(tc.replies) {
			return tc.replies[i]
		}
		return probe
	})
	h.src.Set(key("app"), be.Addr)
	var run parityRun
	c := dialRaw(t, h)
	for _, r := range tc.reqs {
		run.Client = append(run.Client, c.Do(r))
	}
	run.Closed = c.Closed()
	run.Fresh = dialRaw(t, h).Do(proxytest.RawGet("/fresh"))
	run.Backend = be.Requests()
	return run
}

// TestRawPathMatchesGeneralPath sends the same bytes to a proxy with FastHTTP1 on (the raw path)
// and off (net/http and the ReverseProxy) and compares everything the backend and the client see:
// the request line, Host and every header line the backend got, over which upstream connection;
// the status code, every header line, body and trailers the client got, and whether the proxy
// closed the client connection. Left out by design: header name case and order, which the raw path
// keeps as they came and net/http canonicalises and sorts (the maps have canonical keys), and the
// status line's reason phrase, which is the upstream's on the raw path. A Date the proxy added is
// the current time, compared as present; nil and empty maps and slices are equal (net/http
// allocates some that the raw path leaves nil).
func TestRawPathMatchesGeneralPath(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	manyHeaders := make([]string, 70)
	for i := range manyHeaders {
		manyHeaders[i] = fmt.Sprintf("X-H-%02d: %d", i, i)
	}
	reply := func(resp string) []proxytest.Reply { return []proxytest.Reply{{Resp: resp}} }
	cases := []parityCase{
		{
			name: "plain GET, Content-Length response",
			reqs: []string{proxytest.RawGet("/plain", "User-Agent: curl/8.5.0", "Accept: */*", "x-Mixed-CASE:  padded value  ",
				"Cookie: a=1", "cookie: b=2", "X-Text: caf\xc3\xa9")},
			// The status line is passed on as the upstream wrote it ("Fine"), net/http writes
			// its own reason phrase ("OK"); the status code is what is compared.
			replies: reply("HTTP/1.1 200 Fine\r\ncontent-type: text/plain\r\nContent-Length: 5\r\nDate: " + proxytest.FixedDate +
				"\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nx-lower: v\r\nX-Empty:\r\n\r\nhello"),
		},
		{
			name:    "HEAD",
			reqs:    []string{proxytest.RawReq("HEAD", "/h")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n"),
		},
		{
			name: "hop-by-hop response headers",
			reqs: []string{proxytest.RawGet("/hop")},
			replies: reply(proxytest.OKReply("ok", "Keep-Alive: timeout=5", "proxy-authenticate: Basic", "Proxy-Connection: keep-alive",
				"Upgrade: h2c", "Te: trailers", "Connection: keep-alive", "X-Public: yes")),
		},
		{
			name:    "response Connection naming a header",
			reqs:    []string{proxytest.RawGet("/private")},
			replies: reply(proxytest.OKReply("ok", "Connection: keep-alive, X-Private", "X-Private: secret", "Keep-Alive: timeout=5", "X-Public: yes")),
		},
		{
			name:    "response Trailer header with Content-Length",
			reqs:    []string{proxytest.RawGet("/trailer-cl")},
			replies: reply(proxytest.OKReply("ok", "Trailer: X-Sum")),
		},
		{
			name: "backend Connection: close, the next request goes over a new connection",
			reqs: []string{proxytest.RawGet("/a"), proxytest.RawGet("/b")},
			replies: []proxytest.Reply{
				{Resp: proxytest.OKReply("first", "Connection: close"), Close: true},
				{Resp: proxytest.OKReply("second")},
			},
		},
		{
			name: "chunked response with a trailer",
			reqs: []string{proxytest.RawGet("/chunked", "Te: trailers")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"6\r\nchunk1\r\n6\r\nchunk2\r\n0\r\nX-Checksum: 42\r\n\r\n"),
		},
		{
			name:    "close-delimited response",
			reqs:    []string{proxytest.RawGet("/eof")},
			replies: []proxytest.Reply{{Resp: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", Close: true}},
		},
		{
			name:    "204",
			reqs:    []string{proxytest.RawReq("DELETE", "/thing")},
			replies: reply("HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"),
		},
		{
			name:    "304",
			reqs:    []string{proxytest.RawGet("/cached", `If-None-Match: "v1"`)},
			replies: reply("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=60\r\n\r\n"),
		},
		{
			name:    "200 with an empty body",
			reqs:    []string{proxytest.RawGet("/empty")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
		},
		{
			name: "1xx before the response",
			reqs: []string{proxytest.RawGet("/1xx")},
			replies: reply("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n" +
				proxytest.OKReply("after 1xx")),
		},
		{
			name:    "101 without an upgrade is a 502",
			reqs:    []string{proxytest.RawGet("/switch")},
			replies: []proxytest.Reply{{Resp: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\n", Close: true}},
		},
		{
			// net/http's parser reads it; written to a client it would make net/http's server panic
			// (and an event loop's writer: the whole interceptor). FuzzEventLoopRelay found it.
			name:    "status code 000 is a 502",
			reqs:    []string{proxytest.RawGet("/zero")},
			replies: []proxytest.Reply{{Resp: "HTTP/1.1 000 \r\nContent-Length: 0\r\n\r\n", Close: true}},
			want:    "Bad Gateway: upstream\n",
		},
		{
			name:    "HTTP/1.0 response",
			reqs:    []string{proxytest.RawGet("/old")},
			replies: []proxytest.Reply{{Resp: "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nold ok", Close: true}},
		},
		{
			name:    "response without Date",
			reqs:    []string{proxytest.RawGet("/nodate")},
			replies: reply(proxytest.OKReply("no date")),
		},
		{
			name:    "upstream error status",
			reqs:    []string{proxytest.RawGet("/busy")},
			replies: reply("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 3\r\nContent-Length: 4\r\n\r\nbusy"),
		},
		{
			name:    "event stream with Content-Length",
			reqs:    []string{proxytest.RawGet("/events")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 12\r\n\r\ndata: x\n\nxxx"),
		},
		{
			name:    "response head larger than the read buffer",
			reqs:    []string{proxytest.RawGet("/bighead")},
			replies: reply(proxytest.OKReply("ok", "X-Big: "+strings.Repeat("b", 10<<10))),
		},
		{
			name:    "client Connection: close",
			reqs:    []string{proxytest.RawGet("/bye", "Connection: close")},
			replies: reply(proxytest.OKReply("bye")),
		},
		{
			name: "client Connection: close, chunked response",
			reqs: []string{proxytest.RawGet("/bye-chunked", "Connection: close")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"3\r\nbye\r\n0\r\n\r\n"),
		},
		{
			name: "Close header with Connection: close",
			reqs: []string{proxytest.RawGet("/close-header", "Connection: close", "Close: yes")},
		},
		{
			name: "X-Forwarded-For lines",
			reqs: []string{proxytest.RawGet("/xff", "X-Forwarded-For: 203.0.113.1", "x-forwarded-for: 198.51.100.2, 192.0.2.3")},
		},
		{
			name: "X-Forwarded-Host and -Proto present",
			reqs: []string{proxytest.RawGet("/xf", "X-Forwarded-Host: public.example.com", "x-forwarded-proto: https")},
		},
		{
			name: "empty X-Forwarded-* values",
			reqs: []string{proxytest.RawGet("/xf", "X-Forwarded-For:", "X-Forwarded-Host:", "X-Forwarded-Proto:")},
		},
		{
			name: "X-Forwarded-Port and X-Real-IP",
			reqs: []string{proxytest.RawGet("/xf", "X-Forwarded-Port: 443", "x-real-ip: 203.0.113.1")},
		},
		{
			name:    "X-Forwarded-For lines from a trusted proxy",
			reqs:    []string{proxytest.RawGet("/xff", "X-Forwarded-For: 203.0.113.1", "x-forwarded-for: 198.51.100.2, 192.0.2.3")},
			trusted: true,
		},
		{
			name: "X-Forwarded-Host, -Proto, -Port and X-Real-IP from a trusted proxy",
			reqs: []string{proxytest.RawGet("/xf", "X-Forwarded-Host: public.example.com", "x-forwarded-proto: https",
				"X-Forwarded-Port: 443", "x-real-ip: 203.0.113.1")},
			trusted: true,
		},
		{
			name:    "empty X-Forwarded-* values from a trusted proxy",
			reqs:    []string{proxytest.RawGet("/xf", "X-Forwarded-For:", "X-Forwarded-Host:", "X-Forwarded-Proto:")},
			trusted: true,
		},
		{name: "Host with a port, in upper case", reqs: []string{proxytest.RawReqTo("App.Example.COM:8080", "GET", "/")}},
		{
			name: "Forwarded",
			reqs: []string{proxytest.RawGet("/fwd", "Forwarded: for=192.0.2.60;proto=https;by=203.0.113.43")},
		},
		{name: "Te: trailers", reqs: []string{proxytest.RawGet("/te", "TE: trailers")}},
		{name: "Te: gzip", reqs: []string{proxytest.RawGet("/te", "Te: gzip")}},
		{name: "Te: gzip, trailers", reqs: []string{proxytest.RawGet("/te", "Te: gzip", "Te: deflate, trailers")}},
		{
			name: "Proxy-Authorization and Proxy-Connection",
			reqs: []string{proxytest.RawGet("/pa", "Proxy-Authorization: Basic Zm9vOmJhcg==", "Proxy-Connection: keep-alive")},
		},
		{name: "Keep-Alive", reqs: []string{proxytest.RawGet("/ka", "Connection: keep-alive", "Keep-Alive: timeout=5, max=100")}},
		{name: "query string", reqs: []string{proxytest.RawGet(`/search?q=a+b&x=%20y&pipe=|"&empty=&&`)}},
		{name: "empty query", reqs: []string{proxytest.RawGet("/search?")}},
		{name: "query net/http cannot parse", reqs: []string{proxytest.RawGet("/search?a=1;b=2"), proxytest.RawGet("/search?q=%zz&r=%2")}},
		{name: "path characters kept as they are", reqs: []string{proxytest.RawGet("/a//b/../c;p=1!$&'()*+,=:@[]~_-.")}},
		{name: "percent-encoded path", reqs: []string{proxytest.RawGet("/a%2Fb/c%20d")}},
		{name: "more than 64 headers", reqs: []string{proxytest.RawGet("/many", manyHeaders...)}},
		{name: "head over the loops' first buffer", reqs: []string{proxytest.RawGet("/large", "X-Pad: "+strings.Repeat("p", 70<<10), "X-After: 1")}},
		{name: "large heads on one connection", reqs: []string{proxytest.RawGet("/large1", "X-Pad: "+strings.Repeat("p", 9000)), proxytest.RawGet("/small"), proxytest.RawGet("/large2", manyHeaders...)}},
		{
			name:    "1 MiB body",
			reqs:    []string{proxytest.RawGet("/big")},
			replies: reply(proxytest.OKReply(big)),
			want:    fmt.Sprintf("%d bytes, sha256 %x", len(big), sha256.Sum256([]byte(big))),
		},
		// net/http writes a Content-Length: 0 for a body-less POST, PUT or PATCH only (and drops
		// the client's for GET and HEAD).
		{name: "GET with Content-Length: 0", reqs: []string{proxytest.RawGet("/cl0", "Content-Length: 0")}},
		{name: "POST without a body", reqs: []string{proxytest.RawReq("POST", "/post")}},
		{name: "PUT with Content-Length: 0", reqs: []string{proxytest.RawReq("PUT", "/put", "content-length: 0")}},
		{name: "OPTIONS with Content-Length: 0", reqs: []string{proxytest.RawReq("OPTIONS", "/opt", "Content-Length: 0")}},
		{name: "two User-Agent lines", reqs: []string{proxytest.RawGet("/ua", "User-Agent: first/1", "User-Agent: second/2")}},
		{name: "empty User-Agent", reqs: []string{proxytest.RawGet("/ua", "User-Agent:")}},
		{
			name:    "Pragma: no-cache without Cache-Control, both ways",
			reqs:    []string{proxytest.RawGet("/pragma", "Pragma: no-cache")},
			replies: reply(proxytest.OKReply("ok", "Pragma: no-cache")),
		},
		{
			name:    "Pragma: no-cache with Cache-Control, both ways",
			reqs:    []string{proxytest.RawGet("/pragma", "Pragma: no-cache", "Cache-Control: max-age=0")},
			replies: reply(proxytest.OKReply("ok", "Pragma: no-cache", "Cache-Control: private")),
		},
		{name: "path characters net/http escapes", reqs: []string{proxytest.RawGet("/a|b/\"q\"/{x}/^/`/<>/\\/caf\xc3\xa9/#frag?x=|")}, general: true},
		{
			name:    "response header name that is not a token",
			reqs:    []string{proxytest.RawGet("/badname")},
			replies: reply(proxytest.OKReply("ok", "Bad Name: v")),
		},
		{
			name:    "response header value with a control character",
			reqs:    []string{proxytest.RawGet("/badvalue")},
			replies: reply(proxytest.OKReply("ok", "X-Bad: a\rb")),
		},
		{
			name:    "response header value with obs-text",
			reqs:    []string{proxytest.RawGet("/obstext")},
			replies: reply(proxytest.OKReply("ok", "X-Text: caf\xc3\xa9")),
		},
		{name: "Pragma: No-Cache (not net/http's exact value)", reqs: []string{proxytest.RawGet("/pragma", "Pragma: No-Cache")}},
		{
			name:    "response header line without a colon",
			reqs:    []string{proxytest.RawGet("/nocolon")},
			replies: []proxytest.Reply{{Resp: proxytest.OKReply("ok", "NoColonHere"), Close: true}},
		},
		{
			name:    "status line without a reason phrase",
			reqs:    []string{proxytest.RawGet("/noreason")},
			replies: reply("HTTP/1.1 200\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"),
		},
		{
			// A bare LF ends a line for net/http's parser (and the client's): the raw path must not
			// pass a status line on that hides a header from its own look at the head.
			name: "status line with a bare LF hiding a header",
			reqs: []string{proxytest.RawGet("/hidden")},
			replies: reply("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\n" +
				"2\r\nok\r\n0\r\n\r\n"),
		},
		{
			name:    "response head with bare LF line ends",
			reqs:    []string{proxytest.RawGet("/lf")},
			replies: reply("HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\nok"),
		},
		{
			name:    "two equal Content-Length lines",
			reqs:    []string{proxytest.RawGet("/twocl")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"),
		},
		{
			name: "several requests on one connection",
			reqs: []string{proxytest.RawGet("/1"), proxytest.RawReq("HEAD", "/2"), proxytest.RawGet("/3")},
			replies: []proxytest.Reply{
				{Resp: proxytest.OKReply("one")}, {Resp: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\n"}, {Resp: proxytest.OKReply("three")},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// One loop: with more, the fresh connection may be served by another loop, which has
			// its own idle upstream connections.
			loops := runParityCase(t, tc, true, 1)
			general := runParityCase(t, tc, false, 0)
			raw := loops
			if d := cmp.Diff(general, loops, cmpopts.IgnoreUnexported(proxytest.SeenRequest{}, proxytest.Answer{}), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("event loops differ from the general path (-general +loops):\n%s", d)
			}
			if len(loops.Backend) > 0 && loops.Backend[0].ViaLoops() == tc.general {
				t.Errorf("event loops: served on the raw path: %v, want %v (head %q)", loops.Backend[0].ViaLoops(), !tc.general, loops.Backend[0].Head())
			}
			for _, r := range general.Backend {
				if r.ViaLoops() {
					t.Fatalf("FastHTTP1 off: the backend got %q, not net/http's head", r.Head())
				}
			}
			if len(raw.Backend) == 0 {
				t.Fatal("the backend got no request")
			}
			if got := raw.Backend[0].ViaLoops(); got == tc.general {
				t.Errorf("served on the raw path: %v, want %v (head %q)", got, !tc.general, raw.Backend[0].Head())
			}
			for i, a := range raw.Client {
				if _, ok := a.Wire["Date"]; !ok && a.Err == "" {
					t.Errorf("response %d has no Date", i)
				}
			}
			if tc.want != "" && raw.Client[0].Body != tc.want {
				t.Errorf("body %s, want %s", raw.Client[0].Body, tc.want)
			}
		})
	}
}

// namedReply answers with name as the body and as the status line's reason phrase, which the raw
// path passes on (net/http writes "OK"): the client can tell which path served it.
func namedReply(name string) proxytest.Reply {
	return proxytest.Reply{Resp: fmt.Sprintf("HTTP/1.1 200 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", name, len(name), name)}
}

func TestRawPathHeaderMatchedRoutes(t *testing.T) {
	canary := entry("canary", "app.example.com", "canary")
	canary.header, canary.value = "X-Canary", "1"
	beta := entry("beta", "app.example.com", "beta")
	beta.header = "X-Beta" // present, any value
	// net/http takes Host out of the header map, so a route cannot match on it.
	byHost := entry("byhost", "hm.example.com", "canary")
	byHost.header = "Host"
	entries := []route{canary, beta, entry("stable", "app.example.com", "stable"), byHost, entry("hm", "hm.example.com", "stable")}
	cases := []struct {
		name, req, want string
	}{
		{"no header", proxytest.RawGet("/"), "stable"},
		{"matching header", proxytest.RawGet("/", "X-Canary: 1"), "canary"},
		{"header name in lower case", proxytest.RawGet("/", "x-canary: 1"), "canary"},
		{"other value", proxytest.RawGet("/", "X-Canary: 2"), "stable"},
		{"one of two lines matches", proxytest.RawGet("/", "X-Canary: 0", "X-CANARY: 1"), "canary"},
		{"a list is one value", proxytest.RawGet("/", "X-Canary: 1, 2"), "stable"},
		{"value with padding", proxytest.RawGet("/", "X-Canary: \t1 "), "canary"},
		{"present with an empty value", proxytest.RawGet("/", "X-Beta:"), "beta"},
		{"Host is no header to match", proxytest.RawReqTo("hm.example.com", "GET", "/"), "stable"},
	}
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			h := newHarness(t, entries, func(_ *Options, s *Server) { s.FastHTTP1 = fast })
			for _, svc := range []string{"stable", "canary", "beta"} {
				h.src.Set(key(svc), proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return namedReply(svc) }).Addr)
			}
			c := dialRaw(t, h)
			for _, tc := range cases {
				a := c.Do(tc.req)
				wantStatus := "200 OK"
				if fast {
					wantStatus = "200 " + tc.want // the raw path served it
				}
				if a.Err != "" || a.Body != tc.want || a.Status() != wantStatus {
					t.Errorf("%s: got %q %s %q, want %q from %s", tc.name, a.Status(), a.Err, a.Body, wantStatus, tc.want)
				}
			}
		})
	}
}
