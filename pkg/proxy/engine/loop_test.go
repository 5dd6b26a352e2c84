package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// loopHarness is a harness whose raw path runs on n event loops.
func loopHarness(t *testing.T, n int, mod func(*Options)) *harness {
	t.Helper()
	return newHarness(t, []route{entry("app", "app.example.com", "app")}, func(o *Options, s *Server) {
		s.FastHTTP1, s.EventLoops = true, n
		if mod != nil {
			mod(o)
		}
	})
}

// Pipelined requests, one arriving in pieces, are answered in order on the connection.
func TestEventLoopsPipelining(t *testing.T) {
	h := loopHarness(t, 2, nil)
	be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
		return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
	})
	h.src.Set(key("app"), be.Addr)
	c := dialRaw(t, h)
	third := proxytest.RawGet("/3")
	if _, err := io.WriteString(c.Conn(), proxytest.RawGet("/1")+proxytest.RawGet("/2")+third[:10]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the rest of the third head comes later
	if _, err := io.WriteString(c.Conn(), third[10:]); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c.Conn())
	for _, want := range []string{"for /1", "for /2", "for /3"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the response with %q: %v", want, err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || string(body) != want {
			t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, want)
		}
	}
	if got := len(be.Requests()); got != 3 {
		t.Errorf("backend got %d requests, want 3", got)
	}
	for _, r := range be.Requests() {
		if !r.ViaLoops() {
			t.Errorf("%s was not forwarded on the raw path: %q", r.RequestURI, r.Head())
		}
	}
}

// Many clients at once over two loops: every request answered with its own body, counted once,
// over upstream connections the loops reuse.
func TestEventLoopsManyConnections(t *testing.T) {
	h := loopHarness(t, 2, nil)
	be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
		return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
	})
	h.src.Set(key("app"), be.Addr)
	const clients, each = 32, 25
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialRaw(t, h)
			for j := range each {
				path := fmt.Sprintf("/c%d/r%d", i, j)
				if a := c.Do(proxytest.RawGet(path)); a.Err != "" || a.Code != http.StatusOK || a.Body != "for "+path {
					bad.Add(1)
					t.Errorf("%s: %+v", path, a)
					return
				}
			}
		}()
	}
	wg.Wait()
	if bad.Load() > 0 {
		return
	}
	if _, _, req := h.count("ns/app"); req != clients*each {
		t.Errorf("requests counted = %d, want %d", req, clients*each)
	}
	testenv.Eventually(t, 10*time.Second, "nothing in flight", func() bool { in, _, _ := h.count("ns/app"); return in == 0 })
	if v := h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": "2xx"}); v != clients*each {
		t.Errorf("2xx responses = %v, want %d", v, clients*each)
	}
	// At most one upstream connection per client at a time; kept and reused, not one per request.
	if n := be.ConnCount(); n > clients {
		t.Errorf("upstream connections = %d, want at most %d", n, clients)
	}
}

// A client that closes its sending side after its request still gets the response, then the
// connection is closed.
func TestEventLoopsHalfClosedClientIsAnswered(t *testing.T) {
	h := loopHarness(t, 1, nil)
	be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("answered")} })
	h.src.Set(key("app"), be.Addr)
	c := h.dial(t, 10*time.Second)
	if _, err := io.WriteString(c, proxytest.RawGet("/")); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(c) // to the end: the proxy closes after answering
	if err != nil {
		t.Fatalf("reading to the end: %v (got %q)", err, all)
	}
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(all))), nil)
	if err != nil {
		t.Fatalf("response %q: %v", all, err)
	}
	body, _ := io.ReadAll(resp.Body)
	// The response says "Connection: close" when the loop saw the client's side closed before it
	// wrote the head; either way the connection ends after it (ReadAll reached the end).
	if resp.StatusCode != http.StatusOK || string(body) != "answered" {
		t.Errorf("got %d %q, want 200 %q", resp.StatusCode, body, "answered")
	}
}

// Loops share MaxConnsPerEndpoint with the goroutine path: requests beyond it wait for a
// connection instead of opening more, and every one is answered.
func TestEventLoopsRespectMaxConnsPerEndpoint(t *testing.T) {
	const limit, clients = 2, 12
	h := loopHarness(t, 2, func(o *Options) { o.MaxConnsPerEndpoint = limit })
	var open, peak atomic.Int32
	be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply {
		if n := open.Add(1); n > peak.Load() {
			peak.Store(n)
		}
		time.Sleep(5 * time.Millisecond)
		open.Add(-1)
		return proxytest.Reply{Resp: proxytest.OKReply("ok")}
	})
	h.src.Set(key("app"), be.Addr)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dialRaw(t, h)
			for range 5 {
				if a := c.Do(proxytest.RawGet("/")); a.Err != "" || a.Code != http.StatusOK {
					t.Errorf("got %+v, want 200", a)
					return
				}
			}
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Errorf("requests at the backend at once = %d, want at most %d", p, limit)
	}
}

