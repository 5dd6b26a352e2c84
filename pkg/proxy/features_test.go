package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

func TestZonePreferenceFallbackAndOverride(t *testing.T) {
	sa, _ := backend(t, "zone-a")
	sb, _ := backend(t, "zone-b")
	epA, epB := endpointOf(t, sa.URL, "a"), endpointOf(t, sb.URL, "b")
	off := false
	unaware := entry("spread", "spread.example.com", "app")
	unaware.ZoneAware = &off
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app"), unaware}, func(o *proxy.Options, _ *proxy.Server) {
		o.Zone, o.ZoneAware = "a", true
	})
	h.src.Set(key("app"), epB, epA)

	for range 6 {
		if _, body, _ := h.mustGet("app.example.com", "/"); body != "zone-a /" {
			t.Fatalf("zone-aware request answered by %q, want zone-a", body)
		}
	}
	if v := h.metric("httpscale_interceptor_cross_zone_forwards_total", map[string]string{"app": "ns/app"}); v != 0 {
		t.Errorf("cross-zone forwards = %v with a same-zone endpoint, want 0", v)
	}
	seen := map[string]bool{}
	for range 6 {
		_, body, _ := h.mustGet("spread.example.com", "/")
		seen[body] = true
	}
	if !seen["zone-a /"] || !seen["zone-b /"] {
		t.Errorf("app with zone awareness off reached %v, want both zones", seen)
	}

	h.src.Set(key("app"), epB)
	if _, body, _ := h.mustGet("app.example.com", "/"); body != "zone-b /" {
		t.Fatalf("without a same-zone endpoint got %q, want zone-b", body)
	}
	if v := h.metric("httpscale_interceptor_cross_zone_forwards_total", map[string]string{"app": "ns/app"}); v != 1 {
		t.Errorf("cross-zone forwards = %v, want 1", v)
	}
}

// wsBackend accepts an HTTP upgrade and echoes lines until the client closes.
func wsBackend(t *testing.T) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		c, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		_ = rw.Flush()
		for {
			line, err := rw.ReadString('\n')
			if err != nil {
				return
			}
			_, _ = rw.WriteString("echo " + line)
			_ = rw.Flush()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// dialUpgrade opens a WebSocket-style upgrade through the proxy.
func dialUpgrade(t *testing.T, h *harness, host string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c := h.dial(t, 0)
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", host)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading upgrade response: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade answered %d, want 101", resp.StatusCode)
	}
	return c, br
}

func echo(t *testing.T, c net.Conn, br *bufio.Reader, msg string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "%s\n", msg)
	got, err := br.ReadString('\n')
	if err != nil || got != "echo "+msg+"\n" {
		t.Fatalf("echo of %q: %q %v", msg, got, err)
	}
}

func TestWebSocketPassesThroughAndCountsAsInFlight(t *testing.T) {
	s := wsBackend(t)
	h := newHarness(t, []routing.Entry{entry("ws", "ws.example.com", "ws")}, nil)
	h.src.Set(key("ws"), endpointOf(t, s.URL, ""))
	c, br := dialUpgrade(t, h, "ws.example.com")
	echo(t, c, br, "hello")
	echo(t, c, br, "again")
	if in, _, _ := h.count("ns/ws"); in != 1 {
		t.Errorf("in flight with an open WebSocket = %d, want 1", in)
	}
	c.Close()
	testenv.Eventually(t, 10*time.Second, "the closed WebSocket to leave the in-flight count", func() bool { in, _, _ := h.count("ns/ws"); return in == 0 })
}

func TestH2CFromClientsAndToBackends(t *testing.T) {
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "backend saw "+r.Proto)
	}))
	var bp http.Protocols
	bp.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &bp
	s.Start()
	t.Cleanup(s.Close)
	grpcish := entry("g", "g.example.com", "g")
	grpcish.Protocol = routing.ProtocolH2C
	h := newHarness(t, []routing.Entry{grpcish}, nil)
	h.src.Set(key("g"), endpointOf(t, s.URL, ""))

	var cp http.Protocols
	cp.SetUnencryptedHTTP2(true)
	client := &http.Client{Transport: &http.Transport{Protocols: &cp}, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, h.url+"/svc.Method", nil)
	req.Host = "g.example.com"
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || string(body) != "backend saw HTTP/2.0" {
		t.Errorf("h2c round trip: client %s %d %q, want HTTP/2 both ways", resp.Proto, resp.StatusCode, body)
	}
}

