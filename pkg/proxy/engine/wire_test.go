package engine

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Tests of the raw path (raw.go): what a backend and a client see must be what the general path
// (net/http's server and the ReverseProxy, Server.FastHTTP1 off) gives them.

// rawBackend is a loopback HTTP/1.1 upstream on raw TCP. It reads every request head itself, so
// that it can record the exact bytes, parses it with http.ReadRequest and answers with the bytes
// its reply function returns.
type rawBackend struct {
	ln    net.Listener
	ep    string
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
	b.ep = endpointOf(t, "http://"+ln.Addr().String())
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

// readRequestHead reads one request head, up to and including its empty line, exactly as sent.
func readRequestHead(br *bufio.Reader) (string, error) {
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
		head, err := readRequestHead(br)
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

// onBothPaths runs f as subtests with a harness routing app.example.com to the app "ns/app"
// (Service app) on the raw path (Server.FastHTTP1 on) served by event loops (fast=true) and by
// the connection's goroutine (fast=true,loops=false), and on the general path (fast=false).
func onBothPaths(t *testing.T, f func(t *testing.T, h *harness, fast bool)) {
	onBothPathsWith(t, nil, f)
}

// onBothPathsWith is onBothPaths with the options and the server changed by mod (when set).
func onBothPathsWith(t *testing.T, mod func(*Options, *Server), f func(t *testing.T, h *harness, fast bool)) {
	onBothPathsRouting(t, []route{entry("app", "app.example.com", "app")}, mod, f)
}

// onBothPathsRouting is onBothPathsWith with the harness's routes given: they are read by the loops
// without a lock, so they are set before the harness starts.
func onBothPathsRouting(t *testing.T, routes []route, mod func(*Options, *Server), f func(t *testing.T, h *harness, fast bool)) {
	for _, m := range []struct {
		name  string
		fast  bool
		loops int
	}{{"fast=true", true, 2}, {"fast=false", false, 0}} {
		t.Run(m.name, func(t *testing.T) {
			h := newHarness(t, slices.Clone(routes), func(o *Options, s *Server) {
				s.FastHTTP1, s.EventLoops = m.fast, m.loops
				if mod != nil {
					mod(o, s)
				}
			})
			f(t, h, m.fast)
		})
	}
}
