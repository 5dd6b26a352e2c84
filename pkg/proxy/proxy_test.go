package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

func TestRoutesWarmRequestsAndRejectsUnknownHosts(t *testing.T) {
	_, ep := backend(t, "shop")
	h := newHarness(t, []routing.Entry{entry("shop", "shop.example.com", "shop")}, nil)
	h.src.Set(key("shop"), ep)

	code, body, hdr := h.mustGet("Shop.Example.com:8080", "/cart")
	if code != http.StatusOK || body != "shop /cart" {
		t.Fatalf("routed request: %d %q, want 200 %q", code, body, "shop /cart")
	}
	got := map[string]string{
		"host": hdr.Get("X-Seen-Host"), "xff": hdr.Get("X-Seen-Forwarded-For"),
		"xfh": hdr.Get("X-Seen-Forwarded-Host"), "xfp": hdr.Get("X-Seen-Forwarded-Proto"),
		"cold": hdr.Get(proxy.HeaderColdStart),
	}
	want := map[string]string{
		"host": "Shop.Example.com:8080", "xff": "127.0.0.1", "xfh": "Shop.Example.com:8080", "xfp": "http", "cold": "",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("what the backend saw (-want +got):\n%s", d)
	}

	// A client claiming to be an ingress that terminated TLS is not a trusted proxy (none is by
	// default): the backend sees what the interceptor saw (TestForgedForwardingHeaders has the rest).
	req, _ := http.NewRequest(http.MethodGet, h.url+"/", nil)
	req.Host = "shop.example.com"
	req.Header.Set("X-Forwarded-Proto", "https")
	req.Header.Set("X-Forwarded-Host", "www.example.com")
	req.Header.Set("X-Forwarded-For", "203.0.113.7")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	got = map[string]string{"xff": resp.Header.Get("X-Seen-Forwarded-For"), "xfh": resp.Header.Get("X-Seen-Forwarded-Host"), "xfp": resp.Header.Get("X-Seen-Forwarded-Proto")}
	want = map[string]string{"xff": "127.0.0.1", "xfh": "shop.example.com", "xfp": "http"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("forged forwarding headers (-want +got):\n%s", d)
	}

	code, body, _ = h.mustGet("other.example.com", "/")
	if code != http.StatusNotFound || body != "Not Found: no_route\n" {
		t.Errorf("unknown host: %d %q, want 404 with a short plain body", code, body)
	}
	if _, _, req := h.count("ns/shop"); req != 2 {
		t.Errorf("requests counted for ns/shop = %d, want 2 (unrouted requests are not counted)", req)
	}
	if v := h.metric("httpscale_interceptor_unrouted_requests_total", nil); v != 1 {
		t.Errorf("unrouted metric = %v, want 1", v)
	}
	if v := h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/shop", "code": "2xx"}); v != 2 {
		t.Errorf("2xx responses of ns/shop = %v, want 2", v)
	}
}

func TestHoldsUntilReadyAndReleasesEveryHeldRequest(t *testing.T) {
	_, ep := backend(t, "app")
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
	wakes, cancel := h.reg.Subscribe(8)
	defer cancel()

	const n = 20
	type result struct {
		code int
		body string
		hdr  http.Header
		err  error
	}
	results := make(chan result, n)
	for range n {
		go func() {
			code, body, hdr, err := h.get(context.Background(), "app.example.com", "/x")
			results <- result{code, body, hdr, err}
		}()
	}
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(ctx, key("app"), n); err != nil {
		t.Fatalf("requests were not held: %v", err)
	}
	select {
	case ev := <-wakes:
		if ev.Key != "ns/app" {
			t.Errorf("wake event for %q, want ns/app", ev.Key)
		}
	case <-ctx.Done():
		t.Fatal("no wake event while requests were held")
	}
	if in, held, req := h.count("ns/app"); in != 0 || held != n || req != n {
		t.Errorf("counts while held: in flight %d held %d requests %d, want 0 %d %d", in, held, req, n, n)
	}
	if d := h.reg.CountsSince(0).Apps; len(d) != 1 || d[0].Concurrency() != n {
		t.Errorf("admin counts while held = %+v, want concurrency %d", d, n)
	}

	h.src.Set(key("app"), ep)
	for range n {
		r := <-results
		if r.err != nil || r.code != http.StatusOK || r.body != "app /x" {
			t.Fatalf("held request: %v %d %q, want 200", r.err, r.code, r.body)
		}
		if r.hdr.Get(proxy.HeaderColdStart) != "true" || r.hdr.Get(proxy.HeaderColdStartWait) == "" {
			t.Errorf("held response lacks cold-start headers: %v", r.hdr)
		}
	}
	if in, held, _ := h.count("ns/app"); in != 0 || held != 0 {
		t.Errorf("counts after release: in flight %d held %d, want 0 0", in, held)
	}
	if v := h.metric("httpscale_interceptor_cold_start_wait_seconds", map[string]string{"app": "ns/app"}); v != n {
		t.Errorf("cold-start wait observations = %v, want %d", v, n)
	}
	// Warm now: no cold-start header.
	if _, _, hdr := h.mustGet("app.example.com", "/"); hdr.Get(proxy.HeaderColdStart) != "" {
		t.Error("warm request carries the cold-start header")
	}
}

