//go:build linux

package engine

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
)

// bodyBackend is an upstream that reads each request's Content-Length body and answers with what it
// got: method, path, length and digest of the body, and whether the head came as the raw path
// writes it (the client's lower-case "host:"). A request to /early is answered 413 at once, before
// its body is read; the body is then read and the connection serves on, so that a proxy that
// reused it without having sent the whole body would have its next request taken for body bytes.
type bodyBackend struct {
	ln net.Listener
	mu sync.Mutex
	// heads of the requests seen, in order.
	heads []string
	wg    sync.WaitGroup
}

func newBodyBackend(t *testing.T) *bodyBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &bodyBackend{ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			b.wg.Add(1)
			go b.serve(c)
		}
	}()
	t.Cleanup(func() { _ = ln.Close(); b.wg.Wait() })
	return b
}

func (b *bodyBackend) serve(c net.Conn) {
	defer b.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		head, err := proxytest.ReadHead(br)
		if err != nil {
			return
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(head)))
		if err != nil {
			return
		}
		b.mu.Lock()
		b.heads = append(b.heads, head)
		b.mu.Unlock()
		if req.URL.Path == "/early" {
			_, _ = io.WriteString(c, "HTTP/1.1 413 Request Entity Too Large\r\nContent-Length: 5\r\n\r\nearly")
			if _, err := io.CopyN(io.Discard, br, req.ContentLength); err != nil {
				return
			}
			continue
		}
		h := sha256.New()
		n, err := io.CopyN(h, br, req.ContentLength)
		if err != nil {
			return // an incomplete request gets no answer
		}
		raw := strings.Contains(head, "\r\nhost: ")
		body := fmt.Sprintf("%s %s %d %x raw=%v", req.Method, req.URL.Path, n, h.Sum(nil)[:8], raw)
		if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
			return
		}
	}
}

func (b *bodyBackend) addr() string { return b.ln.Addr().String() }

// bodyWant is what bodyBackend answers for a body received whole.
func bodyWant(method, path string, body []byte, raw bool) string {
	sum := sha256.Sum256(body)
	return fmt.Sprintf("%s %s %d %x raw=%v", method, path, len(body), sum[:8], raw)
}

func postReq(method, path string, body []byte) string {
	return fmt.Sprintf("%s %s HTTP/1.1\r\nhost: app.example.com\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n%s",
		method, path, len(body), body)
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + i%23)
	}
	return b
}

// Request bodies of every size are relayed by the event loop whole, in order with the requests
// around them on one connection, pipelined or not; a body larger than the sockets' buffers is
// written while the upstream reads it.
func TestEventLoopsRelayRequestBodies(t *testing.T) {
	h := loopHarness(t, 1, nil)
	be := newBodyBackend(t)
	h.src.Set(key("app"), endpointOf(t, "http://"+be.addr()))
	c := dialRaw(t, h)
	for _, tc := range []struct {
		method string
		size   int
	}{{"POST", 1}, {"PUT", 5000}, {"POST", 16 << 10}, {"PATCH", 100000}, {"POST", 3 << 20}, {"GET", 70000}} {
		body := pattern(tc.size)
		path := fmt.Sprintf("/%s-%d", strings.ToLower(tc.method), tc.size)
		var a clientAnswerT
		done := make(chan struct{})
		go func() { defer close(done); a = readAnswer(c, tc.method) }()
		if _, err := io.WriteString(c.Conn(), postReq(tc.method, path, body)); err != nil {
			t.Fatal(err)
		}
		<-done
		if want := bodyWant(tc.method, path, body, true); a.code != 200 || a.body != want || a.err != nil {
			t.Errorf("%s of %d bytes: got %d %q (%v), want 200 %q", tc.method, tc.size, a.code, a.body, a.err, want)
		}
	}
	// Pipelined in one write: a body, a request without one, bodies larger than the request buffer
	// followed by a request (the read of the end of a body also takes the start of what follows).
	one, two, three := pattern(7), pattern(9000), pattern(20000)
	if _, err := io.WriteString(c.Conn(), postReq("POST", "/p1", one)+proxytest.RawGet("/p2")+postReq("POST", "/p3", two)+
		postReq("PUT", "/p4", three)+proxytest.RawGet("/p5")+postReq("POST", "/p6", three)+postReq("POST", "/p7", one)); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{bodyWant("POST", "/p1", one, true), bodyWant("GET", "/p2", nil, true), bodyWant("POST", "/p3", two, true),
		bodyWant("PUT", "/p4", three, true), bodyWant("GET", "/p5", nil, true), bodyWant("POST", "/p6", three, true),
		bodyWant("POST", "/p7", one, true)} {
		if a := readAnswer(c, "POST"); a.code != 200 || a.body != want {
			t.Errorf("pipelined: got %d %q (%v), want 200 %q", a.code, a.body, a.err, want)
		}
	}
}

// An upstream that answers before it read the request body: the client gets that answer and then
// its connection is closed (the rest of its body must not be read as a request), and the upstream
// connection, which holds part of a request, is not used again.
func TestEventLoopsAnswerBeforeTheBodyClosesBothConnections(t *testing.T) {
	h := loopHarness(t, 1, nil)
	be := newBodyBackend(t)
	h.src.Set(key("app"), endpointOf(t, "http://"+be.addr()))
	c := dialRaw(t, h)
	req := postReq("POST", "/early", pattern(1<<20))
	if _, err := io.WriteString(c.Conn(), req[:len(req)-(1<<20)+1000]); err != nil { // 1000 of the body's bytes
		t.Fatal(err)
	}
	a := readAnswer(c, "POST")
	if a.err == nil && (a.code != http.StatusRequestEntityTooLarge || a.body != "early") {
		t.Errorf("got %d %q, want the upstream's 413 or nothing", a.code, a.body)
	}
	_ = c.Conn().SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c.Reader()); err != nil {
		t.Errorf("the client connection was not closed after the early answer: %v", err)
	}
	// Another client is answered on a connection of its own.
	c2 := dialRaw(t, h)
	small := pattern(10)
	if _, err := io.WriteString(c2.Conn(), postReq("POST", "/after", small)); err != nil {
		t.Fatal(err)
	}
	if a, want := readAnswer(c2, "POST"), bodyWant("POST", "/after", small, true); a.code != 200 || a.body != want {
		t.Errorf("next request: got %d %q (%v), want 200 %q", a.code, a.body, a.err, want)
	}
}

type clientAnswerT struct {
	code int
	body string
	err  error
}

func readAnswer(c *proxytest.RawClient, method string) clientAnswerT {
	resp, err := http.ReadResponse(c.Reader(), &http.Request{Method: method})
	if err != nil {
		return clientAnswerT{err: err}
	}
	b, err := io.ReadAll(resp.Body)
	return clientAnswerT{code: resp.StatusCode, body: string(b), err: err}
}
