package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// heldResult is the answer to one request sent by holdGet.
type heldResult struct {
	code int
	body string
	hdr  http.Header
	err  error
}

// holdGet sends GET path to host with extra header bytes (a header X-Pad of pad bytes) and returns
// a channel with its answer.
func (h *harness) holdGet(ctx context.Context, host, path string, pad int) <-chan heldResult {
	out := make(chan heldResult, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+path, nil)
		if err != nil {
			out <- heldResult{err: err}
			return
		}
		req.Host = host
		if pad > 0 {
			req.Header.Set("X-Pad", strings.Repeat("p", pad))
		}
		resp, err := h.client.Do(req)
		if err != nil {
			out <- heldResult{err: err}
			return
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, err = bufio.NewReader(resp.Body).WriteTo(&b)
		out <- heldResult{code: resp.StatusCode, body: b.String(), hdr: resp.Header, err: err}
	}()
	return out
}

// testCtx returns a context that ends when the test ends, before the harness drains: requests still
// held then go away instead of making the drain wait for its timeout.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

func (h *harness) waitHeld(app string, n int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.src.WaitWaiting(ctx, key(app), n); err != nil {
		h.t.Fatalf("%d requests for %s were not held: %v", n, app, err)
	}
}

func poolOpts(l queue.PoolLimits) func(*proxy.Options, *proxy.Server) {
	return func(o *proxy.Options, _ *proxy.Server) {
		o.Pool = queue.NewPool(l)
		o.RetryAfter = 3 * time.Second
	}
}

// forEachPath runs f as subtests for a server whose requests the event loops serve (fast=true:
// HTTP/1.1 heads up to the server's MaxHeaderBytes) and for one net/http serves alone.
func forEachPath(t *testing.T, f func(t *testing.T, fast bool)) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) { f(t, fast) })
	}
}

// onPath is mod (when set) on a server of the path fast (see forEachPath).
func onPath(fast bool, mod func(*proxy.Options, *proxy.Server)) func(*proxy.Options, *proxy.Server) {
	return func(o *proxy.Options, s *proxy.Server) {
		s.FastHTTP1 = fast
		if mod != nil {
			mod(o, s)
		}
	}
}

// servedBy fails the test unless the n requests held now are where the path fast serves them: on
// the event loops (fast) or on net/http.
func (h *harness) servedBy(fast bool, n int) {
	h.t.Helper()
	want := 0
	if fast {
		want = n
	}
	if got := h.srv.LoopConnections(); got != want {
		h.t.Fatalf("event loops serve %d connections, want %d (fast=%v)", got, want, fast)
	}
}

func expectRefused(t *testing.T, what string, r heldResult, reason string) {
	t.Helper()
	if r.err != nil || r.code != http.StatusServiceUnavailable || r.hdr.Get("Retry-After") != "3" || !strings.Contains(r.body, reason) {
		t.Fatalf("%s: %v %d Retry-After=%q %q, want 503 Retry-After=3 %s", what, r.err, r.code, r.hdr.Get("Retry-After"), r.body, reason)
	}
	if r.hdr.Get(proxy.HeaderColdStart) != "true" {
		t.Errorf("%s: the 503 lacks the cold-start header", what)
	}
}

// The interceptor holds at most MaxRequests for every app together; the next request is answered 503
// with Retry-After at once, and the held ones are still forwarded when the app wakes.
func TestHeldPoolBoundsRequests(t *testing.T) {
	forEachPath(t, func(t *testing.T, fast bool) {
		_, ep := backend(t, "a")
		h := newHarness(t, []routing.Entry{entry("a", "a.example.com", "a")}, onPath(fast, poolOpts(queue.PoolLimits{MaxRequests: 3})))
		ctx := testCtx(t)
		var held []<-chan heldResult
		for range 3 {
			held = append(held, h.holdGet(ctx, "a.example.com", "/", 0))
		}
		h.waitHeld("a", 3)
		h.servedBy(fast, 3)
		expectRefused(t, "fourth request", <-h.holdGet(ctx, "a.example.com", "/", 0), "pool_full")
		if v := h.metric("httpscale_interceptor_held_pool_refusals_total", map[string]string{"app": "ns/a"}); v != 1 {
			t.Errorf("pool refusals of ns/a = %v, want 1", v)
		}
		if v := h.metric("httpscale_interceptor_held_pool_requests", nil); v != 3 {
			t.Errorf("held_pool_requests = %v, want 3", v)
		}
		if v := h.metric("httpscale_interceptor_held_pool_max_requests", nil); v != 3 {
			t.Errorf("held_pool_max_requests = %v, want 3", v)
		}
		if v := h.metric("httpscale_interceptor_upstream_errors_total", map[string]string{"app": "ns/a", "reason": "pool_full"}); v != 0 {
			t.Errorf("a pool refusal counted as an upstream error")
		}
		h.src.Set(key("a"), ep)
		for i, c := range held {
			if r := <-c; r.err != nil || r.code != http.StatusOK {
				t.Fatalf("held request %d: %v %d, want 200", i, r.err, r.code)
			}
		}
		if c, b := h.proxyPool(t).Usage(); c != 0 || b != 0 {
			t.Errorf("pool after release: %d requests %d bytes, want 0 0", c, b)
		}
	})
}

