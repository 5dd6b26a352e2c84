package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// Tests of the raw path (raw.go): what a backend and a client see must be what the general path
// (net/http's server and the ReverseProxy, Server.FastHTTP1 off) gives them.

// rawBackend is a loopback HTTP/1.1 upstream on raw TCP. It reads every request head itself, so
// that it can record the exact bytes, parses it with http.ReadRequest and answers with the bytes
// its reply function returns.
type rawBackend struct {
	ln    net.Listener
	ep    endpoints.Endpoint
	reply func(i int, r *http.Request) rawReply
	// hungUp receives the connection index of a held request (rawReply.hang) whose connection the
	// proxy closed.
	hungUp chan int

	mu     sync.Mutex
	closed bool
	stop   chan struct{}
	conns  []net.Conn
	seen   []seenRequest
	wg     sync.WaitGroup
}

// rawReply is a backend's answer to one request.
type rawReply struct {
	resp  string // written as is
	close bool   // close the connection after writing resp, without saying so
	hang  bool   // never answer: hold the connection until the proxy closes it or the test ends
	// late is written lateAfter after resp, on the same connection, before the next request is
	// read: bytes a hostile upstream sends after a complete response.
	late string
}

// lateAfter is when a rawReply's late bytes follow its response.
const lateAfter = 20 * time.Millisecond

// seenRequest is one request as the backend received it.
type seenRequest struct {
	Conn       int // index of the upstream connection, in accept order
	Method     string
	RequestURI string
	Proto      string
	Host       string
	Header     http.Header // as http.ReadRequest returns it (no Host; Pragma: no-cache implies Cache-Control)
	// Wire is every header line as sent, Host included, under canonical keys, with nothing added:
	// textproto.Reader.ReadMIMEHeader of the head.
	Wire http.Header
	// head is the exact bytes; not compared, the raw path keeps the client's header case and order.
	head string
}

// newRawBackend starts a backend; create it after the harness, so that it closes first and no
// request is left waiting for it when the harness drains.
func newRawBackend(t *testing.T, reply func(i int, r *http.Request) rawReply) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &rawBackend{ln: ln, reply: reply, hungUp: make(chan int, 16), stop: make(chan struct{})}
	b.ep = endpointOf(t, "http://"+ln.Addr().String(), "")
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *rawBackend) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.mu.Lock()
		if b.closed {
			b.mu.Unlock()
			_ = c.Close()
			return
		}
		n := len(b.conns)
		b.conns = append(b.conns, c)
		b.wg.Add(1)
		b.mu.Unlock()
		go b.serve(c, n)
	}
}

// readHead reads one request head, up to and including its empty line, exactly as sent.
func readHead(br *bufio.Reader) (string, error) {
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		head.WriteString(line)
		if line == "\r\n" {
			return head.String(), nil
		}
	}
}

func (b *rawBackend) serve(c net.Conn, n int) {
	defer b.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		head, err := readHead(br)
		if err != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		tp := textproto.NewReader(bufio.NewReader(strings.NewReader(head)))
		_, _ = tp.ReadLine()
		wire, _ := tp.ReadMIMEHeader()
		b.mu.Lock()
		i := len(b.seen)
		b.seen = append(b.seen, seenRequest{
			Conn: n, Method: req.Method, RequestURI: req.RequestURI, Proto: req.Proto, Host: req.Host,
			Header: req.Header, Wire: http.Header(wire), head: head,
		})
		b.mu.Unlock()
		r := b.reply(i, req)
		if r.hang {
			_, _ = br.ReadByte() // returns when the connection is closed
			select {
			case <-b.stop:
			default:
				b.hungUp <- n
			}
			return
		}
		if _, err := io.WriteString(c, r.resp); err != nil || r.close {
			return
		}
		if r.late != "" {
			time.Sleep(lateAfter)
			if _, err := io.WriteString(c, r.late); err != nil {
				return
			}
		}
	}
}

func (b *rawBackend) close() {
	b.mu.Lock()
	b.closed = true
	close(b.stop)
	conns := b.conns
	b.mu.Unlock()
	_ = b.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	b.wg.Wait()
}

// requests returns what the backend received so far.
func (b *rawBackend) requests() []seenRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]seenRequest(nil), b.seen...)
}

func (b *rawBackend) connCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

// viaRaw reports whether the request reached the backend on the raw path: the raw path passes the
// client's header lines on as they came (the tests send a lower-case "host:"), where net/http
// writes "Host:".
func (s seenRequest) viaRaw() bool { return strings.Contains(s.head, "\r\nhost: ") }

// rawClient is a client connection to a harness on raw TCP.
type rawClient struct {
	t   *testing.T
	c   net.Conn
	rec *recorder
	br  *bufio.Reader
}

