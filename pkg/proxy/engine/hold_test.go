//go:build linux

package engine

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// Held requests on the event loops: the wait runs off the loop and reports back; the loop keeps
// serving meanwhile.

// A held request with a body is forwarded whole once the app is ready, with the logic's header
// (X-Cold-Start, added through Responded) on its response; a warm app on the same loop is served
// while it waits.
func TestHeldRequestWithABodyIsForwardedWhole(t *testing.T) {
	h := newHarness(t, []route{entry("app", "app.example.com", "app"), entry("warm", "warm.example.com", "warm")},
		func(_ *Options, s *Server) { s.EventLoops = 1 })
	be := newBodyBackend(t)
	h.src.Set(key("warm"), endpointOf(t, "http://"+be.addr()))
	body := pattern(100000)
	c := dialRaw(t, h)
	held := make(chan proxytest.Answer, 1)
	go func() { held <- c.Do(postReq("POST", "/cold", body)) }()
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(ctx, key("app"), 1); err != nil {
		t.Fatal(err)
	}
	warm := postReq("POST", "/warm", []byte("hi"))
	warm = "POST /warm HTTP/1.1\r\nhost: warm.example.com" + warm[len("POST /warm HTTP/1.1\r\nhost: app.example.com"):]
	if a := dialRaw(t, h).Do(warm); a.Code != http.StatusOK || a.Body != bodyWant("POST", "/warm", []byte("hi"), true) {
		t.Fatalf("warm app while the other is held: %+v", a)
	}
	h.src.Set(key("app"), endpointOf(t, "http://"+be.addr()))
	a := <-held
	if a.Code != http.StatusOK || a.Body != bodyWant("POST", "/cold", body, true) || a.Wire.Get("X-Cold-Start") != "true" {
		t.Fatalf("held request: %+v, want 200 with the whole body and X-Cold-Start", a)
	}
	if a := c.Do(proxytest.RawGet("/after")); a.Code != http.StatusOK {
		t.Errorf("the next request on the connection: %+v", a)
	}
}

// A held request whose client goes away ends at once (its wait is cancelled): recorded as 499,
// no longer held, never forwarded; so does one whose client half-closed and stayed away past
// WatchClientAfter.
func TestHeldRequestOfAClientThatLeftEnds(t *testing.T) {
	for _, halfClose := range []bool{false, true} {
		t.Run(fmt.Sprintf("halfClose=%v", halfClose), func(t *testing.T) {
			h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(_ *Options, s *Server) {
				s.EventLoops, s.WatchClientAfter = 1, 20*time.Millisecond
			})
			be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("late")} })
			c := dialRaw(t, h)
			if _, err := io.WriteString(c.Conn(), proxytest.RawGet("/cold")); err != nil {
				t.Fatal(err)
			}
			ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
			defer stop()
			if err := h.src.WaitWaiting(ctx, key("app"), 1); err != nil {
				t.Fatal(err)
			}
			if halfClose {
				_ = c.Conn().(*net.TCPConn).CloseWrite()
			} else {
				_ = c.Conn().Close()
			}
			testenv.Eventually(t, 10*time.Second, "the held request recorded as 499", func() bool { return h.src.codes("app", "499") == 1 })
			if in, held, _ := h.count("app"); in != 0 || held != 0 {
				t.Errorf("in flight %d, held %d; want 0 and 0", in, held)
			}
			h.src.Set(key("app"), be.Addr)
			if a := dialRaw(t, h).Do(proxytest.RawGet("/next")); a.Code != http.StatusOK {
				t.Fatalf("next request: %+v", a)
			}
			for _, r := range be.Requests() {
				if r.RequestURI == "/cold" {
					t.Errorf("the request of the client that left was forwarded")
				}
			}
		})
	}
}

// A hold that times out is answered by the logic (504 here) on the loop, and the connection
// carries the next request.
func TestHeldRequestTimesOut(t *testing.T) {
	r := entry("app", "app.example.com", "app")
	r.readiness = 50 * time.Millisecond
	h := newHarness(t, []route{r}, nil)
	c := dialRaw(t, h)
	if a := c.Do(proxytest.RawGet("/cold")); a.Code != http.StatusGatewayTimeout || a.Wire.Get("X-Cold-Start") != "true" || a.Close {
		t.Fatalf("held past the readiness timeout: %+v, want 504 with X-Cold-Start, the connection kept", a)
	}
	be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("ok")} })
	h.src.Set(key("app"), be.Addr)
	if a := c.Do(proxytest.RawGet("/next")); a.Code != http.StatusOK || a.Body != "ok" {
		t.Errorf("next request: %+v", a)
	}
}

// With one upstream connection for many uploads with large answers, connections pass from one
// request to the next waiting on the same loop: each request gets its own answer, whole, though
// the last part of one answer and the body of the next request use the loop's one body buffer.
func TestConnectionHandedToAWaiterKeepsTheLastAnswerWhole(t *testing.T) {
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(o *Options, s *Server) {
		s.EventLoops, o.MaxConnsPerEndpoint = 1, 1
	})
	// Answers each upload with 60,000 bytes made of its path.
	answer := func(path string) string { return strings.Repeat(path+";", 60000/(len(path)+1)) }
	_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			return
		}
		body := answer(r.URL.Path)
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body))) // passed on as it comes
		_, _ = io.WriteString(w, body)
	})
	h.src.Set(key("app"), ep)
	const clients, each = 8, 6
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialRaw(t, h)
			for j := range each {
				path := fmt.Sprintf("/c%d/%d", i, j)
				want := answer(path)
				sum := sha256.Sum256([]byte(want))
				if a := c.Do(postReq("POST", path, pattern(70000+997*i+j))); a.Code != http.StatusOK || a.Body != fmt.Sprintf("%d bytes, sha256 %x", len(want), sum) {
					t.Errorf("%s: %+v", path, a)
					return
				}
			}
		}()
	}
	wg.Wait()
}
