package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/testenv"
)

func TestRawPathReplacesStalePooledConnections(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, fast bool) {
		// One request per connection, then the backend closes it without a Connection: close:
		// every pooled connection is stale when the next request takes it.
		be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply {
			return proxytest.Reply{Resp: proxytest.OKReply("once"), Close: true}
		})
		h.src.Set(key("app"), be.Addr)
		c := dialRaw(t, h)
		const n = 6
		for i := range n {
			if a := c.Do(proxytest.RawGet("/")); a.Err != "" || a.Code != http.StatusOK || a.Body != "once" {
				t.Fatalf("request %d: %+v, want 200", i, a)
			}
		}
		reqs := be.Requests()
		if len(reqs) != n || be.ConnCount() != n {
			t.Errorf("the backend got %d requests over %d connections, want each of the %d once, over a connection of its own", len(reqs), be.ConnCount(), n)
		}
		if fast && !reqs[n-1].ViaLoops() {
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
		h.src.Set(key("app"), endpointOf(t, "http://"+ln.Addr().String()))
		c := dialRaw(t, h) // its deadline turns a hang into a failure
		const n = 3
		for i := range n {
			a := c.Do(proxytest.RawGet("/"))
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
		be := proxytest.NewRawBackend(t, func(i int, _ *http.Request) proxytest.Reply {
			if i == 0 { // 10 bytes promised, 4 sent
				return proxytest.Reply{Resp: "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 10\r\n\r\npart", Close: true}
			}
			return proxytest.Reply{Resp: proxytest.OKReply("whole")}
		})
		h.src.Set(key("app"), be.Addr)
		c := dialRaw(t, h)
		if a := c.Do(proxytest.RawGet("/broken")); a.Err == "" {
			t.Fatalf("a broken upstream body was passed on as a complete response: %+v", a)
		}
		if !c.Closed() {
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
		if a := dialRaw(t, h).Do(proxytest.RawGet("/after")); a.Err != "" || a.Code != http.StatusOK || a.Body != "whole" {
			t.Errorf("request after the break: %+v", a)
		}
		if n := be.ConnCount(); n != 2 {
			t.Errorf("upstream connections = %d, want 2", n)
		}
		if _, _, req := h.count("ns/app"); req != 2 {
			t.Errorf("requests = %d, want 2", req)
		}
	})
}

// hungRequest sends a request the backend never answers and returns once it is in flight.
func hungRequest(t *testing.T, fast bool, mod func(*Server)) (*harness, *proxytest.RawBackend, *proxytest.RawClient) {
	t.Helper()
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(_ *Options, s *Server) {
		s.FastHTTP1 = fast
		if mod != nil {
			mod(s)
		}
	})
	arrived := make(chan struct{}, 1)
	be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply {
		arrived <- struct{}{}
		return proxytest.Reply{Hang: true}
	})
	h.src.Set(key("app"), be.Addr)
	c := dialRaw(t, h)
	if _, err := io.WriteString(c.Conn(), proxytest.RawGet("/hang")); err != nil {
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
	if fast && !be.Requests()[0].ViaLoops() {
		t.Fatal("not served on the raw path")
	}
	return h, be, c
}

// upstreamClosed waits for the proxy to close the hung request's upstream connection.
func upstreamClosed(t *testing.T, be *proxytest.RawBackend) {
	t.Helper()
	select {
	case <-be.HungUp:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream connection of the hung request was not closed")
	}
}