// recorder keeps what was read through it, so that a response head can be looked at as received.
type recorder struct {
	r   io.Reader
	buf []byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

func dialRaw(t *testing.T, h *harness) *rawClient {
	t.Helper()
	c := h.dial(t, 15*time.Second)
	rec := &recorder{r: c}
	return &rawClient{t: t, c: c, rec: rec, br: bufio.NewReader(rec)}
}

// clientAnswer is one response as the client received it.
type clientAnswer struct {
	Err  string // "" for a complete response, else what went wrong (no response, truncated body)
	Code int
	// Wire is every header line as received under canonical keys, with nothing added (the client's
	// parser adds Cache-Control for Pragma: no-cache). A Date the proxy added is "<now>".
	Wire    http.Header
	TE      []string
	Body    string // long bodies as length and digest
	Trailer http.Header
	Close   bool   // the response said Connection: close
	status  string // the reason phrase is the upstream's on the raw path, net/http's else: not compared
}

// fixedDate is the Date the tests' backends send when they send one; the client must get it.
const fixedDate = "Mon, 02 Jan 2006 15:04:05 GMT"

// do sends one request (raw bytes) and reads the response.
func (rc *rawClient) do(req string) clientAnswer {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, req); err != nil {
		return clientAnswer{Err: "no response (write failed)"}
	}
	method, _, _ := strings.Cut(req, " ")
	rc.rec.buf = append(rc.rec.buf[:0], rc.rec.buf[len(rc.rec.buf)-rc.br.Buffered():]...)
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		return clientAnswer{Err: "no response"}
	}
	a := clientAnswer{Code: resp.StatusCode, TE: resp.TransferEncoding, Close: resp.Close, status: resp.Status}
	head := rc.rec.buf
	if i := bytes.Index(head, []byte("\r\n\r\n")); i >= 0 {
		head = head[:i+4]
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	_, _ = tp.ReadLine()
	wire, err := tp.ReadMIMEHeader()
	if err != nil {
		rc.t.Errorf("response head %q: %v", head, err)
	}
	a.Wire = http.Header(wire)
	if d := a.Wire["Date"]; len(d) == 1 && d[0] != fixedDate {
		if _, err := http.ParseTime(d[0]); err == nil {
			a.Wire["Date"] = []string{"<now>"}
		}
	}
	body, err := io.ReadAll(resp.Body)
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		a.Err = "truncated body"
	case err != nil:
		a.Err = "body: " + err.Error() // a timeout: the test fails on this
	}
	a.Body = string(body)
	if len(body) > 256 {
		a.Body = fmt.Sprintf("%d bytes, sha256 %x", len(body), sha256.Sum256(body))
	}
	a.Trailer = resp.Trailer
	return a
}

// closed reports whether the proxy closed the connection: a probe request gets no response.
func (rc *rawClient) closed() bool {
	return rc.do(rawGet("/probe")).Err != ""
}

// rawGet is a GET request for path with extra header lines. Host comes first, in lower case: the
// raw path passes that on as is, net/http as "Host" (see seenRequest.viaRaw).
func rawGet(path string, headers ...string) string { return rawReq("GET", path, headers...) }

func rawReq(method, path string, headers ...string) string {
	return rawReqTo("app.example.com", method, path, headers...)
}