// On drain, an idle loop connection is closed at once, a busy one after its response (which says
// Connection: close), and the server stops.
func TestEventLoopsDrain(t *testing.T) {
	h := loopHarness(t, 2, nil)
	release := make(chan struct{})
	be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
		if r.URL.Path == "/slow" {
			<-release
		}
		return proxytest.Reply{Resp: proxytest.OKReply("done " + r.URL.Path)}
	})
	h.src.Set(key("app"), be.Addr)
	idle := dialRaw(t, h)
	if a := idle.Do(proxytest.RawGet("/first")); a.Code != http.StatusOK {
		t.Fatalf("first request: %+v", a)
	}
	busy := dialRaw(t, h)
	answer := make(chan proxytest.Answer, 1)
	go func() { answer <- busy.Do(proxytest.RawGet("/slow")) }()
	testenv.Eventually(t, 10*time.Second, "the slow request in flight", func() bool { in, _, _ := h.count("ns/app"); return in == 1 })
	h.stop()
	// The idle connection is closed without a response.
	buf := make([]byte, 1)
	_ = idle.Conn().SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := idle.Conn().Read(buf); err == nil || n > 0 {
		t.Errorf("idle connection: read %d bytes, %v; want it closed", n, err)
	}
	close(release)
	a := <-answer
	if a.Err != "" || a.Code != http.StatusOK || a.Body != "done /slow" || !a.Close {
		t.Errorf("busy request: %+v, want 200 %q with Connection: close", a, "done /slow")
	}
	select {
	case err := <-h.stopped:
		if err != nil {
			t.Errorf("server stopped with %v", err)
		}
		h.stopped <- err // for the harness's cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not stop after its last connection closed")
	}
}

// A large body to a client that reads slowly is passed on as the client takes it (the loop stops
// reading the upstream while the client's socket is full), whole.
func TestEventLoopsSlowClientLargeBody(t *testing.T) {
	h := loopHarness(t, 1, nil)
	body := strings.Repeat("0123456789abcdef", 1<<20) // 16 MiB: more than the sockets buffer
	be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply {
		return proxytest.Reply{Resp: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(body), body)}
	})
	h.src.Set(key("app"), be.Addr)
	c := dialRaw(t, h)
	_ = c.Conn().SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c.Conn(), proxytest.RawGet("/big")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the sockets fill up meanwhile
	resp, err := http.ReadResponse(bufio.NewReader(c.Conn()), nil)
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	buf := make([]byte, 64<<10)
	for {
		n, err := resp.Body.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			break
		}
		if got.Len()%(4<<20) < n {
			time.Sleep(20 * time.Millisecond) // slow, in steps
		}
	}
	if got.Len() != len(body) || got.String() != body {
		t.Fatalf("body: %d bytes, want %d (equal: %v)", got.Len(), len(body), got.String() == body)
	}
	// The connection carries the next request, with a deadline of its own: the body's took 30 of
	// the first deadline's 30 s under -race at load 45, leaving the next request none.
	_ = c.Conn().SetDeadline(time.Now().Add(10 * time.Second))
	if a := c.Do(proxytest.RawGet("/next")); a.Code != http.StatusOK || a.Err != "" {
		t.Errorf("next request: code %d %s", a.Code, a.Err)
	}
}

// A request held while the app is cold stays on its event loop, and so does its connection.
func TestEventLoopsHoldColdRequests(t *testing.T) {
	h := loopHarness(t, 2, nil)
	be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
		return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
	})
	c := dialRaw(t, h)
	held := make(chan proxytest.Answer, 1)
	go func() { held <- c.Do(proxytest.RawGet("/cold")) }()
	testenv.Eventually(t, 10*time.Second, "the request held", func() bool { _, n, _ := h.count("ns/app"); return n == 1 })
	if n := h.srv.LoopConnections(); n != 1 {
		t.Errorf("while held: %d connections on the loops, want 1", n)
	}
	h.src.Set(key("app"), be.Addr)
	if a := <-held; a.Code != http.StatusOK || a.Body != "for /cold" {
		t.Fatalf("held request: %+v", a)
	}
	for _, path := range []string{"/warm1", "/warm2"} {
		if a := c.Do(proxytest.RawGet(path)); a.Code != http.StatusOK || a.Body != "for "+path {
			t.Fatalf("%s: %+v", path, a)
		}
	}
	if n := h.srv.LoopConnections(); n != 1 {
		t.Errorf("after: %d connections on the loops, want 1", n)
	}
	if _, _, req := h.count("ns/app"); req != 3 {
		t.Errorf("requests counted = %d, want 3", req)
	}
}