func TestRawPathDrainCutsOffHungRequest(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			h, be, c := hungRequest(t, fast, func(s *Server) { s.DrainTimeout = 300 * time.Millisecond })
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
			if resp, err := http.ReadResponse(c.Reader(), nil); err == nil {
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
			_ = c.Conn().Close()
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
		be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
			switch r.URL.Path {
			case "/two": // a second response nobody asked for, in the same write
				return proxytest.Reply{Resp: proxytest.OKReply("ok") + proxytest.OKReply("EVIL")}
			case "/head": // a body with the HEAD answer
				return proxytest.Reply{Resp: proxytest.OKReply("body of HEAD")}
			}
			return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
		})
		h.src.Set(key("app"), be.Addr)
		if a := dialRaw(t, h).Do(proxytest.RawGet("/two")); a.Code != http.StatusOK || a.Body != "ok" {
			t.Fatalf("GET /two: %+v", a)
		}
		if a := dialRaw(t, h).Do(proxytest.RawReq("HEAD", "/head")); a.Code != http.StatusOK || a.Body != "" {
			t.Fatalf("HEAD /head: %+v", a)
		}
		c := dialRaw(t, h) // another client
		for _, p := range []string{"/b1", "/b2", "/b3"} {
			if a := c.Do(proxytest.RawGet(p)); a.Err != "" || a.Code != http.StatusOK || a.Body != "for "+p {
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
		if a := c.Do(proxytest.RawGet("/warm")); a.Code != http.StatusOK { // leaves a pooled upstream connection
			t.Fatalf("GET /warm: %+v", a)
		}
		c = dialRaw(t, h)
		if a := c.Do(proxytest.RawReq("POST", "/charge")); a.Code != http.StatusBadGateway {
			t.Errorf("POST /charge: %+v, want 502", a)
		}
		if n := charges.Load(); n != 1 {
			t.Errorf("the POST reached the upstream %d times, want once", n)
		}
		// A GET is replayable: the same failure on a pooled connection is retried (here the
		// upstream answers; the retry machinery itself is TestRawPathReplacesStalePooledConnections).
		if a := c.Do(proxytest.RawGet("/after")); a.Code != http.StatusOK || a.Body != "ok" {
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
			h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(o *Options, s *Server) {
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
			good := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("good")} })
			h.src.Set(key("app"), endpointOf(t, "http://"+blackhole), good.Addr)
			// Round robin starts at the first endpoint: the blackhole. The client leaves.
			c := dialRaw(t, h)
			_, _ = io.WriteString(c.Conn(), proxytest.RawGet("/"))
			testenv.Eventually(t, 10*time.Second, "the connect to the unresponsive pod", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return dialed[blackhole] == 1
			})
			_ = c.Conn().Close()
			testenv.Eventually(t, 10*time.Second, "the request to end", func() bool { in, _, _ := h.count("ns/app"); return in == 0 })
			mu.Lock()
			got := dialed[good.Addr]
			mu.Unlock()
			if got != 0 {
				t.Errorf("the healthy endpoint was dialled %d times for a client that had left, want 0", got)
			}
			// It still serves (it was not marked bad), and the blackhole is tried again only
			// because round robin comes back to it.
			for i := range 2 {
				if a := dialRaw(t, h).Do(proxytest.RawGet("/")); a.Code == http.StatusOK && a.Body == "good" {
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
					_, _ = io.WriteString(c, proxytest.OKReply("for "+req.URL.Path))
					time.Sleep(100 * time.Millisecond) // the upstream's idle timeout
					_, _ = io.WriteString(c, "HTTP/1.1 408 Request Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
					timedOut <- struct{}{}
				}()
			}
		}()
		h.src.Set(key("app"), endpointOf(t, "http://"+ln.Addr().String()))
		if a := dialRaw(t, h).Do(proxytest.RawGet("/first")); a.Code != http.StatusOK || a.Body != "for /first" {
			t.Fatalf("GET /first: %+v", a)
		}
		<-timedOut
		time.Sleep(50 * time.Millisecond) // the 408 and the close are in the proxy's socket
		if a := dialRaw(t, h).Do(proxytest.RawGet("/second")); a.Code != http.StatusOK || a.Body != "for /second" {
			t.Errorf("GET /second after the idle 408: %+v, want 200 %q", a, "for /second")
		}
	})
}