func rawReqTo(host, method, path string, headers ...string) string {
	var b strings.Builder
	b.WriteString(method + " " + path + " HTTP/1.1\r\nhost: " + host + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// okReply is a 200 with Content-Length and Content-Type, then extra header lines. Every reply with
// a body names its Content-Type: net/http's server sniffs one when there is none, the fast path's
// writer does not (a difference between FastHTTP1 on and off that is not the raw path's).
func okReply(body string, headers ...string) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}

// parityCase is requests sent one after another on one client connection, and the backend's
// replies in order (requests past the end, the probes, are answered okReply("probe")).
type parityCase struct {
	name    string
	reqs    []string
	replies []rawReply
	general bool   // the raw path declines: the general path serves it with FastHTTP1 on too
	want    string // when set, the body the first response must have (long ones as in clientAnswer)
}

// parityRun is everything observable of one case.
type parityRun struct {
	Backend []seenRequest  // the case's requests, the probes
	Client  []clientAnswer // the case's responses
	// Closed: the proxy closed the client connection after the case's requests (a probe on it got
	// no response).
	Closed bool
	// Fresh is a probe on a new client connection; Backend shows over which upstream connection it
	// went (a kept or a new one).
	Fresh clientAnswer
}

func runParityCase(t *testing.T, tc parityCase, fast bool, loops int) parityRun {
	t.Helper()
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, func(_ *proxy.Options, s *proxy.Server) {
		s.FastHTTP1, s.EventLoops = fast, loops
	})
	probe := rawReply{resp: okReply("probe")}
	be := newRawBackend(t, func(i int, _ *http.Request) rawReply {
		if i < len(tc.replies) {
			return tc.replies[i]
		}
		return probe
	})
	h.src.Set(key("app"), be.ep)
	var run parityRun
	c := dialRaw(t, h)
	for _, r := range tc.reqs {
		run.Client = append(run.Client, c.do(r))
	}
	run.Closed = c.closed()
	run.Fresh = dialRaw(t, h).do(rawGet("/fresh"))
	run.Backend = be.requests()
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
	reply := func(resp string) []rawReply { return []rawReply{{resp: resp}} }
	cases := []parityCase{
		{
			name: "plain GET, Content-Length response",
			reqs: []string{rawGet("/plain", "User-Agent: curl/8.5.0", "Accept: */*", "x-Mixed-CASE:  padded value  ",
				"Cookie: a=1", "cookie: b=2", "X-Text: caf\xc3\xa9")},
			// The status line is passed on as the upstream wrote it ("Fine"), net/http writes
			// its own reason phrase ("OK"); the status code is what is compared.
			replies: reply("HTTP/1.1 200 Fine\r\ncontent-type: text/plain\r\nContent-Length: 5\r\nDate: " + fixedDate +
				"\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nx-lower: v\r\nX-Empty:\r\n\r\nhello"),
		},
		{
			name:    "HEAD",
			reqs:    []string{rawReq("HEAD", "/h")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1234\r\n\r\n"),
		},
		{
			name: "hop-by-hop response headers",
			reqs: []string{rawGet("/hop")},
			replies: reply(okReply("ok", "Keep-Alive: timeout=5", "proxy-authenticate: Basic", "Proxy-Connection: keep-alive",
				"Upgrade: h2c", "Te: trailers", "Connection: keep-alive", "X-Public: yes")),
		},
		{
			name:    "response Connection naming a header",
			reqs:    []string{rawGet("/private")},
			replies: reply(okReply("ok", "Connection: keep-alive, X-Private", "X-Private: secret", "Keep-Alive: timeout=5", "X-Public: yes")),
		},
		{
			name:    "response Trailer header with Content-Length",
			reqs:    []string{rawGet("/trailer-cl")},
			replies: reply(okReply("ok", "Trailer: X-Sum")),
		},
		{
			name: "backend Connection: close, the next request goes over a new connection",
			reqs: []string{rawGet("/a"), rawGet("/b")},
			replies: []rawReply{
				{resp: okReply("first", "Connection: close"), close: true},
				{resp: okReply("second")},
			},
		},
		{
			name: "chunked response with a trailer",
			reqs: []string{rawGet("/chunked", "Te: trailers")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTrailer: X-Checksum\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"6\r\nchunk1\r\n6\r\nchunk2\r\n0\r\nX-Checksum: 42\r\n\r\n"),
		},
		{
			name:    "close-delimited response",
			reqs:    []string{rawGet("/eof")},
			replies: []rawReply{{resp: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the end", close: true}},
		},
		{
			name:    "204",
			reqs:    []string{rawReq("DELETE", "/thing")},
			replies: reply("HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n"),
		},
		{
			name:    "304",
			reqs:    []string{rawGet("/cached", `If-None-Match: "v1"`)},
			replies: reply("HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nCache-Control: max-age=60\r\n\r\n"),
		},
		{
			name:    "200 with an empty body",
			reqs:    []string{rawGet("/empty")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
		},
		{
			name: "1xx before the response",
			reqs: []string{rawGet("/1xx")},
			replies: reply("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n" +
				okReply("after 1xx")),
		},
		{
			name:    "101 without an upgrade is a 502",
			reqs:    []string{rawGet("/switch")},
			replies: []rawReply{{resp: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: foo\r\nConnection: Upgrade\r\n\r\n", close: true}},
		},
		{
			name:    "HTTP/1.0 response",
			reqs:    []string{rawGet("/old")},
			replies: []rawReply{{resp: "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nold ok", close: true}},
		},
		{
			name:    "response without Date",
			reqs:    []string{rawGet("/nodate")},
			replies: reply(okReply("no date")),
		},
		{
			name:    "upstream error status",
			reqs:    []string{rawGet("/busy")},
			replies: reply("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nRetry-After: 3\r\nContent-Length: 4\r\n\r\nbusy"),
		},
		{
			name:    "event stream with Content-Length",
			reqs:    []string{rawGet("/events")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 12\r\n\r\ndata: x\n\nxxx"),
		},
		{
			name:    "response head larger than the read buffer",
			reqs:    []string{rawGet("/bighead")},
			replies: reply(okReply("ok", "X-Big: "+strings.Repeat("b", 10<<10))),
		},
		{
			name:    "client Connection: close",
			reqs:    []string{rawGet("/bye", "Connection: close")},
			replies: reply(okReply("bye")),
		},
		{
			name: "client Connection: close, chunked response",
			reqs: []string{rawGet("/bye-chunked", "Connection: close")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"3\r\nbye\r\n0\r\n\r\n"),
		},
		{
			name: "Close header with Connection: close",
			reqs: []string{rawGet("/close-header", "Connection: close", "Close: yes")},
		},
		{
			name: "X-Forwarded-For lines",
			reqs: []string{rawGet("/xff", "X-Forwarded-For: 203.0.113.1", "x-forwarded-for: 198.51.100.2, 192.0.2.3")},
		},
		{
			name: "X-Forwarded-Host and -Proto present",
			reqs: []string{rawGet("/xf", "X-Forwarded-Host: public.example.com", "x-forwarded-proto: https")},
		},
		{
			name: "empty X-Forwarded-* values",
			reqs: []string{rawGet("/xf", "X-Forwarded-For:", "X-Forwarded-Host:", "X-Forwarded-Proto:")},
		},
		{name: "Host with a port, in upper case", reqs: []string{rawReqTo("App.Example.COM:8080", "GET", "/")}},
		{
			name: "Forwarded",
			reqs: []string{rawGet("/fwd", "Forwarded: for=192.0.2.60;proto=https;by=203.0.113.43")},
		},
		{name: "Te: trailers", reqs: []string{rawGet("/te", "TE: trailers")}},
		{name: "Te: gzip", reqs: []string{rawGet("/te", "Te: gzip")}},
		{name: "Te: gzip, trailers", reqs: []string{rawGet("/te", "Te: gzip", "Te: deflate, trailers")}},
		{
			name: "Proxy-Authorization and Proxy-Connection",
			reqs: []string{rawGet("/pa", "Proxy-Authorization: Basic Zm9vOmJhcg==", "Proxy-Connection: keep-alive")},
		},
		{name: "Keep-Alive", reqs: []string{rawGet("/ka", "Connection: keep-alive", "Keep-Alive: timeout=5, max=100")}},
		{name: "query string", reqs: []string{rawGet(`/search?q=a+b&x=%20y&pipe=|"&empty=&&`)}},
		{name: "empty query", reqs: []string{rawGet("/search?")}},
		{name: "query net/http cannot parse", reqs: []string{rawGet("/search?a=1;b=2"), rawGet("/search?q=%zz&r=%2")}},
		{name: "path characters kept as they are", reqs: []string{rawGet("/a//b/../c;p=1!$&'()*+,=:@[]~_-.")}},
		{name: "percent-encoded path", reqs: []string{rawGet("/a%2Fb/c%20d")}},
		{name: "more than 64 headers", reqs: []string{rawGet("/many", manyHeaders...)}, general: true},
		{
			name:    "1 MiB body",
			reqs:    []string{rawGet("/big")},
			replies: reply(okReply(big)),
			want:    fmt.Sprintf("%d bytes, sha256 %x", len(big), sha256.Sum256([]byte(big))),
		},
		// net/http writes a Content-Length: 0 for a body-less POST, PUT or PATCH only (and drops
		// the client's for GET and HEAD).
		{name: "GET with Content-Length: 0", reqs: []string{rawGet("/cl0", "Content-Length: 0")}},
		{name: "POST without a body", reqs: []string{rawReq("POST", "/post")}},
		{name: "PUT with Content-Length: 0", reqs: []string{rawReq("PUT", "/put", "content-length: 0")}},
		{name: "OPTIONS with Content-Length: 0", reqs: []string{rawReq("OPTIONS", "/opt", "Content-Length: 0")}},
		{name: "two User-Agent lines", reqs: []string{rawGet("/ua", "User-Agent: first/1", "User-Agent: second/2")}},
		{name: "empty User-Agent", reqs: []string{rawGet("/ua", "User-Agent:")}},
		{
			name:    "Pragma: no-cache without Cache-Control, both ways",
			reqs:    []string{rawGet("/pragma", "Pragma: no-cache")},
			replies: reply(okReply("ok", "Pragma: no-cache")),
		},
		{
			name:    "Pragma: no-cache with Cache-Control, both ways",
			reqs:    []string{rawGet("/pragma", "Pragma: no-cache", "Cache-Control: max-age=0")},
			replies: reply(okReply("ok", "Pragma: no-cache", "Cache-Control: private")),
		},
		{name: "path characters net/http escapes", reqs: []string{rawGet("/a|b/\"q\"/{x}/^/`/<>/\\/caf\xc3\xa9/#frag?x=|")}, general: true},
		{
			name:    "response header name that is not a token",
			reqs:    []string{rawGet("/badname")},
			replies: reply(okReply("ok", "Bad Name: v")),
		},
		{
			name:    "response header value with a control character",
			reqs:    []string{rawGet("/badvalue")},
			replies: reply(okReply("ok", "X-Bad: a\rb")),
		},
		{
			name:    "response header value with obs-text",
			reqs:    []string{rawGet("/obstext")},
			replies: reply(okReply("ok", "X-Text: caf\xc3\xa9")),
		},
		{name: "Pragma: No-Cache (not net/http's exact value)", reqs: []string{rawGet("/pragma", "Pragma: No-Cache")}},
		{
			name:    "response header line without a colon",
			reqs:    []string{rawGet("/nocolon")},
			replies: []rawReply{{resp: okReply("ok", "NoColonHere"), close: true}},
		},
		{
			name:    "status line without a reason phrase",
			reqs:    []string{rawGet("/noreason")},
			replies: reply("HTTP/1.1 200\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"),
		},
		{
			// A bare LF ends a line for net/http's parser (and the client's): the raw path must not
			// pass a status line on that hides a header from its own look at the head.
			name: "status line with a bare LF hiding a header",
			reqs: []string{rawGet("/hidden")},
			replies: reply("HTTP/1.1 200 OK\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\n" +
				"2\r\nok\r\n0\r\n\r\n"),
		},
		{
			name:    "response head with bare LF line ends",
			reqs:    []string{rawGet("/lf")},
			replies: reply("HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\nok"),
		},
		{
			name:    "two equal Content-Length lines",
			reqs:    []string{rawGet("/twocl")},
			replies: reply("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"),
		},
		{
			name: "several requests on one connection",
			reqs: []string{rawGet("/1"), rawReq("HEAD", "/2"), rawGet("/3")},
			replies: []rawReply{
				{resp: okReply("one")}, {resp: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\n"}, {resp: okReply("three")},
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
			if d := cmp.Diff(general, loops, cmpopts.IgnoreUnexported(seenRequest{}, clientAnswer{}), cmpopts.EquateEmpty()); d != "" {
				t.Errorf("event loops differ from the general path (-general +loops):\n%s", d)
			}
			if len(loops.Backend) > 0 && loops.Backend[0].viaRaw() == tc.general {
				t.Errorf("event loops: served on the raw path: %v, want %v (head %q)", loops.Backend[0].viaRaw(), !tc.general, loops.Backend[0].head)
			}
			for _, r := range general.Backend {
				if r.viaRaw() {
					t.Fatalf("FastHTTP1 off: the backend got %q, not net/http's head", r.head)
				}
			}
			if len(raw.Backend) == 0 {
				t.Fatal("the backend got no request")
			}
			if got := raw.Backend[0].viaRaw(); got == tc.general {
				t.Errorf("served on the raw path: %v, want %v (head %q)", got, !tc.general, raw.Backend[0].head)
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
func namedReply(name string) rawReply {
	return rawReply{resp: fmt.Sprintf("HTTP/1.1 200 %s\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", name, len(name), name)}
}

func TestRawPathHeaderMatchedRoutes(t *testing.T) {
	one := "1"
	canary := entry("canary", "app.example.com", "canary")
	canary.Headers = []routing.HeaderMatch{{Name: "X-Canary", Value: &one}}
	beta := entry("beta", "app.example.com", "beta")
	beta.Headers = []routing.HeaderMatch{{Name: "X-Beta"}} // present, any value
	// net/http takes Host out of the header map, so a route cannot match on it.
	byHost := entry("byhost", "hm.example.com", "canary")
	byHost.Headers = []routing.HeaderMatch{{Name: "Host"}}
	entries := []routing.Entry{entry("stable", "app.example.com", "stable"), canary, beta, entry("hm", "hm.example.com", "stable"), byHost}
	cases := []struct {
		name, req, want string
	}{
		{"no header", rawGet("/"), "stable"},
		{"matching header", rawGet("/", "X-Canary: 1"), "canary"},
		{"header name in lower case", rawGet("/", "x-canary: 1"), "canary"},
		{"other value", rawGet("/", "X-Canary: 2"), "stable"},
		{"one of two lines matches", rawGet("/", "X-Canary: 0", "X-CANARY: 1"), "canary"},
		{"a list is one value", rawGet("/", "X-Canary: 1, 2"), "stable"},
		{"value with padding", rawGet("/", "X-Canary: \t1 "), "canary"},
		{"present with an empty value", rawGet("/", "X-Beta:"), "beta"},
		{"Host is no header to match", rawReqTo("hm.example.com", "GET", "/"), "stable"},
	}
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			h := newHarness(t, entries, func(_ *proxy.Options, s *proxy.Server) { s.FastHTTP1 = fast })
			for _, svc := range []string{"stable", "canary", "beta"} {
				h.src.Set(key(svc), newRawBackend(t, func(int, *http.Request) rawReply { return namedReply(svc) }).ep)
			}
			c := dialRaw(t, h)
			for _, tc := range cases {
				a := c.do(tc.req)
				wantStatus := "200 OK"
				if fast {
					wantStatus = "200 " + tc.want // the raw path served it
				}
				if a.Err != "" || a.Body != tc.want || a.status != wantStatus {
					t.Errorf("%s: got %q %s %q, want %q from %s", tc.name, a.status, a.Err, a.Body, wantStatus, tc.want)
				}
			}
		})
	}
}

func TestRawPathReplacesStalePooledConnections(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		// One request per connection, then the backend closes it without a Connection: close:
		// every pooled connection is stale when the next request takes it.
		be := newRawBackend(t, func(int, *http.Request) rawReply { return rawReply{resp: okReply("once"), close: true} })
		h.src.Set(key("app"), be.ep)
		c := dialRaw(t, h)
		const n = 6
		for i := range n {
			if a := c.do(rawGet("/")); a.Err != "" || a.Code != http.StatusOK || a.Body != "once" {
				t.Fatalf("request %d: %+v, want 200", i, a)
			}
		}
		reqs := be.requests()
		if len(reqs) != n || be.connCount() != n {
			t.Errorf("the backend got %d requests over %d connections, want each of the %d once, over a connection of its own", len(reqs), be.connCount(), n)
		}
		if fast && !reqs[n-1].viaRaw() {
			t.Error("not served on the raw path")
		}
		if v := h.metric("httpscale_interceptor_upstream_errors_total", nil); v != 0 {
			t.Errorf("upstream errors = %v, want 0", v)
		}
	})
}

func TestRawPathBackendClosingAtOnceIs502(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				_ = c.Close()
			}
		}()
		h.src.Set(key("app"), endpointOf(t, "http://"+ln.Addr().String(), ""))
		c := dialRaw(t, h) // its deadline turns a hang into a failure
		const n = 3
		for i := range n {
			a := c.do(rawGet("/"))
			if a.Err != "" || a.Code != http.StatusBadGateway || a.Body != "Bad Gateway: upstream\n" {
				t.Fatalf("request %d: %+v, want 502 upstream", i, a)
			}
		}
		if v := h.metric("httpscale_interceptor_upstream_errors_total", map[string]string{"app": "ns/app", "reason": "upstream"}); v != n {
			t.Errorf("upstream errors = %v, want %d", v, n)
		}
		if v := h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": "5xx"}); v != n {
			t.Errorf("5xx responses = %v, want %d", v, n)
		}
		if in, _, req := h.count("ns/app"); in != 0 || req != n {
			t.Errorf("in flight %d, requests %d; want 0, %d", in, req, n)
		}
	})
}

func TestRawPathUpstreamBreakingMidBody(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		be := newRawBackend(t, func(i int, _ *http.Request) rawReply {
			if i == 0 { // 10 bytes promised, 4 sent
				return rawReply{resp: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\npart", close: true}
			}
			return rawReply{resp: okReply("whole")}
		})
		h.src.Set(key("app"), be.ep)
		c := dialRaw(t, h)
		if a := c.do(rawGet("/broken")); a.Err == "" {
			t.Fatalf("a broken upstream body was passed on as a complete response: %+v", a)
		}
		if !c.closed() {
			t.Error("the client connection stayed open after a short body")
		}
		// The status was sent before the body broke: it is counted as the 200 it was, on both
		// paths, and nothing is left in flight.
		testenv.Eventually(t, 10*time.Second, "the broken request to be recorded", func() bool {
			return h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": "2xx"}) == 1
		})
		if v := h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": "5xx"}); v != 0 {
			t.Errorf("5xx responses = %v, want 0", v)
		}
		testenv.Eventually(t, 10*time.Second, "nothing in flight", func() bool { in, _, _ := h.count("ns/app"); return in == 0 })
		// The broken upstream connection is not reused.
		if a := dialRaw(t, h).do(rawGet("/after")); a.Err != "" || a.Code != http.StatusOK || a.Body != "whole" {
			t.Errorf("request after the break: %+v", a)
		}
		if n := be.connCount(); n != 2 {
			t.Errorf("upstream connections = %d, want 2", n)
		}
		if _, _, req := h.count("ns/app"); req != 2 {
			t.Errorf("requests = %d, want 2", req)
		}
	})
}

// hungRequest sends a request the backend never answers and returns once it is in flight.
func hungRequest(t *testing.T, fast bool, mod func(*proxy.Server)) (*harness, *rawBackend, *rawClient) {
	t.Helper()
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, func(_ *proxy.Options, s *proxy.Server) {
		s.FastHTTP1 = fast
		if mod != nil {
			mod(s)
		}
	})
	arrived := make(chan struct{}, 1)
	be := newRawBackend(t, func(int, *http.Request) rawReply {
		arrived <- struct{}{}
		return rawReply{hang: true}
	})
	h.src.Set(key("app"), be.ep)
	c := dialRaw(t, h)
	if _, err := io.WriteString(c.c, rawGet("/hang")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the backend")
	}
	if in, _, _ := h.count("ns/app"); in != 1 {
		t.Fatalf("in flight = %d, want 1", in)
	}
	if fast && !be.requests()[0].viaRaw() {
		t.Fatal("not served on the raw path")
	}
	return h, be, c
}