func TestFullHoldQueueAnswers503WithRetryAfter(t *testing.T) {
	e := entry("app", "app.example.com", "app")
	e.ColdStart.QueueLimit = 2
	h := newHarness(t, []routing.Entry{e}, func(o *proxy.Options, _ *proxy.Server) { o.RetryAfter = 7 * time.Second })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() { _, _, _, _ = h.get(ctx, "app.example.com", "/") })
	}
	wctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(wctx, key("app"), 2); err != nil {
		t.Fatal(err)
	}
	code, body, hdr := h.mustGet("app.example.com", "/")
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "7" || !strings.Contains(body, "queue_full") {
		t.Errorf("third request: %d Retry-After=%q %q, want 503 Retry-After=7 queue_full", code, hdr.Get("Retry-After"), body)
	}
	if v := h.metric("httpscale_interceptor_queue_rejections_total", map[string]string{"app": "ns/app"}); v != 1 {
		t.Errorf("queue rejections = %v, want 1", v)
	}
	// What the chart's alert compares held requests with.
	if v := h.metric("httpscale_interceptor_queue_limit", map[string]string{"app": "ns/app"}); v != 2 {
		t.Errorf("queue limit = %v, want the object's coldStart.queueLimit 2", v)
	}
	cancel()
	wg.Wait()
	testenv.Eventually(t, 10*time.Second, "held requests to leave the queue", func() bool { _, held, _ := h.count("ns/app"); return held == 0 })
}

func TestReadinessTimeoutAnswers504(t *testing.T) {
	e := entry("app", "app.example.com", "app")
	e.Timeouts.Readiness = 50 * time.Millisecond
	h := newHarness(t, []routing.Entry{e}, nil)
	code, body, hdr := h.mustGet("app.example.com", "/")
	if code != http.StatusGatewayTimeout || !strings.Contains(body, "readiness_timeout") {
		t.Errorf("got %d %q, want 504 readiness_timeout", code, body)
	}
	if hdr.Get(proxy.HeaderColdStart) != "true" {
		t.Error("504 after holding lacks the cold-start header")
	}
	if _, held, _ := h.count("ns/app"); held != 0 {
		t.Errorf("held = %d after the timeout, want 0", held)
	}
}

func TestReadinessTimeoutUsesFallbackThenPlaceholder(t *testing.T) {
	_, fbEP := backend(t, "fallback")
	withFallback := entry("fb", "fb.example.com", "app")
	withFallback.Timeouts.Readiness = 50 * time.Millisecond
	withFallback.ColdStart.Fallback = &routing.Backend{Service: "sorry", Port: 80}
	withPlaceholder := entry("ph", "ph.example.com", "app")
	withPlaceholder.Timeouts.Readiness = 50 * time.Millisecond
	withPlaceholder.ColdStart.Placeholder = &routing.Placeholder{
		StatusCode: 202, Headers: map[string]string{"Content-Type": "text/html"}, Body: "<p>warming up</p>",
	}
	h := newHarness(t, []routing.Entry{withFallback, withPlaceholder}, nil)
	h.src.Set(key("sorry"), fbEP)

	code, body, hdr := h.mustGet("fb.example.com", "/page")
	if code != http.StatusOK || body != "fallback /page" || hdr.Get(proxy.HeaderColdStart) != "true" {
		t.Errorf("fallback: %d %q cold=%q, want 200 from the fallback with the cold-start header", code, body, hdr.Get(proxy.HeaderColdStart))
	}
	code, body, hdr = h.mustGet("ph.example.com", "/")
	if code != 202 || body != "<p>warming up</p>" || hdr.Get("Content-Type") != "text/html" || hdr.Get(proxy.HeaderColdStart) != "true" {
		t.Errorf("placeholder: %d %q %v", code, body, hdr)
	}
}

