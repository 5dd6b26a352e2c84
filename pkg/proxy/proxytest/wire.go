package proxytest

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
)

// Wire-level helpers of the engine's and the request logic's tests: a loopback backend that records
// each request head exactly as sent, and a client on raw TCP that reads each answer as received.

// RawBackend is a loopback HTTP/1.1 upstream on raw TCP. It reads every request head itself, so
// that it can record the exact bytes, parses it with http.ReadRequest and answers with the bytes
// its reply function returns.
type RawBackend struct {
	// Addr is the backend's host:port.
	Addr string
	// HungUp receives the connection index of a held request (Reply.Hang) whose connection the
	// proxy closed.
	HungUp chan int

	ln    net.Listener
	reply func(i int, r *http.Request) Reply

	mu     sync.Mutex
	closed bool
	stop   chan struct{}
	conns  []net.Conn
	seen   []SeenRequest
	wg     sync.WaitGroup
}

// Reply is a backend's answer to one request.
type Reply struct {
	Resp  string // written as is
	Close bool   // close the connection after writing Resp, without saying so
	Hang  bool   // never answer: hold the connection until the proxy closes it or the test ends
	// Late is written LateAfter after Resp, on the same connection, before the next request is
	// read: bytes a hostile upstream sends after a complete response.
	Late string
}

// LateAfter is when a Reply's Late bytes follow its response.
const LateAfter = 20 * time.Millisecond

// SeenRequest is one request as the backend received it.
type SeenRequest struct {
	Conn       int // index of the upstream connection, in accept order
	Method     string
	RequestURI string
	Proto      string
	Host       string
	Header     http.Header // as http.ReadRequest returns it (no Host; Pragma: no-cache implies Cache-Control)
	// Wire is every header line as sent, Host included, under canonical keys, with nothing added:
	// textproto.Reader.ReadMIMEHeader of the head.
	Wire http.Header
	// head is the exact bytes; unexported so that comparisons can leave it out
	// (cmpopts.IgnoreUnexported): the event loops keep the client's header case and order.
	head string
}

// Head is the request head exactly as the backend received it.
func (s SeenRequest) Head() string { return s.head }

// ViaLoops reports whether the request reached the backend from the event loops: they pass the
// client's header lines on as they came (RawReq sends a lower-case "host:"), where net/http writes
// "Host:".
func (s SeenRequest) ViaLoops() bool { return strings.Contains(s.head, "\r\nhost: ") }

// NewRawBackend starts a backend, closed when the test ends; create it after the proxy under test,
// so that it closes first and no request is left waiting for it when the proxy drains.
func NewRawBackend(t testing.TB, reply func(i int, r *http.Request) Reply) *RawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &RawBackend{Addr: ln.Addr().String(), ln: ln, reply: reply, HungUp: make(chan int, 16), stop: make(chan struct{})}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.Close)
	return b
}

func (b *RawBackend) accept() {
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

// ReadHead reads one request head, up to and including its empty line, exactly as sent.
func ReadHead(br *bufio.Reader) (string, error) {
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

func (b *RawBackend) serve(c net.Conn, n int) {
	defer b.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		head, err := ReadHead(br)
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
		b.seen = append(b.seen, SeenRequest{
			Conn: n, Method: req.Method, RequestURI: req.RequestURI, Proto: req.Proto, Host: req.Host,
			Header: req.Header, Wire: http.Header(wire), head: head,
		})
		b.mu.Unlock()
		r := b.reply(i, req)
		if r.Hang {
			_, _ = br.ReadByte() // returns when the connection is closed
			select {
			case <-b.stop:
			default:
				b.HungUp <- n
			}
			return
		}
		if _, err := io.WriteString(c, r.Resp); err != nil || r.Close {
			return
		}
		if r.Late != "" {
			time.Sleep(LateAfter)
			if _, err := io.WriteString(c, r.Late); err != nil {
				return
			}
		}
	}
}

// Close stops the backend and closes its connections.
func (b *RawBackend) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
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

// Refuse makes b refuse new connections and closes the ones open (the proxy's pooled ones), while
// the test still lists it ready: a pod that died without its endpoint being withdrawn yet.
func (b *RawBackend) Refuse() {
	b.mu.Lock()
	conns := b.conns
	b.mu.Unlock()
	_ = b.ln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
}

// Requests returns what the backend received so far.
func (b *RawBackend) Requests() []SeenRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]SeenRequest(nil), b.seen...)
}