// upstreamClosed waits for the proxy to close the hung request's upstream connection.
func upstreamClosed(t *testing.T, be *rawBackend) {
	t.Helper()
	select {
	case <-be.hungUp:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection of the hung request was not closed")
	}
}

func TestRawPathDrainCutsOffHungRequest(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			h, be, c := hungRequest(t, fast, func(s *proxy.Server) { s.DrainTimeout = 300 * time.Millisecond })
			start := time.Now()
			h.stop()
			select {
			case err := <-h.stopped:
				if err != nil {
					t.Errorf("Start returned %v", err)
				}
				h.stopped <- nil // for the harness cleanup
			case <-time.After(5 * time.Second):
				t.Fatal("Start did not return after the drain timeout")
			}
			if d := time.Since(start); d < 300*time.Millisecond {
				t.Errorf("Start returned after %v, before the drain timeout", d)
			}
			upstreamClosed(t, be)
			if resp, err := http.ReadResponse(c.br, nil); err == nil {
				t.Errorf("the cut-off request got a response: %s", resp.Status)
			}
			testenv.Eventually(t, 10*time.Second, "nothing in flight", func() bool { in, _, _ := h.count("ns/app"); return in == 0 })
			testenv.Eventually(t, 10*time.Second, "the cut-off request to be recorded as 499", func() bool {
				return h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": "499"}) == 1
			})
			if v := h.metric("httpscale_interceptor_upstream_errors_total", nil); v != 0 {
				t.Errorf("upstream errors = %v, want 0", v)
			}
		})
	}
}