func TestDrainFinishesInFlightHeldAndWebSockets(t *testing.T) {
	release := make(chan struct{})
	slow, slowEP := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
		<-release
		_, _ = io.WriteString(w, "slow done")
	})
	_ = slow
	_, fastEP := backend(t, "fast")
	ws := wsBackend(t)
	h := newHarness(t, []routing.Entry{
		entry("slow", "slow.example.com", "slow"),
		entry("fast", "fast.example.com", "fast"),
		entry("cold", "cold.example.com", "cold"),
		entry("ws", "ws.example.com", "ws"),
	}, func(_ *proxy.Options, s *proxy.Server) { s.DrainDelay = 2 * time.Second })
	h.src.Set(key("slow"), slowEP)
	h.src.Set(key("fast"), fastEP)
	h.src.Set(key("ws"), endpointOf(t, ws.URL, ""))

	type result struct {
		code int
		body string
		err  error
	}
	slowRes, coldRes := make(chan result, 1), make(chan result, 1)
	go func() {
		c, b, _, err := h.get(context.Background(), "slow.example.com", "/")
		slowRes <- result{c, b, err}
	}()
	go func() {
		c, b, _, err := h.get(context.Background(), "cold.example.com", "/")
		coldRes <- result{c, b, err}
	}()
	c, br := dialUpgrade(t, h, "ws.example.com")
	testenv.Eventually(t, 10*time.Second, "the slow request to be in flight", func() bool { in, _, _ := h.count("ns/slow"); return in == 1 })
	wctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(wctx, key("cold"), 1); err != nil {
		t.Fatal(err)
	}

	h.stop() // SIGTERM
	testenv.Eventually(t, 10*time.Second, "readiness to fail", func() bool { return h.srv.Ready() != nil })
	// During the delay new requests are still served.
	if code, body, _ := h.mustGet("fast.example.com", "/"); code != 200 || body != "fast /" {
		t.Errorf("request during the drain delay: %d %q", code, body)
	}
	// Past the delay the listener closes; Shutdown then waits for the requests.
	testenv.Eventually(t, 10*time.Second, "the listener to close after the delay", func() bool {
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case err := <-h.stopped:
		t.Fatalf("server stopped (%v) with requests in flight", err)
	default:
	}
	close(release)
	h.src.Set(key("cold"), fastEP)
	if r := <-slowRes; r.err != nil || r.code != 200 || r.body != "slow done" {
		t.Errorf("in-flight request during drain: %d %q %v, want 200", r.code, r.body, r.err)
	}
	if r := <-coldRes; r.err != nil || r.code != 200 || r.body != "fast /" {
		t.Errorf("held request during drain: %d %q %v, want 200", r.code, r.body, r.err)
	}
	echo(t, c, br, "still open")
	select {
	case err := <-h.stopped:
		t.Fatalf("server stopped (%v) with a WebSocket open", err)
	case <-time.After(100 * time.Millisecond):
	}
	c.Close()
	select {
	case err := <-h.stopped:
		if err != nil {
			t.Errorf("Start returned %v after a clean drain", err)
		}
		h.stopped <- nil // for the harness cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("server did not stop after the WebSocket closed")
	}
}