// The loops' idle upstream connections count against MaxConnsPerEndpoint: a request waiting for a
// connection on the goroutine path gets one of them, instead of waiting until they time out.
func TestEventLoopsGiveIdleConnectionsToWaiters(t *testing.T) {
	h := loopHarness(t, 2, func(o *Options) { o.MaxConnsPerEndpoint = 1 })
	be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
		return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
	})
	h.src.Set(key("app"), be.Addr)
	// Each on its own connection, so on both loops: the first one's upstream connection stays idle
	// on its loop.
	for _, path := range []string{"/a", "/b", "/c"} {
		if a := dialRaw(t, h).Do(proxytest.RawGet(path)); a.Code != http.StatusOK || a.Body != "for "+path {
			t.Fatalf("%s: %+v", path, a)
		}
	}
	// A head with bare LF line ends goes to net/http, whose forward waits for a connection in
	// h1Transport.
	big := "GET /big HTTP/1.1\nhost: app.example.com\nX-Pad: " + strings.Repeat("p", 5000) + "\n\n"
	if a := dialRaw(t, h).Do(big); a.Code != http.StatusOK || a.Body != "for /big" {
		t.Fatalf("/big: %+v", a)
	}
	if n := be.ConnCount(); n != 1 {
		t.Errorf("upstream connections = %d, want 1 (MaxConnsPerEndpoint)", n)
	}
}

// A client that closes its sending side with its request, to an upstream that does not answer, is
// gone once the request has run for watchAfter, as on the goroutine path: the upstream connection
// is closed and the request recorded as 499.
func TestEventLoopsHalfClosedClientOfAHungRequestIsGone(t *testing.T) {
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(_ *Options, s *Server) {
		s.FastHTTP1, s.EventLoops, s.WatchClientAfter = true, 1, 30*time.Millisecond
	})
	be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Hang: true} })
	h.src.Set(key("app"), be.Addr)
	c := dialRaw(t, h)
	if _, err := io.WriteString(c.Conn(), proxytest.RawGet("/hang")); err != nil {
		t.Fatal(err)
	}
	if err := c.Conn().(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	upstreamClosed(t, be)
	testenv.Eventually(t, 10*time.Second, "the request recorded as 499", func() bool {
		return h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": "499"}) == 1
	})
	testenv.Eventually(t, 10*time.Second, "nothing in flight", func() bool { in, _, _ := h.count("ns/app"); return in == 0 })
}

// A panic while a loop handles a request (here the request logic's, in Responded) costs that
// request's connection, not the loop: it is closed unanswered, the request is ended (nothing stays
// in flight), and the loop serves the next request.
func TestEventLoopsSurviveAPanic(t *testing.T) {
	bad := entry("bad", "bad.example.com", "app")
	bad.panics = true
	h := newHarness(t, []route{entry("app", "app.example.com", "app"), bad}, func(_ *Options, s *Server) { s.EventLoops = 1 })
	be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
		return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
	})
	h.src.Set(key("app"), be.Addr)
	if a := dialRaw(t, h).Do(proxytest.RawReqTo("bad.example.com", "GET", "/panic")); a.Err == "" {
		t.Fatalf("the request whose handling panicked got %+v, want the connection closed unanswered", a)
	}
	testenv.Eventually(t, 10*time.Second, "the request ended", func() bool { in, _, _ := h.count("bad"); return in == 0 })
	for _, path := range []string{"/after1", "/after2"} {
		if a := dialRaw(t, h).Do(proxytest.RawGet(path)); a.Code != http.StatusOK || a.Body != "for "+path {
			t.Fatalf("%s after the panic: %+v", path, a)
		}
	}
}