func TestRawPathClientGoneClosesUpstream(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			h, be, c := hungRequest(t, fast, nil)
			_ = c.c.Close()
			upstreamClosed(t, be)
			testenv.Eventually(t, 10*time.Second, "nothing in flight", func() bool { in, _, _ := h.count("ns/app"); return in == 0 })
			testenv.Eventually(t, 10*time.Second, "the request to be recorded as 499", func() bool {
				return h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": "499"}) == 1
			})
			if v := h.metric("httpscale_interceptor_upstream_errors_total", nil); v != 0 {
				t.Errorf("upstream errors = %v, want 0", v)
			}
		})
	}
}

func TestRawPathMetricsAndCounts(t *testing.T) {
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
	be := newRawBackend(t, func(_ int, r *http.Request) rawReply {
		switch r.URL.Path {
		case "/missing":
			return rawReply{resp: "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\nmissing"}
		case "/busy":
			return rawReply{resp: "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nbusy"}
		}
		return rawReply{resp: okReply("ok")}
	})
	h.src.Set(key("app"), be.ep)
	responses := func(code string) float64 {
		return h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": code})
	}
	c := dialRaw(t, h)
	const n = 5
	for i := 1; i <= n; i++ {
		if a := c.do(rawGet("/")); a.Err != "" || a.Code != http.StatusOK || a.Body != "ok" {
			t.Fatalf("request %d: %+v", i, a)
		}
		// The raw path records a request before it sends the response: no waiting.
		in, held, req := h.count("ns/app")
		if got := responses("2xx"); got != float64(i) || in != 0 || held != 0 || req != uint64(i) {
			t.Errorf("after %d requests: 2xx %v, in flight %d, held %d, requests %d", i, got, in, held, req)
		}
	}
	if a := c.do(rawGet("/missing")); a.Code != http.StatusNotFound || a.Body != "missing" {
		t.Errorf("/missing: %+v", a)
	}
	if a := c.do(rawGet("/busy")); a.Code != http.StatusServiceUnavailable || a.Body != "busy" {
		t.Errorf("/busy: %+v", a)
	}
	got := map[string]float64{
		"2xx": responses("2xx"), "4xx": responses("4xx"), "5xx": responses("5xx"), "499": responses("499"),
		"duration observations": h.metric("httpscale_interceptor_request_duration_seconds", map[string]string{"app": "ns/app"}),
		"requests metric":       h.metric("httpscale_interceptor_requests_total", map[string]string{"app": "ns/app"}),
		"in flight metric":      h.metric("httpscale_interceptor_in_flight", map[string]string{"app": "ns/app"}),
		"upstream errors":       h.metric("httpscale_interceptor_upstream_errors_total", nil),
		"cold starts":           h.metric("httpscale_interceptor_cold_starts_total", map[string]string{"app": "ns/app"}),
	}
	want := map[string]float64{
		"2xx": n, "4xx": 1, "5xx": 1, "499": 0, "duration observations": n + 2, "requests metric": n + 2,
		"in flight metric": 0, "upstream errors": 0, "cold starts": 0,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("metrics (-want +got):\n%s", d)
	}
	reqs := be.requests()
	for i, r := range reqs {
		if !r.viaRaw() {
			t.Errorf("request %d not served on the raw path", i)
		}
	}
	if len(reqs) != n+2 || be.connCount() != 1 {
		t.Errorf("the backend got %d requests over %d connections, want %d over 1", len(reqs), be.connCount(), n+2)
	}
}

