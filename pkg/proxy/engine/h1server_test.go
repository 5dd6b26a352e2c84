package engine

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

// fastServer runs a Server with the fast path in front of h on loopback and returns its address
// and a function that starts the drain and waits for Start to return.
func fastServer(t *testing.T, h http.Handler, mod func(*Server)) (string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Name: "test", Listener: ln, Handler: h, H2C: true, FastHTTP1: true, DrainTimeout: 10 * time.Second, Log: testr.New(t)}
	if mod != nil {
		mod(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(20 * time.Second):
				stopErr = errors.New("server did not stop")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = stop() })
	return ln.Addr().String(), stop
}

// pathEcho answers with the path it served, and in X-Path whether the fast path served it.
var pathEcho = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, fast := w.(*h1Response)
	w.Header().Set("X-Fast", fmt.Sprint(fast))
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = fmt.Fprintf(w, "%s %s %s host=%s body=%q remote=%v", r.Method, r.URL.Path, r.Proto, r.Host, body, r.RemoteAddr != "")
})

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c, bufio.NewReader(c)
}

type answer struct {
	code  int
	fast  string
	body  string
	close bool
	hdr   http.Header
}

func readAnswer(t *testing.T, br *bufio.Reader, method string) answer {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return answer{code: resp.StatusCode, fast: resp.Header.Get("X-Fast"), body: string(b), close: resp.Close, hdr: resp.Header}
}

func TestFastPathKeepAliveAndPipelining(t *testing.T) {
	addr, _ := fastServer(t, pathEcho, nil)
	c, br := dial(t, addr)
	// Three requests in one write: answered in order on the fast path.
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\nHEAD /c HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GET /a HTTP/1.1 host=x", "GET /b HTTP/1.1 host=x"} {
		a := readAnswer(t, br, http.MethodGet)
		if a.code != 200 || a.fast != "true" || !strings.HasPrefix(a.body, want) || a.close {
			t.Errorf("got %+v, want 200 on the fast path with body %q", a, want)
		}
		if !strings.HasSuffix(a.body, "remote=true") {
			t.Errorf("RemoteAddr not set: %q", a.body)
		}
	}
	if a := readAnswer(t, br, http.MethodHead); a.code != 200 || a.fast != "true" || a.body != "" {
		t.Errorf("HEAD: got %+v, want 200 without a body", a)
	}
	// Later, a request with a body on the same connection is handed over to net/http.
	if _, err := io.WriteString(c, "POST /d HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhelloGET /e HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if a := readAnswer(t, br, http.MethodPost); a.code != 200 || a.fast != "false" || !strings.Contains(a.body, `body="hello"`) {
		t.Errorf("POST after hand-over: got %+v", a)
	}
	if a := readAnswer(t, br, http.MethodGet); a.code != 200 || a.fast != "false" || !strings.HasPrefix(a.body, "GET /e") {
		t.Errorf("GET after hand-over: got %+v", a)
	}
}