// The loops read a head of any size up to the server's MaxHeaderBytes themselves, however it is cut
// into reads (the end of the head split between two of them included); a larger one goes to
// net/http, which answers 431 once it is over its own slack, on both paths alike; a bare LF arriving
// late in a large head still hands the connection over.
func TestEventLoopsReadLargeHeadsUpToMaxHeaderBytes(t *testing.T) {
	const maxHead = 16 << 10
	onBothPathsWith(t, func(_ *Options, s *Server) { s.MaxHeaderBytes = maxHead }, func(t *testing.T, h *harness, fast bool) {
		be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
			return proxytest.Reply{Resp: proxytest.OKReply(fmt.Sprintf("%s %d %s", r.URL.Path, len(r.Header.Get("X-Pad")), r.Header.Get("X-After")))}
		})
		h.src.Set(key("app"), be.Addr)
		pad := "X-Pad: " + strings.Repeat("p", 12<<10)
		for _, split := range []int{0, 1, 2, 3, 4, 5, 3000} { // bytes of the head sent in a second write
			head := proxytest.RawGet(fmt.Sprintf("/split%d", split), "X-A: 1", pad, "X-After: yes")
			c := dialRaw(t, h)
			for _, piece := range []string{head[:4000], head[4000 : len(head)-split]} {
				if _, err := io.WriteString(c.Conn(), piece); err != nil {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond) // read apart
			}
			a := c.Do(head[len(head)-split:])
			if want := fmt.Sprintf("/split%d %d yes", split, 12<<10); a.Code != http.StatusOK || a.Body != want {
				t.Fatalf("a %d-byte head, its last %d bytes sent apart: %+v, want 200 %q", len(head), split, a, want)
			}
		}
		kept := dialRaw(t, h)
		for i, size := range []int{12 << 10, 100, 15 << 10, 100} { // a kept connection's buffer grows and shrinks
			path := fmt.Sprintf("/kept%d", i)
			if a := kept.Do(proxytest.RawGet(path, "X-Pad: "+strings.Repeat("k", size))); a.Code != http.StatusOK || a.Body != fmt.Sprintf("%s %d ", path, size) {
				t.Fatalf("request %d on a kept connection: %+v", i, a)
			}
		}
		lateLF := dialRaw(t, h).Do("GET /lf HTTP/1.1\r\nhost: app.example.com\r\n" + pad + "\r\nX-After: lf\n\r\n")
		if a := lateLF; a.Code != http.StatusOK || a.Body != fmt.Sprintf("/lf %d lf", 12<<10) {
			t.Fatalf("a large head with a bare LF at its end: %+v", a)
		}
		// Over MaxHeaderBytes but within net/http's slack (4 KiB): net/http serves it. Over both: 431.
		slack := dialRaw(t, h).Do(proxytest.RawGet("/slack", "X-Pad: "+strings.Repeat("s", maxHead+1000)))
		if slack.Code != http.StatusOK {
			t.Fatalf("a head within net/http's slack: %+v", slack)
		}
		if a := dialRaw(t, h).Do(proxytest.RawGet("/huge", "X-Pad: "+strings.Repeat("h", maxHead+8000))); a.Code != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("a head over MaxHeaderBytes and net/http's slack: %+v, want 431", a)
		}
		for _, r := range be.Requests() {
			if via, want := r.ViaLoops(), fast && !strings.HasPrefix(r.RequestURI, "/lf") && r.RequestURI != "/slack"; via != want {
				t.Errorf("%s: served by the event loops %v, want %v", r.RequestURI, via, want)
			}
		}
	})
}

// A large head waits for the loop's turns for large heads (evLoop.heavy): a small request that
// arrives together with a hundred 60 KiB heads is routed in the same batch of events, before any of
// them, and every large head is read, parsed and held afterwards. The loop is kept busy (a request
// whose routing blocks) until all of them have arrived, so that they come in one batch.
func TestEventLoopsRouteSmallRequestsBeforeLargeHeads(t *testing.T) {
	h := newHarness(t, []route{entry("app", "app.example.com", "app"), entry("cold", "cold.example.com", "cold"),
		entry("gate", "gate.example.com", "app")}, func(_ *Options, s *Server) { s.FastHTTP1, s.EventLoops = true, 1 })
	be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
		return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
	})
	h.src.Set(key("app"), be.Addr)

	var mu sync.Mutex
	var routed []string
	entered, release := make(chan struct{}), make(chan struct{})
	hook := func(host string) {
		if host == "gate.example.com" {
			close(entered)
			<-release // the loop waits here
		}
		mu.Lock()
		routed = append(routed, host)
		mu.Unlock()
	}
	h.src.onRoute.Store(&hook)
	gate := make(chan proxytest.Answer, 1)
	gc := dialRaw(t, h)
	go func() { gate <- gc.Do(proxytest.RawReqTo("gate.example.com", "GET", "/gate")) }()
	<-entered

	const large = 100
	head := proxytest.RawReqTo("cold.example.com", "GET", "/large", "X-Pad: "+strings.Repeat("p", 60<<10))
	written := make(chan error, large)
	for range large {
		c := dialRaw(t, h)
		go func() { _, err := io.WriteString(c.Conn(), head); written <- err }()
	}
	for range large {
		if err := <-written; err != nil {
			t.Fatal(err) // the kernel's buffers took each head whole while the loop was busy
		}
	}
	small := make(chan proxytest.Answer, 1)
	sc := dialRaw(t, h)
	if _, err := io.WriteString(sc.Conn(), proxytest.RawGet("/small")); err != nil {
		t.Fatal(err)
	}
	go func() { small <- sc.Do("") }()
	loop := h.srv.loops.Load().loops[0]
	testenv.Eventually(t, 10*time.Second, "every connection accepted and queued for the loop", func() bool {
		loop.inboxMu.Lock()
		defer loop.inboxMu.Unlock()
		n := 0
		for _, m := range loop.inbox {
			if m.kind == evAdopt {
				n++
			}
		}
		return n == large+1
	})
	close(release)

	if a := <-gate; a.Code != http.StatusOK {
		t.Fatalf("the gate request: %+v", a)
	}
	if a := <-small; a.Code != http.StatusOK || a.Body != "for /small" {
		t.Fatalf("the small request: %+v", a)
	}
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(ctx, key("cold"), large); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(routed, "app.example.com"); i != 1 {
		t.Errorf("the small request was routed %dth, after %d large heads; want right after the gate", i+1, i-1)
	}
}