// TestEventLoopsServeEveryApp: requests to apps with timeouts, Service-addressed apps and cold apps
// are served on the event loops too, as an app without such settings in the same proxy.
func TestEventLoopsServeEveryApp(t *testing.T) {
	withTimeout := func(set func(*routing.Timeouts)) routing.Entry {
		e := entry("app", "app.example.com", "app")
		set(&e.Timeouts)
		return e
	}
	viaService := entry("app", "app.example.com", "app")
	viaService.ViaService = true
	cases := []struct {
		name  string
		entry routing.Entry
		cold  bool // no ready endpoint when the request arrives
	}{
		{"request timeout", withTimeout(func(to *routing.Timeouts) { to.Request = time.Minute }), false},
		{"response header timeout", withTimeout(func(to *routing.Timeouts) { to.ResponseHeader = time.Minute }), false},
		{"via the Service", viaService, false},
		{"cold app", entry("app", "app.example.com", "app"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Created before the harness, so that the dialer can lead the Service's name to it.
			be := newRawBackend(t, func(_ int, r *http.Request) rawReply { return namedReply(r.Host) })
			target := be.ln.Addr().String()
			h := newHarness(t, []routing.Entry{tc.entry, entry("other", "other.example.com", "other")}, func(o *proxy.Options, _ *proxy.Server) {
				o.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					if strings.HasSuffix(addr, ".svc.cluster.local:80") {
						addr = target // the Service's name leads to the backend
					}
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}
			})
			h.src.Set(key("other"), be.ep)
			c := dialRaw(t, h)
			if a := c.do(rawReqTo("other.example.com", "GET", "/")); a.Err != "" || a.status != "200 other.example.com" {
				t.Fatalf("other app: %+v %q, want it served on the event loops", a, a.status)
			}
			var a clientAnswer
			if tc.cold {
				if _, err := io.WriteString(c.c, rawGet("/")); err != nil {
					t.Fatal(err)
				}
				ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
				defer stop()
				if err := h.src.WaitWaiting(ctx, key("app"), 1); err != nil {
					t.Fatalf("the request was not held: %v", err)
				}
				h.src.Set(key("app"), be.ep)
				a = c.do("") // the response to the request already sent
			} else {
				h.src.Set(key("app"), be.ep)
				a = c.do(rawGet("/"))
			}
			if a.Err != "" || a.Code != http.StatusOK || a.Body != "app.example.com" {
				t.Fatalf("got %+v", a)
			}
			reqs := be.requests()
			if last := reqs[len(reqs)-1]; !last.viaRaw() || a.status != "200 app.example.com" {
				t.Errorf("served by net/http (status %q, head %q), want the event loops", a.status, last.head)
			}
			if tc.cold && a.Wire.Get(proxy.HeaderColdStart) != "true" {
				t.Errorf("the held request's response lacks %s: %v", proxy.HeaderColdStart, a.Wire)
			}
		})
	}
}