func TestFastPathHandsOverOrRejects(t *testing.T) {
	addr, _ := fastServer(t, pathEcho, nil)
	big := strings.Repeat("a", 20<<10)
	cases := []struct {
		name, req string
		code      int
		fast      string
	}{
		{"plain", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 200, "true"},
		{"keep-alive token", "GET / HTTP/1.1\r\nHost: x:80\r\nConnection: keep-alive\r\n\r\n", 200, "true"},
		{"body", "PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi", 200, "false"},
		{"chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n", 200, "false"},
		{"expect", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n", 200, "false"},
		{"upgrade", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: foo\r\n\r\n", 200, "false"},
		{"HTTP/1.0", "GET / HTTP/1.0\r\nHost: x\r\n\r\n", 200, "false"},
		{"absolute form", "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n", 200, "false"},
		{"bare LF", "GET / HTTP/1.1\nHost: x\n\n", 200, "false"},
		{"header block larger than the fast path's buffer", "GET / HTTP/1.1\r\nHost: x\r\nCookie: " + big + "\r\n\r\n", 200, "false"},
		{"header block over net/http's limit", "GET / HTTP/1.1\r\nHost: x\r\nCookie: " + strings.Repeat(big, 60) + "\r\n\r\n", 431, ""},
		{"missing Host", "GET / HTTP/1.1\r\nUser-Agent: t\r\n\r\n", 400, ""},
		{"two Hosts", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400, ""},
		{"bad header name", "GET / HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n", 400, ""},
		{"obsolete folding", "GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n c\r\n\r\n", 200, "false"},
		{"bad escape in the target", "GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400, ""},
		{"bad method", "G(T / HTTP/1.1\r\nHost: x\r\n\r\n", 400, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, br := dial(t, addr)
			_, err := io.WriteString(c, tc.req)
			if tc.code == http.StatusRequestHeaderFieldsTooLarge {
				// net/http answers and closes with the rest of the header unread, so the
				// answer may be lost to a reset; it must not be anything but a 431.
				resp, err := http.ReadResponse(br, nil)
				if err == nil && resp.StatusCode != tc.code {
					t.Errorf("got %d, want %d", resp.StatusCode, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a := readAnswer(t, br, http.MethodGet)
			if a.code != tc.code || a.fast != tc.fast {
				t.Errorf("got %d fast=%q (%q), want %d fast=%q", a.code, a.fast, a.body, tc.code, tc.fast)
			}
			if tc.code >= 400 && !a.close {
				t.Errorf("connection kept open after %d", a.code)
			}
		})
	}
}

func TestFastPathH2CPrefaceHandedOver(t *testing.T) {
	addr, _ := fastServer(t, pathEcho, nil)
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	var frame [9]byte
	if _, err := io.ReadFull(br, frame[:]); err != nil {
		t.Fatal(err)
	}
	if frame[3] != 0x4 { // SETTINGS: net/http's HTTP/2 server answered the preface
		t.Errorf("first frame type %#x, want SETTINGS (0x4)", frame[3])
	}
}

func TestFastPathResponseFraming(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/chunked":
			w.Header().Set("Trailer", "X-Sum")
			_, _ = io.WriteString(w, "one,")
			w.(http.Flusher).Flush()
			_, _ = io.WriteString(w, "two")
			w.Header().Set("X-Sum", "2")
		case "/empty":
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
		case "/close":
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "/newline":
			w.Header().Set("X-Evil", "a\r\nInjected: yes")
			w.WriteHeader(http.StatusTeapot)
		}
	})
	addr, _ := fastServer(t, h, nil)
	c, br := dial(t, addr)
	send := func(path string) answer {
		t.Helper()
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return answer{code: resp.StatusCode, body: string(b), close: resp.Close, hdr: mergeTrailer(resp)}
	}
	if a := send("/chunked"); a.code != 200 || a.body != "one,two" || a.hdr.Get("X-Sum") != "2" || a.hdr.Get("Date") == "" {
		t.Errorf("/chunked: %+v", a)
	}
	if a := send("/empty"); a.code != 200 || a.body != "" || a.hdr.Get("Content-Length") != "0" {
		t.Errorf("/empty: %+v", a)
	}
	if a := send("/nocontent"); a.code != 204 || a.body != "" {
		t.Errorf("/nocontent: %+v", a)
	}
	if a := send("/newline"); a.code != 418 || a.hdr.Get("Injected") != "" || a.hdr.Get("X-Evil") != "a  Injected: yes" {
		t.Errorf("/newline: %+v", a)
	}
	if a := send("/close"); a.code != 200 || a.body != "bye" || !a.close {
		t.Errorf("/close: %+v", a)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after Connection: close the server kept the connection open (%v)", err)
	}
}

func mergeTrailer(resp *http.Response) http.Header {
	for k, v := range resp.Trailer {
		resp.Header[k] = v
	}
	return resp.Header
}

func TestFastPathClientGoneCancelsRequest(t *testing.T) {
	started, ended := make(chan struct{}), make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		select {
		case <-r.Context().Done():
			ended <- r.Context().Err()
		case <-time.After(20 * time.Second):
			ended <- errors.New("the request's context was not cancelled")
		}
	})
	addr, _ := fastServer(t, h, func(s *Server) { s.WatchClientAfter = time.Millisecond })
	c, _ := dial(t, addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-started
	_ = c.Close()
	if err := <-ended; !errors.Is(err, context.Canceled) {
		t.Errorf("handler saw %v, want context.Canceled", err)
	}
}

func TestFastPathDrain(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			entered <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})
	addr, stop := fastServer(t, h, nil)
	// An idle keep-alive connection after one request.
	idle, idleR := dial(t, addr)
	if _, err := io.WriteString(idle, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if a := readAnswer(t, idleR, http.MethodGet); a.code != 200 || a.close {
		t.Fatalf("first request: %+v", a)
	}
	// A request in flight when the drain starts.
	busy, busyR := dial(t, addr)
	if _, err := io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The idle connection is closed by the server.
	if _, err := idleR.ReadByte(); err == nil {
		t.Error("idle connection still open during the drain")
	}
	select {
	case err := <-stopped:
		t.Fatalf("Start returned (%v) with a request in flight", err)
	default:
	}
	close(release)
	a := readAnswer(t, busyR, http.MethodGet)
	if a.code != 200 || a.body != "done" || !a.close {
		t.Errorf("in-flight request during the drain: %+v, want 200 with Connection: close", a)
	}
	if err := <-stopped; err != nil {
		t.Errorf("Start returned %v", err)
	}
	if _, err := busyR.ReadByte(); err == nil {
		t.Error("connection still open after the drain")
	}
}

func TestFastPathAbortedResponseIsNotCompleted(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // what ReverseProxy does when the upstream body fails midway
	})
	addr, _ := fastServer(t, h, nil)
	c, br := dial(t, addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if string(b) != "part" || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("got %q, %v; want the partial body and an unexpected EOF, never a complete response", b, err)
	}
}
