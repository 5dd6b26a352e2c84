package proxy_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
)

// servers are the interceptor's three ways of serving a request: the event loops, the fast path on a
// goroutine per connection, and net/http alone. Counting rules must hold on each.
var servers = []struct {
	name string
	mod  func(*proxy.Server)
}{
	{"event loops", func(s *proxy.Server) { s.FastHTTP1, s.EventLoops = true, 2 }},
	{"fast path", func(s *proxy.Server) { s.FastHTTP1, s.EventLoops = true, 0 }},
	{"net/http", func(s *proxy.Server) { s.FastHTTP1, s.EventLoops = false, 0 }},
}

// noWake fails when the requests sent so far woke any app: it wakes the cold control app (a host
// of its own) and reads wake notices until the control's. A wake is published before a request is
// held and notices are delivered in order, so one of an earlier request would come first.
func noWake(t *testing.T, h *harness, wakes <-chan admin.WakeEvent, what string) {
	t.Helper()
	go func() { _, _, _, _ = h.get(context.Background(), "control.example.com", "/") }()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-wakes:
			if ev.Key == "ns/control" {
				return
			}
			t.Errorf("%s woke %s", what, ev.Key)
		case <-timeout:
			t.Fatal("the control app's request published no wake notice")
		}
	}
}

func TestIgnoredPathsAreForwardedWhenWarmAndNeverCountOrWake(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			_, ep := backend(t, "app")
			e := entry("app", "app.example.com", "app")
			e.Ignored = []string{"/healthz"}
			h := newHarness(t, []routing.Entry{e, entry("control", "control.example.com", "control")}, func(o *proxy.Options, s *proxy.Server) {
				o.RetryAfter = 7 * time.Second
				o.ReadinessTimeout = 100 * time.Millisecond // the control app stays cold
				o.WakeEvery = time.Nanosecond               // and publishes a wake at every request
				srv.mod(s)
			})
			wakes, cancel := h.reg.Subscribe(8)
			defer cancel()

			// At zero: 503 at once, saying the app is idle; no hold, no wake, no count.
			code, body, hdr := h.mustGet("app.example.com", "/healthz/live")
			if code != http.StatusServiceUnavailable || hdr.Get(proxy.HeaderIdle) != "true" || hdr.Get("Retry-After") != "7" || !strings.Contains(body, "app_idle") {
				t.Errorf("ignored path at zero: %d %q %v, want 503 app_idle with %s: true and Retry-After: 7", code, body, hdr, proxy.HeaderIdle)
			}
			noWake(t, h, wakes, "an ignored path at zero")
			if in, held, req := h.count("ns/app"); in != 0 || held != 0 || req != 0 {
				t.Errorf("counts after an ignored path at zero: in flight %d held %d requests %d, want 0 0 0", in, held, req)
			}

			// Warm: forwarded, still not counted; the app's other paths are.
			h.src.Set(key("app"), ep)
			for range 3 {
				if code, body, _ := h.mustGet("app.example.com", "/healthz"); code != 200 || body != "app /healthz" {
					t.Fatalf("ignored path when warm: %d %q, want 200 from the app", code, body)
				}
			}
			if _, _, req := h.count("ns/app"); req != 0 {
				t.Errorf("requests counted after 3 ignored requests = %d, want 0", req)
			}
			if code, body, _ := h.mustGet("app.example.com", "/healthzx"); code != 200 || body != "app /healthzx" {
				t.Fatalf("app path: %d %q", code, body)
			}
			if _, _, req := h.count("ns/app"); req != 1 {
				t.Errorf("requests counted after one request to the app's path = %d, want 1", req)
			}
			for _, a := range h.reg.CountsSince(0).Apps {
				if a.Key == "ns/app" && a.Requests != 1 {
					t.Errorf("admin counts of ns/app = %+v, want the one app request", a)
				}
			}
			if v := h.metric("httpscale_interceptor_upstream_errors_total", map[string]string{"app": "ns/app"}); v != 0 {
				t.Errorf("upstream errors = %v, want 0: an idle answer is not an upstream failure", v)
			}
		})
	}
}