func TestDialFailureRetriesAnotherEndpointAndMarksItBad(t *testing.T) {
	_, good := backend(t, "good")
	dead := deadEndpoint(t)
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
	h.src.Set(key("app"), dead, good)
	for i := range 6 {
		code, body, _ := h.mustGet("app.example.com", "/")
		if code != http.StatusOK || body != "good /" {
			t.Fatalf("request %d: %d %q, want 200 from the good endpoint", i, code, body)
		}
	}
	if v := h.metric("httpscale_interceptor_upstream_errors_total", nil); v != 0 {
		t.Errorf("upstream errors = %v after successful retries, want 0", v)
	}
	// With only the dead endpoint, the request fails with 502 and is counted as an upstream error.
	h.src.Set(key("app"), dead)
	code, body, _ := h.mustGet("app.example.com", "/")
	if code != http.StatusBadGateway || !strings.Contains(body, "dial") {
		t.Errorf("only a dead endpoint: %d %q, want 502 dial", code, body)
	}
	if v := h.metric("httpscale_interceptor_upstream_errors_total", map[string]string{"app": "ns/app", "reason": "dial"}); v != 1 {
		t.Errorf("dial errors = %v, want 1", v)
	}
}

// deadEndpoint returns a loopback address nothing listens on.
func deadEndpoint(t *testing.T) endpoints.Endpoint {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	_ = ln.Close()
	return endpointOf(t, addr, "")
}

func TestNoRetryOnceTheRequestWasSent(t *testing.T) {
	var hits atomic.Int32
	hangUp := func() endpoints.Endpoint {
		_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			c, _, _ := http.NewResponseController(w).Hijack()
			_ = c.Close() // the request arrived; the connection dies before a response
		})
		return ep
	}
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
	h.src.Set(key("app"), hangUp(), hangUp())
	req, _ := http.NewRequest(http.MethodPost, h.url+"/", strings.NewReader("payload"))
	req.Host = "app.example.com"
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("status %d, want 502", resp.StatusCode)
	}
	if total := hits.Load(); total != 1 {
		t.Errorf("upstream saw the POST %d times, want exactly 1 (no retry after sending)", total)
	}
}

// TestTimeoutsAnswer504: an app slower than its per-app response-header or request timeout is
// answered 504 with the timeout named.
func TestTimeoutsAnswer504(t *testing.T) {
	for _, tc := range []struct {
		reason string
		set    func(*routing.Timeouts)
	}{
		{"response_header_timeout", func(to *routing.Timeouts) { to.ResponseHeader = 50 * time.Millisecond }},
		{"request_timeout", func(to *routing.Timeouts) { to.Request = 50 * time.Millisecond }},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			release := make(chan struct{})
			defer close(release)
			_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			})
			e := entry("app", "app.example.com", "app")
			tc.set(&e.Timeouts)
			h := newHarness(t, []routing.Entry{e}, nil)
			h.src.Set(key("app"), ep)
			code, body, _ := h.mustGet("app.example.com", "/")
			if code != http.StatusGatewayTimeout || !strings.Contains(body, tc.reason) {
				t.Errorf("got %d %q, want 504 %s", code, body, tc.reason)
			}
		})
	}
}

// A client that goes away while its request is held or forwarded is recorded as 499, not as an
// upstream error, and leaves nothing counted behind.
func TestClientCancelIs499NotUpstreamError(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setUp readies the app and returns a function that returns once the request got where
		// the case wants it.
		setUp func(t *testing.T, h *harness) (reached func())
		// left is what must be back to zero once the client left.
		left string
	}{{
		name: "while held",
		setUp: func(t *testing.T, h *harness) func() {
			return func() {
				wctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
				defer stop()
				if err := h.src.WaitWaiting(wctx, key("app"), 1); err != nil {
					t.Fatal(err)
				}
			}
		},
		left: "held",
	}, {
		name: "while forwarded",
		setUp: func(t *testing.T, h *harness) func() {
			arrived := make(chan struct{}, 1)
			_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
				arrived <- struct{}{}
				<-r.Context().Done() // the proxy cancels the upstream request when the client goes away
			})
			h.src.Set(key("app"), ep)
			return func() { <-arrived }
		},
		left: "in flight",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
			reached := tc.setUp(t, h)
			ctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { _, _, _, err := h.get(ctx, "app.example.com", "/"); errc <- err }()
			reached()
			cancel()
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Fatalf("client error %v, want context.Canceled", err)
			}
			testenv.Eventually(t, 10*time.Second, "the 499 to be recorded", func() bool {
				return h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": "499"}) == 1
			})
			if v := h.metric("httpscale_interceptor_upstream_errors_total", nil); v != 0 {
				t.Errorf("upstream errors = %v, want 0 for a client that went away", v)
			}
			in, held, _ := h.count("ns/app")
			if n := map[string]int64{"held": held, "in flight": in}[tc.left]; n != 0 {
				t.Errorf("%s = %d after the client left, want 0", tc.left, n)
			}
		})
	}
}