// A backend restarted on the same address leaves every pooled connection closed: the next request
// still gets its answer (the first stale connection drops the others, the retry dials).
func TestRestartedBackendDoesNotExhaustRetries(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		release := make(chan struct{})
		var waiting sync.WaitGroup
		s, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				waiting.Done()
				<-release
			}
			_, _ = io.WriteString(w, "ok")
		})
		h.src.Set(key("app"), ep)
		// Eight requests at once leave eight connections in the pool.
		const n = 8
		waiting.Add(n)
		codes := make(chan int, n)
		for range n {
			go func() {
				code, _, _, err := h.get(context.Background(), "app.example.com", "/slow")
				if err != nil {
					code = -1
				}
				codes <- code
			}()
		}
		waiting.Wait()
		close(release)
		for range n {
			if code := <-codes; code != http.StatusOK {
				t.Fatalf("filling the pool: got %d", code)
			}
		}
		s.CloseClientConnections() // the "restart": every upstream connection is closed
		for i := range 3 {
			if code, body, _ := h.mustGet("app.example.com", "/"); code != http.StatusOK || body != "ok" {
				t.Fatalf("request %d after the restart: %d %q, want 200", i, code, body)
			}
		}
	})
}

// Bytes an upstream sends beyond its response (more than Content-Length, a body with a HEAD answer)
// must never become another request's response: the connection is not reused.
func TestSurplusUpstreamBytesAreNotTheNextResponse(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		be := newRawBackend(t, func(_ int, r *http.Request) rawReply {
			switch r.URL.Path {
			case "/two": // a second response nobody asked for, in the same write
				return rawReply{resp: okReply("ok") + okReply("EVIL")}
			case "/head": // a body with the HEAD answer
				return rawReply{resp: okReply("body of HEAD")}
			}
			return rawReply{resp: okReply("for " + r.URL.Path)}
		})
		h.src.Set(key("app"), be.ep)
		if a := dialRaw(t, h).do(rawGet("/two")); a.Code != http.StatusOK || a.Body != "ok" {
			t.Fatalf("GET /two: %+v", a)
		}
		if a := dialRaw(t, h).do(rawReq("HEAD", "/head")); a.Code != http.StatusOK || a.Body != "" {
			t.Fatalf("HEAD /head: %+v", a)
		}
		c := dialRaw(t, h) // another client
		for _, p := range []string{"/b1", "/b2", "/b3"} {
			if a := c.do(rawGet(p)); a.Err != "" || a.Code != http.StatusOK || a.Body != "for "+p {
				t.Errorf("GET %s after the surplus: %+v, want 200 %q", p, a, "for "+p)
			}
		}
	})
}