func TestStaticRoutesAnswerWithoutTheAppAndNeverCountOrWake(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			_, ep := backend(t, "app")
			status, _ := backend(t, "status")
			var dialled atomic.Value
			e := entry("app", "app.example.com", "app")
			e.Static = []routing.StaticRoute{
				{PathPrefix: "/ping", Response: &routing.Placeholder{StatusCode: 418, Headers: map[string]string{"X-Static": "yes"}, Body: "pong"}},
				{PathPrefix: "/status", Backend: &routing.Backend{Service: "status", Port: 8080}},
			}
			h := newHarness(t, []routing.Entry{e, entry("control", "control.example.com", "control")}, func(o *proxy.Options, s *proxy.Server) {
				o.ClusterDomain = "example.internal"
				o.ReadinessTimeout = 100 * time.Millisecond // the control app stays cold
				o.WakeEvery = time.Nanosecond               // and publishes a wake at every request
				o.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
					if strings.HasPrefix(addr, "status.") {
						dialled.Store(addr)
						addr = strings.TrimPrefix(status.URL, "http://")
					}
					return (&net.Dialer{}).DialContext(ctx, network, addr)
				}
				srv.mod(s)
			})
			wakes, cancel := h.reg.Subscribe(8)
			defer cancel()

			check := func(state string) {
				t.Helper()
				code, body, hdr := h.mustGet("app.example.com", "/ping/x")
				if code != 418 || body != "pong" || hdr.Get("X-Static") != "yes" || hdr.Get(proxy.HeaderColdStart) != "" {
					t.Errorf("static response (%s): %d %q %v, want 418 pong with X-Static", state, code, body, hdr)
				}
				code, body, _ = h.mustGet("app.example.com", "/status/a")
				if code != 200 || body != "status /status/a" {
					t.Errorf("static Service (%s): %d %q, want 200 from the status Service", state, code, body)
				}
				if got := dialled.Load(); got != "status.ns.svc.example.internal:8080" {
					t.Errorf("static Service (%s): dialled %v, want the Service's cluster name and port", state, got)
				}
				noWake(t, h, wakes, "a static route "+state)
				if in, held, req := h.count("ns/app"); in != 0 || held != 0 || req != 0 {
					t.Errorf("counts after static routes (%s): in flight %d held %d requests %d, want 0 0 0", state, in, held, req)
				}
			}
			check("at zero")
			h.src.Set(key("app"), ep)
			check("warm")
			if code, body, _ := h.mustGet("app.example.com", "/pings"); code != 200 || body != "app /pings" {
				t.Errorf("app path next to a static route: %d %q", code, body)
			}
		})
	}
}

// TestAnIgnoredPathDoesNotKeepTheScalerSignalAlive reads what the scaler reads: the admin port's
// counts. A health-check loop on an ignored path leaves the app's request counter where it was.
func TestAnIgnoredPathDoesNotKeepTheScalerSignalAlive(t *testing.T) {
	_, ep := backend(t, "app")
	e := entry("app", "app.example.com", "app")
	e.Ignored = []string{"/healthz"}
	h := newHarness(t, []routing.Entry{e}, nil)
	h.src.Set(key("app"), ep)
	h.mustGet("app.example.com", "/work")
	before := h.reg.CountsSince(0)
	for range 20 {
		if code, _, _ := h.mustGet("app.example.com", "/healthz"); code != 200 {
			t.Fatalf("health check: %d", code)
		}
	}
	after := h.reg.CountsSince(0)
	if len(before.Apps) != 1 || len(after.Apps) != 1 || after.Apps[0].Requests != before.Apps[0].Requests || after.Apps[0].Concurrency() != 0 {
		t.Errorf("admin counts before %+v after %+v: 20 health checks must change nothing", before.Apps, after.Apps)
	}
}

// TestAnIgnoredRequestInFlightIsNoConcurrency holds an ignored request at the backend and reads the
// counts meanwhile: it must not be in flight for the scaler, while an app request is.
func TestAnIgnoredRequestInFlightIsNoConcurrency(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			arrived, release := make(chan string, 2), make(chan struct{})
			_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
				arrived <- r.URL.Path
				<-release
			})
			e := entry("app", "app.example.com", "app")
			e.Ignored = []string{"/healthz"}
			h := newHarness(t, []routing.Entry{e}, func(_ *proxy.Options, s *proxy.Server) { srv.mod(s) })
			h.src.Set(key("app"), ep)
			done := make(chan int, 2)
			send := func(path string) {
				go func() {
					code, _, _, err := h.get(context.Background(), "app.example.com", path)
					if err != nil {
						t.Error(err)
					}
					done <- code
				}()
				<-arrived
			}
			send("/healthz")
			if in, _, req := h.count("ns/app"); in != 0 || req != 0 {
				t.Errorf("an ignored request at the backend: in flight %d requests %d, want 0 0", in, req)
			}
			send("/work")
			if in, _, req := h.count("ns/app"); in != 1 || req != 1 {
				t.Errorf("an ignored and an app request at the backend: in flight %d requests %d, want 1 1", in, req)
			}
			close(release)
			for range 2 {
				if code := <-done; code != http.StatusOK {
					t.Errorf("status %d, want 200", code)
				}
			}
		})
	}
}