// proxyPool returns the pool the harness was built with.
func (h *harness) proxyPool(t *testing.T) *queue.Pool {
	t.Helper()
	if h.pool == nil {
		t.Fatal("harness built without a pool")
	}
	return h.pool
}

// A flood for one app fills the pool; another app's request still gets held, and the flood's newest
// held request gives way with 503 "evicted".
func TestHeldPoolFloodGivesWayToAnotherApp(t *testing.T) {
	forEachPath(t, func(t *testing.T, fast bool) {
		_, epB := backend(t, "b")
		h := newHarness(t, []routing.Entry{entry("a", "a.example.com", "a"), entry("b", "b.example.com", "b")},
			onPath(fast, poolOpts(queue.PoolLimits{MaxRequests: 4})))
		ctx := testCtx(t)
		var flood []<-chan heldResult
		for i := range 4 {
			flood = append(flood, h.holdGet(ctx, "a.example.com", fmt.Sprintf("/%d", i), 0))
			h.waitHeld("a", i+1) // in order, so the last one is the newest
		}
		expectRefused(t, "the flood's fifth request", <-h.holdGet(ctx, "a.example.com", "/5", 0), "pool_full")

		b := h.holdGet(ctx, "b.example.com", "/b", 0)
		expectRefused(t, "the flood's newest held request", <-flood[3], "evicted")
		h.waitHeld("b", 1)
		if _, held, _ := h.count("ns/a"); held != 3 {
			t.Errorf("app a holds %d, want 3 (its oldest)", held)
		}
		if v := h.metric("httpscale_interceptor_held_pool_evictions_total", map[string]string{"app": "ns/a"}); v != 1 {
			t.Errorf("evictions of ns/a = %v, want 1", v)
		}
		// Contended: a is at its fair share and may not take b's room back.
		expectRefused(t, "the flood at its fair share", <-h.holdGet(ctx, "a.example.com", "/6", 0), "pool_full")
		h.src.Set(key("b"), epB)
		if r := <-b; r.err != nil || r.code != http.StatusOK || r.body != "b /b" {
			t.Fatalf("app b's held request: %v %d %q, want 200 from b", r.err, r.code, r.body)
		}
	})
}