// ConnCount is how many connections the backend accepted.
func (b *RawBackend) ConnCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.conns)
}

// RawClient is a client connection on raw TCP.
type RawClient struct {
	t   testing.TB
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

// NewRawClient reads and writes requests on c.
func NewRawClient(t testing.TB, c net.Conn) *RawClient {
	rec := &recorder{r: c}
	return &RawClient{t: t, c: c, rec: rec, br: bufio.NewReader(rec)}
}

// Conn is the client's connection, for a test that writes or reads on it itself.
func (rc *RawClient) Conn() net.Conn { return rc.c }

// Reader reads the client's connection; what Do reads goes through it.
func (rc *RawClient) Reader() *bufio.Reader { return rc.br }

// Answer is one response as the client received it.
type Answer struct {
	Err  string // "" for a complete response, else what went wrong (no response, truncated body)
	Code int
	// Wire is every header line as received under canonical keys, with nothing added (the client's
	// parser adds Cache-Control for Pragma: no-cache). A Date the proxy added is "<now>".
	Wire    http.Header
	TE      []string
	Body    string // long bodies as length and digest
	Trailer http.Header
	Close   bool // the response said Connection: close
	// status is unexported so that comparisons can leave it out: the reason phrase is the
	// upstream's on the event loops, net/http's else.
	status string
}

// Status is the status line's code and reason phrase, as http.Response.Status has them.
func (a Answer) Status() string { return a.status }

// FixedDate is the Date the tests' backends send when they send one; the client must get it.
const FixedDate = "Mon, 02 Jan 2006 15:04:05 GMT"

// Do sends one request (raw bytes) and reads the response.
func (rc *RawClient) Do(req string) Answer {
	rc.t.Helper()
	if _, err := io.WriteString(rc.c, req); err != nil {
		return Answer{Err: "no response (write failed)"}
	}
	method, _, _ := strings.Cut(req, " ")
	rc.rec.buf = append(rc.rec.buf[:0], rc.rec.buf[len(rc.rec.buf)-rc.br.Buffered():]...)
	resp, err := http.ReadResponse(rc.br, &http.Request{Method: method})
	if err != nil {
		return Answer{Err: "no response"}
	}
	a := Answer{Code: resp.StatusCode, TE: resp.TransferEncoding, Close: resp.Close, status: resp.Status}
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
	if d := a.Wire["Date"]; len(d) == 1 && d[0] != FixedDate {
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

// Closed reports whether the proxy closed the connection: a probe request gets no response.
func (rc *RawClient) Closed() bool {
	return rc.Do(RawGet("/probe")).Err != ""
}

// RawGet is a GET request for path to app.example.com with extra header lines. Host comes first,
// in lower case: the event loops pass that on as is, net/http as "Host" (see
// SeenRequest.ViaLoops).
func RawGet(path string, headers ...string) string { return RawReq("GET", path, headers...) }

// RawReq is RawGet with another method.
func RawReq(method, path string, headers ...string) string {
	return RawReqTo("app.example.com", method, path, headers...)
}

// RawReqTo is RawReq to another host.
func RawReqTo(host, method, path string, headers ...string) string {
	var b strings.Builder
	b.WriteString(method + " " + path + " HTTP/1.1\r\nhost: " + host + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// OKReply is a 200 with Content-Length and Content-Type, then extra header lines. Every reply with
// a body names its Content-Type: net/http's server sniffs one when there is none, the event loops'
// writer does not.
func OKReply(body string, headers ...string) string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n" + body)
	return b.String()
}
