package proxy_test

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
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

// Wire-level helpers of the request logic's tests on the engine's paths: a loopback backend that
// records each request head exactly as sent, and a client on raw TCP that reads each answer as
// received.

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
	// head is the exact bytes; not compared, the event loops keep the client's header case and order.
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

// viaLoops reports whether the request reached the backend from the event loops: they pass the
// client's header lines on as they came (the tests send a lower-case "host:"), where net/http
// writes "Host:".
func (s seenRequest) viaLoops() bool { return strings.Contains(s.head, "\r\nhost: ") }

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
	status  string // the reason phrase is the upstream's on the event loops, net/http's else: not compared
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
// event loops pass that on as is, net/http as "Host" (see seenRequest.viaLoops).
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
// a body names its Content-Type: net/http's server sniffs one when there is none, the event loops'
// writer does not.
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