// Large heads are charged for what they cost: an app of few big heads is held to its share of the
// bytes, and an app of small requests gets its half.
func TestHeldPoolChargesHeadBytes(t *testing.T) {
	const pad = 10 << 10
	big := int64(proxy.HeldBaseCost + proxy.HeldHeadFactor*(pad+200)) // the pad plus the other header lines, roughly
	h := newHarness(t, []routing.Entry{entry("a", "a.example.com", "a"), entry("b", "b.example.com", "b")},
		poolOpts(queue.PoolLimits{MaxBytes: 3*big + big/4}))
	ctx := testCtx(t)
	var flood []<-chan heldResult
	for i := range 3 {
		flood = append(flood, h.holdGet(ctx, "a.example.com", "/", pad))
		h.waitHeld("a", i+1)
	}
	expectRefused(t, "a fourth big head", <-h.holdGet(ctx, "a.example.com", "/", pad), "pool_full")
	_, used := h.pool.Usage()
	if used < 3*(proxy.HeldBaseCost+proxy.HeldHeadFactor*pad) || used > 3*big {
		t.Fatalf("pool charged %d bytes for 3 heads of %d, want about %d", used, pad, 3*big)
	}
	var small []<-chan heldResult
	for range 8 {
		small = append(small, h.holdGet(ctx, "b.example.com", "/", 0))
	}
	testenv.Eventually(t, 10*time.Second, "app b's requests to be held or refused", func() bool {
		_, held, _ := h.count("ns/b")
		return held+int64(h.metric("httpscale_interceptor_held_pool_refusals_total", map[string]string{"app": "ns/b"})) == 8
	})
	// a's three heads fill the pool; b takes the free room, and at the bound evicts a's newest
	// until b reaches half the bytes: b holds 5 (the fifth fits in the room left), a 1, 3 refused.
	_, heldA, _ := h.count("ns/a")
	_, heldB, _ := h.count("ns/b")
	if heldA != 1 || heldB != 5 {
		_, bytesA := h.pool.AppUsage(h.reg.App("ns/a"))
		_, bytesB := h.pool.AppUsage(h.reg.App("ns/b"))
		t.Errorf("a holds %d (%d bytes), b holds %d (%d bytes) of %d: want 1 and 5", heldA, bytesA, heldB, bytesB, h.pool.Limits().MaxBytes)
	}
	// Two of a's heads were evicted; their answers come from their own goroutines.
	evicted := 0
	deadline := time.After(10 * time.Second)
	answers := make(chan heldResult, len(flood))
	for _, c := range flood {
		go func() { answers <- <-c }()
	}
	for evicted < 2 {
		select {
		case r := <-answers:
			expectRefused(t, "an evicted big head", r, "evicted")
			evicted++
		case <-deadline:
			t.Fatalf("%d of a's big heads evicted after 10 s, want 2", evicted)
		}
	}
	if evicted != 2 {
		t.Errorf("%d of a's big heads evicted, want 2", evicted)
	}
	_ = small
}

// The head a request came with is charged on every path: the event loops' heads as net/http's.
func TestHeldPoolChargesTheHeadOnEveryPath(t *testing.T) {
	const pad = 3000
	forEachPath(t, func(t *testing.T, fast bool) {
		h := newHarness(t, []routing.Entry{entry("a", "a.example.com", "a")}, onPath(fast, poolOpts(queue.PoolLimits{MaxRequests: 10})))
		h.holdGet(testCtx(t), "a.example.com", "/", pad)
		h.waitHeld("a", 1)
		h.servedBy(fast, 1)
		low := int64(proxy.HeldBaseCost + proxy.HeldHeadFactor*pad)
		if _, used := h.pool.Usage(); used < low || used > low+proxy.HeldHeadFactor*300 {
			t.Errorf("pool charged %d bytes for a %d-byte pad, want %d plus the other header lines (under 300 bytes)", used, pad, low)
		}
	})
}

// Requests for many apps at once: the first fill the pool, the rest are refused without evicting
// anyone, and every app is woken all the same, so none stays at zero because others took the pool.
func TestHeldPoolManyAppsAreAllWoken(t *testing.T) {
	forEachPath(t, func(t *testing.T, fast bool) {
		const apps = 30
		var entries []routing.Entry
		for i := range apps {
			entries = append(entries, entry(fmt.Sprintf("app%d", i), fmt.Sprintf("app%d.example.com", i), fmt.Sprintf("svc%d", i)))
		}
		h := newHarness(t, entries, onPath(fast, poolOpts(queue.PoolLimits{MaxRequests: 10})))
		wakes, cancel := h.reg.Subscribe(apps)
		defer cancel()
		ctx := testCtx(t)
		results := make(chan heldResult, apps)
		for i := range apps {
			go func() { results <- <-h.holdGet(ctx, fmt.Sprintf("app%d.example.com", i), "/", 0) }()
		}
		for range apps - 10 {
			expectRefused(t, "a request beyond the pool", <-results, "pool_full")
		}
		testenv.Eventually(t, 10*time.Second, "10 requests held", func() bool { n, _ := h.pool.Usage(); return n == 10 })
		if n := h.pool.Evicted(); n != 0 {
			t.Errorf("%d evictions among apps holding one request each", n)
		}
		woken := map[string]bool{}
		for len(woken) < apps {
			select {
			case ev := <-wakes:
				woken[ev.Key] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("woken %d apps, want all %d", len(woken), apps)
			}
		}
	})
}