// A request that is not replayable (POST without an Idempotency-Key) is never sent twice: when the
// upstream closes the connection after processing it without answering (here a handler that panics
// after its side effect), the client gets 502 and the side effect happened once.
func TestNonReplayableRequestIsNotSentTwice(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		var charges, gets atomic.Int32
		s, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				charges.Add(1) // the side effect
				panic(http.ErrAbortHandler)
			}
			gets.Add(1)
			_, _ = io.WriteString(w, "ok")
		})
		s.Config.ErrorLog = log.New(io.Discard, "", 0)
		h.src.Set(key("app"), ep)
		c := dialRaw(t, h)
		if a := c.do(rawGet("/warm")); a.Code != http.StatusOK { // leaves a pooled upstream connection
			t.Fatalf("GET /warm: %+v", a)
		}
		c = dialRaw(t, h)
		if a := c.do(rawReq("POST", "/charge")); a.Code != http.StatusBadGateway {
			t.Errorf("POST /charge: %+v, want 502", a)
		}
		if n := charges.Load(); n != 1 {
			t.Errorf("the POST reached the upstream %d times, want once", n)
		}
		// A GET is replayable: the same failure on a pooled connection is retried (here the
		// upstream answers; the retry machinery itself is TestRawPathReplacesStalePooledConnections).
		if a := c.do(rawGet("/after")); a.Code != http.StatusOK || a.Body != "ok" {
			t.Errorf("GET /after: %+v", a)
		}
	})
}

// A client that gives up while a connect to an unresponsive pod is pending does not get the
// healthy pods tried next marked bad: once the request's context ended the loop stops.
func TestClientGoneDuringConnectMarksNoOtherEndpointBad(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			const blackhole = "198.18.0.99:80" // never dialled for real: the test dialer holds it
			var mu sync.Mutex
			dialed := map[string]int{}
			h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, func(o *proxy.Options, s *proxy.Server) {
				s.FastHTTP1 = fast
				s.WatchClientAfter = 10 * time.Millisecond
				o.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					mu.Lock()
					dialed[addr]++
					mu.Unlock()
					if addr == blackhole {
						<-ctx.Done()
						return nil, &net.OpError{Op: "dial", Net: network, Err: ctx.Err()}
					}
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}
			})
			good := newRawBackend(t, func(int, *http.Request) rawReply { return rawReply{resp: okReply("good")} })
			h.src.Set(key("app"), endpointOf(t, "http://"+blackhole, ""), good.ep)
			// Round robin starts at the first endpoint: the blackhole. The client leaves.
			c := dialRaw(t, h)
			_, _ = io.WriteString(c.c, rawGet("/"))
			testenv.Eventually(t, 10*time.Second, "the connect to the unresponsive pod", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return dialed[blackhole] == 1
			})
			_ = c.c.Close()
			testenv.Eventually(t, 10*time.Second, "the request to end", func() bool { in, _, _ := h.count("ns/app"); return in == 0 })
			mu.Lock()
			got := dialed[good.ep.Addr()]
			mu.Unlock()
			if got != 0 {
				t.Errorf("the healthy endpoint was dialled %d times for a client that had left, want 0", got)
			}
			// It still serves (it was not marked bad), and the blackhole is tried again only
			// because round robin comes back to it.
			for i := range 2 {
				if a := dialRaw(t, h).do(rawGet("/")); a.Code == http.StatusOK && a.Body == "good" {
					break
				} else if i == 1 {
					t.Errorf("the healthy endpoint does not answer: %+v", a)
				}
			}
		})
	}
}

// An upstream that times out an idle keep-alive connection with a 408 before closing it (as some
// servers do): the pooled connection is checked before use and dropped, so the next request gets
// its own answer, not the 408.
func TestIdleConnectionClosedWith408IsNotUsed(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		timedOut := make(chan struct{}, 4)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					req, err := http.ReadRequest(bufio.NewReader(c))
					if err != nil {
						return
					}
					_, _ = io.WriteString(c, okReply("for "+req.URL.Path))
					time.Sleep(100 * time.Millisecond) // the upstream's idle timeout
					_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
					timedOut <- struct{}{}
				}()
			}
		}()
		h.src.Set(key("app"), endpointOf(t, "http://"+ln.Addr().String(), ""))
		if a := dialRaw(t, h).do(rawGet("/first")); a.Code != http.StatusOK || a.Body != "for /first" {
			t.Fatalf("GET /first: %+v", a)
		}
		<-timedOut
		time.Sleep(50 * time.Millisecond) // the 408 and the close are in the proxy's socket
		if a := dialRaw(t, h).do(rawGet("/second")); a.Code != http.StatusOK || a.Body != "for /second" {
			t.Errorf("GET /second after the idle 408: %+v, want 200 %q", a, "for /second")
		}
	})
}

// onBothPaths runs f as subtests with a harness routing app.example.com to the app "ns/app"
// (Service app) on the raw path (Server.FastHTTP1 on) served by event loops (fast=true) and by
// the connection's goroutine (fast=true,loops=false), and on the general path (fast=false).
func onBothPaths(t *testing.T, f func(t *testing.T, h *harness, fast bool)) {
	onBothPathsWith(t, nil, f)
}

// onBothPathsWith is onBothPaths with the options and the server changed by mod (when set).
func onBothPathsWith(t *testing.T, mod func(*proxy.Options, *proxy.Server), f func(t *testing.T, h *harness, fast bool)) {
	for _, m := range []struct {
		name  string
		fast  bool
		loops int
	}{{"fast=true", true, 2}, {"fast=false", false, 0}} {
		t.Run(m.name, func(t *testing.T) {
			h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, func(o *proxy.Options, s *proxy.Server) {
				s.FastHTTP1, s.EventLoops = m.fast, m.loops
				if mod != nil {
					mod(o, s)
				}
			})
			f(t, h, m.fast)
		})
	}
}