func TestDrainTimeoutCutsOffWebSockets(t *testing.T) {
	ws := wsBackend(t)
	h := newHarness(t, []routing.Entry{entry("ws", "ws.example.com", "ws")}, func(_ *proxy.Options, s *proxy.Server) {
		s.DrainTimeout = 100 * time.Millisecond
	})
	h.src.Set(key("ws"), endpointOf(t, ws.URL, ""))
	c, br := dialUpgrade(t, h, "ws.example.com")
	echo(t, c, br, "hi")
	h.stop()
	select {
	case <-h.stopped:
		h.stopped <- nil
	case <-time.After(10 * time.Second):
		t.Fatal("server did not stop at the drain timeout")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadString('\n'); err == nil {
		t.Error("WebSocket still open after the drain timeout")
	}
}

func TestNeverDialsDestinationsOutsideTheTable(t *testing.T) {
	var canaryHits atomic.Int32
	canary, _ := backendFunc(t, func(w http.ResponseWriter, r *http.Request) { canaryHits.Add(1) })
	_, ep := backend(t, "app")
	catchAll := entry("all", "*", "app")
	h := newHarness(t, []routing.Entry{catchAll}, nil)
	h.src.Set(key("app"), ep)

	// An absolute-form request naming another server, as sent to an open forward proxy.
	c := h.dial(t, 0)
	fmt.Fprintf(c, "GET %s/steal HTTP/1.1\r\nHost: app.example.com\r\n\r\n", canary.URL)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "app /steal" {
		t.Errorf("absolute-form request: %d %q, want the routed app's answer", resp.StatusCode, body)
	}
	if n := canaryHits.Load(); n != 0 {
		t.Errorf("the named server was dialled %d times", n)
	}
}

func TestViaServiceDialsTheServiceName(t *testing.T) {
	s, ep := backend(t, "svc")
	var dialled atomic.Value
	e := entry("app", "app.example.com", "app")
	e.ViaService = true
	h := newHarness(t, []routing.Entry{e}, func(o *proxy.Options, _ *proxy.Server) {
		o.ClusterDomain = "example.internal"
		o.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			dialled.Store(addr)
			return (&net.Dialer{}).DialContext(ctx, network, strings.TrimPrefix(s.URL, "http://"))
		}
	})
	// Readiness still comes from the endpoints; the connection goes to the Service's name.
	h.src.Set(key("app"), ep)
	if code, body, _ := h.mustGet("app.example.com", "/"); code != 200 || body != "svc /" {
		t.Fatalf("got %d %q", code, body)
	}
	if got := dialled.Load(); got != "app.ns.svc.example.internal:80" {
		t.Errorf("dialled %v, want the Service's cluster name and port", got)
	}
}

func TestWebSocketHeldWhileColdThenUpgraded(t *testing.T) {
	ws := wsBackend(t)
	h := newHarness(t, []routing.Entry{entry("ws", "ws.example.com", "ws")}, nil)
	c := h.dial(t, 0)
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: ws.example.com\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(ctx, key("ws"), 1); err != nil {
		t.Fatal(err)
	}
	h.src.Set(key("ws"), endpointOf(t, ws.URL, ""))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get(proxy.HeaderColdStart) != "true" {
		t.Fatalf("held upgrade answered %d cold=%q, want 101 with the cold-start header", resp.StatusCode, resp.Header.Get(proxy.HeaderColdStart))
	}
	echo(t, c, br, "after a cold start")
	if in, held, _ := h.count("ns/ws"); in != 1 || held != 0 {
		t.Errorf("open WebSocket after a cold start: in flight %d held %d, want 1 0", in, held)
	}
}

// timeouts.request bounds a request until its answer, not an upgraded connection: a WebSocket keeps
// working past it (the API's promise), while the response-header timeout still bounds the wait for the
// 101.
func TestRequestTimeoutDoesNotCutAnOpenWebSocket(t *testing.T) {
	s := wsBackend(t)
	e := entry("ws", "ws.example.com", "ws")
	e.Timeouts.Request = 200 * time.Millisecond
	h := newHarness(t, []routing.Entry{e}, nil)
	h.src.Set(key("ws"), endpointOf(t, s.URL, ""))
	c, br := dialUpgrade(t, h, "ws.example.com")
	echo(t, c, br, "hello")
	time.Sleep(500 * time.Millisecond) // past the request timeout
	echo(t, c, br, "still there")
}