// A held request whose client trickles a body byte by byte costs the pool what it was charged when
// it was admitted, however long it trickles, and is still the one evicted when another app needs room.
func TestHeldPoolTrickledBodyWhileHeld(t *testing.T) {
	forEachPath(t, func(t *testing.T, fast bool) {
		h := newHarness(t, []routing.Entry{entry("a", "a.example.com", "a"), entry("b", "b.example.com", "b")},
			onPath(fast, poolOpts(queue.PoolLimits{MaxRequests: 2})))
		ctx := testCtx(t)
		h.holdGet(ctx, "a.example.com", "/first", 0)
		h.waitHeld("a", 1)
		c := h.dial(t, 20*time.Second)
		if _, err := fmt.Fprintf(c, "POST /upload HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 100000\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		h.waitHeld("a", 2)
		h.servedBy(fast, 2)
		_, before := h.pool.Usage()
		stopTrickle := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stopTrickle:
					return
				case <-time.After(5 * time.Millisecond):
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		})
		time.Sleep(300 * time.Millisecond) // some 60 bytes trickled while held
		if n, after := h.pool.Usage(); n != 2 || after != before {
			t.Errorf("pool while the body trickles: %d requests %d bytes, want 2 and the %d charged at admission", n, after, before)
		}
		b := h.holdGet(ctx, "b.example.com", "/", 0)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		close(stopTrickle)
		wg.Wait()
		if err != nil {
			t.Fatalf("the trickling request got no answer: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "3" {
			t.Errorf("the trickling request: %d Retry-After=%q, want 503 evicted", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		if !resp.Close {
			t.Errorf("the evicted request's answer does not close the connection: %v", resp.Header)
		}
		h.waitHeld("b", 1)
		_ = b

		// Refused at once (the pool is contended and a is above its share), with its body unread: the
		// answer does not wait for the body, and the connection is closed.
		c2 := h.dial(t, 10*time.Second)
		if _, err := fmt.Fprintf(c2, "POST /upload HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 100000\r\n\r\nxx"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c2)
		resp, err = http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("a refused request with a trickled body got no answer: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || !resp.Close {
			t.Errorf("refused request with a body: %d close=%v, want 503 and Connection: close", resp.StatusCode, resp.Close)
		}
		_ = c2.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("after the refusal the connection gave %v, want EOF: closed without reading the rest of the body", err)
		}
	})
}

// The bound on header blocks: a head larger than MaxHeaderBytes is answered 431 before it is
// routed, counted or held.
func TestHugeHeadIsRefusedBeforeItIsHeld(t *testing.T) {
	h := newHarness(t, []routing.Entry{entry("a", "a.example.com", "a")}, func(_ *proxy.Options, s *proxy.Server) {
		s.MaxHeaderBytes = 16 << 10
	})
	for _, size := range []int{8 << 10, 64 << 10} {
		c := h.dial(t, 10*time.Second)
		head := fmt.Sprintf("GET / HTTP/1.1\r\nHost: a.example.com\r\nX-Pad: %s\r\n\r\n", strings.Repeat("p", size))
		go func() { _, _ = c.Write([]byte(head)) }()
		if size < 16<<10 {
			h.waitHeld("a", 1)
			_ = c.Close()
			continue
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%d-byte head: %v", size, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d-byte head: %d, want 431", size, resp.StatusCode)
		}
	}
	testenv.Eventually(t, 10*time.Second, "the small head's request to end", func() bool { _, held, _ := h.count("ns/a"); return held == 0 })
	if _, _, req := h.count("ns/a"); req != 1 {
		t.Errorf("requests counted = %d, want 1 (the 431 is not counted)", req)
	}
}

// Caps: an object asking more than the fleet allows gets the cap.
func TestCapsOnTheObjectsOwnSettings(t *testing.T) {
	forEachPath(t, func(t *testing.T, fast bool) {
		e := entry("a", "a.example.com", "a")
		e.ColdStart.QueueLimit = 5000
		e.Timeouts.Readiness = time.Hour
		h := newHarness(t, []routing.Entry{e}, onPath(fast, func(o *proxy.Options, _ *proxy.Server) {
			o.MaxQueueLimit = 2
			o.MaxReadinessTimeout = 300 * time.Millisecond
		}))
		ctx := testCtx(t)
		start := time.Now()
		first := h.holdGet(ctx, "a.example.com", "/", 0)
		second := h.holdGet(ctx, "a.example.com", "/", 0)
		h.waitHeld("a", 2)
		r := <-h.holdGet(ctx, "a.example.com", "/", 0)
		if r.code != http.StatusServiceUnavailable || !strings.Contains(r.body, "queue_full") {
			t.Errorf("third request: %d %q, want 503 queue_full (queue limit capped at 2)", r.code, r.body)
		}
		for _, c := range []<-chan heldResult{first, second} {
			if r := <-c; r.code != http.StatusGatewayTimeout {
				t.Errorf("held request: %d, want 504 after the capped readiness timeout", r.code)
			}
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("held for %s: the readiness timeout of 1h was not capped", d)
		}
	})
}