func TestRequestsOfRemovedAppsAreNotRoutedAndCountersReset(t *testing.T) {
	_, ep := backend(t, "app")
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
	h.src.Set(key("app"), ep)
	h.mustGet("app.example.com", "/")
	h.setTable()
	if code, _, _ := h.mustGet("app.example.com", "/"); code != http.StatusNotFound {
		t.Errorf("removed app answered %d, want 404", code)
	}
	if d := cmp.Diff([]admin.AppCount{}, h.reg.CountsSince(0).Apps); d != "" {
		t.Errorf("counts after removal (-want +got):\n%s", d)
	}
}

func TestHopByHopHeadersAreRemovedOnTheFastPath(t *testing.T) {
	_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Keep-Alive", r.Header.Get("Keep-Alive"))
		w.Header().Set("X-Seen-Te", r.Header.Get("Te"))
		w.Header().Set("X-Seen-Proxy-Connection", r.Header.Get("Proxy-Connection"))
		w.Header().Set("X-Seen-End-To-End", r.Header.Get("X-End-To-End"))
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("Proxy-Authenticate", "Basic")
		_, _ = io.WriteString(w, "ok")
	})
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
	h.src.Set(key("app"), ep)
	c := h.dial(t, 30*time.Second)
	br := bufio.NewReader(c)
	for i := range 2 { // twice on one keep-alive connection
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: app.example.com\r\nConnection: keep-alive\r\nKeep-Alive: timeout=9\r\n"+
			"Te: gzip\r\nProxy-Connection: keep-alive\r\nX-End-To-End: yes\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		got := map[string]string{
			"code": strconv.Itoa(resp.StatusCode), "body": string(b),
			"keep-alive seen": resp.Header.Get("X-Seen-Keep-Alive"), "te seen": resp.Header.Get("X-Seen-Te"),
			"proxy-connection seen": resp.Header.Get("X-Seen-Proxy-Connection"), "end-to-end seen": resp.Header.Get("X-Seen-End-To-End"),
			"keep-alive returned": resp.Header.Get("Keep-Alive"), "proxy-authenticate returned": resp.Header.Get("Proxy-Authenticate"),
		}
		want := map[string]string{"code": "200", "body": "ok", "keep-alive seen": "", "te seen": "", "proxy-connection seen": "",
			"end-to-end seen": "yes", "keep-alive returned": "", "proxy-authenticate returned": ""}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("request %d (-want +got):\n%s", i, d)
		}
	}
}

func TestFastPathForwardingMatchesReverseProxy(t *testing.T) {
	_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/broken": // promises 10 bytes, sends 4, dies
			w.Header().Set("Content-Length", "10")
			_, _ = io.WriteString(w, "part")
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		}
		_, hasUA := r.Header["User-Agent"]
		w.Header().Set("X-Seen-User-Agent", strconv.FormatBool(hasUA))
		w.Header().Set("X-Seen-Forwarded", r.Header.Get("Forwarded"))
		w.Header().Set("X-Seen-Te", r.Header.Get("Te"))
		w.Header().Set("X-Seen-Query", r.URL.RawQuery)
		w.Header().Set("Trailer", "X-Checksum")
		_, _ = io.WriteString(w, "chunk1,")
		w.(http.Flusher).Flush() // no Content-Length: streamed to the client chunked
		_, _ = io.WriteString(w, "chunk2")
		w.Header().Set("X-Checksum", "42")
	})
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
	h.src.Set(key("app"), ep)
	c := h.dial(t, 30*time.Second)
	br := bufio.NewReader(c)
	_, _ = io.WriteString(c, "GET /s?a=1&b=2 HTTP/1.1\r\nHost: app.example.com\r\nForwarded: for=1.2.3.4\r\nTe: trailers\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{
		"code": strconv.Itoa(resp.StatusCode), "body": string(b), "trailer": resp.Trailer.Get("X-Checksum"),
		"user-agent sent": resp.Header.Get("X-Seen-User-Agent"), "forwarded": resp.Header.Get("X-Seen-Forwarded"),
		"te": resp.Header.Get("X-Seen-Te"), "query": resp.Header.Get("X-Seen-Query"),
	}
	want := map[string]string{"code": "200", "body": "chunk1,chunk2", "trailer": "42", "user-agent sent": "false",
		"forwarded": "", "te": "trailers", "query": "a=1&b=2"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}

	// A body that breaks midway is not passed on as a complete response: the connection is closed
	// (what was still buffered, here the head and "part", is not sent).
	_, _ = io.WriteString(c, "GET /broken HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err == nil {
		b, err = io.ReadAll(resp.Body)
		if err == nil {
			t.Errorf("broken upstream body passed on as a complete response: %d %q", resp.StatusCode, b)
		}
	} else if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		t.Errorf("broken upstream body: %v, want the connection closed", err)
	}
}