// The buffers of heads still arriving are bounded together (MaxArrivingHeaderBytes): a head that
// would take them over the bound is answered 503 head_room with Retry-After (the answer reaches the
// client although the rest of its head is never read), the others are served, small requests are
// not counted, and room comes back as heads end.
func TestEventLoopsBoundTheHeadsStillArriving(t *testing.T) {
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(_ *Options, s *Server) {
		s.FastHTTP1, s.EventLoops, s.MaxHeaderBytes, s.MaxArrivingHeaderBytes = true, 1, 64<<10, 64<<10
	})
	be := proxytest.NewRawBackend(t, func(_ int, r *http.Request) proxytest.Reply {
		return proxytest.Reply{Resp: proxytest.OKReply("for " + r.URL.Path)}
	})
	h.src.Set(key("app"), be.Addr)
	head := func(path string) string {
		return proxytest.RawGet(path, "X-Pad: "+strings.Repeat("p", 40<<10))
	}
	arriving := func() int64 { n, _ := h.srv.ArrivingHeads(); return n }

	first, firstHead := dialRaw(t, h), head("/first")
	if _, err := io.WriteString(first.Conn(), firstHead[:len(firstHead)-10]); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the first head's buffer grown to 64 KiB", func() bool { return arriving() == 64<<10 })

	// No room left for a second large head; a small request needs none.
	second, secondHead := dialRaw(t, h), head("/second")
	if _, err := io.WriteString(second.Conn(), secondHead[:len(secondHead)-10]); err != nil {
		t.Fatal(err)
	}
	// Read only once the answer had time to arrive: a connection closed with the rest of the head
	// unread would have been reset by then, and the answer lost with it.
	testenv.Eventually(t, 10*time.Second, "the head refused", func() bool { _, refused := h.srv.ArrivingHeads(); return refused == 1 })
	time.Sleep(100 * time.Millisecond)
	a := second.Do("")
	if a.Code != http.StatusServiceUnavailable || a.Body != "head_room\n" || a.Wire.Get("Retry-After") == "" || !a.Close {
		t.Fatalf("a large head beyond the bound: %+v, want 503 head_room with Retry-After, closing", a)
	}
	if _, refused := h.srv.ArrivingHeads(); refused != 1 {
		t.Errorf("%d heads refused, want 1", refused)
	}
	if a := dialRaw(t, h).Do(proxytest.RawGet("/small")); a.Code != http.StatusOK || a.Body != "for /small" {
		t.Fatalf("a small request while the bound is reached: %+v", a)
	}

	// The first head ends: it is served, its room comes back, and a new large head fits.
	if a := first.Do(firstHead[len(firstHead)-10:]); a.Code != http.StatusOK || a.Body != "for /first" {
		t.Fatalf("the first head, ended: %+v", a)
	}
	if n := arriving(); n != 0 {
		t.Errorf("%d bytes of arriving heads counted once none arrives, want 0", n)
	}
	if a := dialRaw(t, h).Do(head("/third")); a.Code != http.StatusOK || a.Body != "for /third" {
		t.Fatalf("a large head once there is room again: %+v", a)
	}
	if n := arriving(); n != 0 {
		t.Errorf("%d bytes of arriving heads counted at the end, want 0", n)
	}
}