// --max-request-timeout bounds an app without a timeout of its own as one asking for more: the
// wait for the response head (504) and the whole response (cut off), on both paths.
func TestRequestTimeoutCapBoundsAnAppWithoutOne(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/started" {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "started")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done(): // the interceptor gave up on it
		case <-time.After(30 * time.Second):
		}
	}
	_, ep := backendFunc(t, hang)
	forEachPath(t, func(t *testing.T, fast bool) {
		none := entry("none", "none.example.com", "none")
		more := entry("more", "more.example.com", "more")
		more.Timeouts.Request, more.Timeouts.ResponseHeader = time.Hour, time.Hour
		h := newHarness(t, []routing.Entry{none, more}, onPath(fast, func(o *proxy.Options, _ *proxy.Server) {
			o.RequestTimeout, o.ResponseHeaderTimeout = 0, 0 // no fleet default
			o.MaxRequestTimeout = 300 * time.Millisecond
		}))
		h.src.Set(key("none"), ep)
		h.src.Set(key("more"), ep)
		for _, host := range []string{"none.example.com", "more.example.com"} {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			code, _, _, err := h.get(ctx, host, "/")
			if err != nil || code != http.StatusGatewayTimeout {
				t.Errorf("%s, no response head: %d %v, want 504 after the capped response-header timeout", host, code, err)
			}
			code, body, _, err := h.get(ctx, host, "/started")
			if err == nil || ctx.Err() != nil {
				t.Errorf("%s, a response that never ends: %d %q %v, want it cut off after the capped request timeout", host, code, body, err)
			}
			cancel()
		}
	})
}

// Requests waiting for a connection to a pod whose connections are all busy are bounded: one more
// is answered 503 upstream_busy with Retry-After at once, and the waiting ones are still served.
func TestLineForAnUpstreamConnectionIsBounded(t *testing.T) {
	forEachPath(t, func(t *testing.T, fast bool) {
		release := make(chan struct{})
		arrived := make(chan struct{}, 8)
		_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
			arrived <- struct{}{}
			<-release
			_, _ = io.WriteString(w, "ok")
		})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		t.Cleanup(free) // before the backend closes: a failed test does not leave its handlers waiting
		h := newHarness(t, []routing.Entry{entry("a", "a.example.com", "a")}, onPath(fast, func(o *proxy.Options, _ *proxy.Server) {
			o.MaxConnsPerEndpoint, o.MaxWaitingPerEndpoint = 1, 1
			o.RetryAfter = 3 * time.Second
		}))
		h.src.Set(key("a"), ep)
		ctx := testCtx(t)
		first := h.holdGet(ctx, "a.example.com", "/1", 0)
		<-arrived // the one connection is busy
		// Of two more, one waits in line and the other finds the line full.
		second, third := h.holdGet(ctx, "a.example.com", "/2", 0), h.holdGet(ctx, "a.example.com", "/3", 0)
		var busy heldResult
		var waiting <-chan heldResult
		select {
		case busy = <-second:
			waiting = third
		case busy = <-third:
			waiting = second
		case <-time.After(10 * time.Second):
			t.Fatal("neither request beyond the line was answered")
		}
		if busy.err != nil || busy.code != http.StatusServiceUnavailable || busy.hdr.Get("Retry-After") != "3" || !strings.Contains(busy.body, "upstream_busy") {
			t.Fatalf("request beyond the line: %v %d Retry-After=%q %q, want 503 upstream_busy with Retry-After", busy.err, busy.code, busy.hdr.Get("Retry-After"), busy.body)
		}
		free()
		for i, c := range []<-chan heldResult{first, waiting} {
			if r := <-c; r.err != nil || r.code != http.StatusOK || r.body != "ok" {
				t.Errorf("request %d: %v %d %q, want 200 ok", i, r.err, r.code, r.body)
			}
		}
	})
}
