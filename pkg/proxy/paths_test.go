package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
)

// The request logic behind either of the engine's paths (the event loops, net/http): the engine's
// own behaviour is tested in pkg/proxy/engine against a fake logic; these hold the proxy's counts,
// metrics and per-app settings to both paths.

// Every request is counted and recorded before its response reaches the client, on both paths.
func TestMetricsAndCountsOnBothPaths(t *testing.T) {
	onBothPaths(t, func(t *testing.T, h *harness, _ bool) {
		_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/missing":
				http.Error(w, "missing", http.StatusNotFound)
			case "/busy":
				http.Error(w, "busy", http.StatusServiceUnavailable)
			default:
				_, _ = io.WriteString(w, "ok")
			}
		})
		h.src.Set(key("app"), ep)
		responses := func(code string) float64 {
			return h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/app", "code": code})
		}
		const n = 5
		for i := 1; i <= n; i++ {
			if code, body, _ := h.mustGet("app.example.com", "/"); code != http.StatusOK || body != "ok" {
				t.Fatalf("request %d: %d %q", i, code, body)
			}
			in, held, req := h.count("ns/app")
			if got := responses("2xx"); got != float64(i) || in != 0 || held != 0 || req != uint64(i) {
				t.Errorf("after %d requests: 2xx %v, in flight %d, held %d, requests %d", i, got, in, held, req)
			}
		}
		if code, _, _ := h.mustGet("app.example.com", "/missing"); code != http.StatusNotFound {
			t.Errorf("/missing: %d", code)
		}
		if code, _, _ := h.mustGet("app.example.com", "/busy"); code != http.StatusServiceUnavailable {
			t.Errorf("/busy: %d", code)
		}
		got := map[string]float64{
			"2xx": responses("2xx"), "4xx": responses("4xx"), "5xx": responses("5xx"), "499": responses("499"),
			"duration observations": h.metric("httpscale_interceptor_request_duration_seconds", map[string]string{"app": "ns/app"}),
			"requests metric":       h.metric("httpscale_interceptor_requests_total", map[string]string{"app": "ns/app"}),
			"in flight metric":      h.metric("httpscale_interceptor_in_flight", map[string]string{"app": "ns/app"}),
			"upstream errors":       h.metric("httpscale_interceptor_upstream_errors_total", nil),
			"cold starts":           h.metric("httpscale_interceptor_cold_starts_total", map[string]string{"app": "ns/app"}),
		}
		want := map[string]float64{
			"2xx": n, "4xx": 1, "5xx": 1, "499": 0, "duration observations": n + 2, "requests metric": n + 2,
			"in flight metric": 0, "upstream errors": 0, "cold starts": 0,
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("metrics (-want +got):\n%s", d)
		}
	})
}

// Apps with timeouts, Service-addressed apps and cold apps are served on both paths, the event
// loops included, with the logic's answers (the cold-start header on a held request's response).
func TestEveryAppOnBothPaths(t *testing.T) {
	withTimeout := func(set func(*routing.Timeouts)) routing.Entry {
		e := entry("app", "app.example.com", "app")
		set(&e.Timeouts)
		return e
	}
	viaService := entry("app", "app.example.com", "app")
	viaService.ViaService = true
	cases := []struct {
		name  string
		entry routing.Entry
		cold  bool // no ready endpoint when the request arrives
	}{
		{"request timeout", withTimeout(func(to *routing.Timeouts) { to.Request = time.Minute }), false},
		{"response header timeout", withTimeout(func(to *routing.Timeouts) { to.ResponseHeader = time.Minute }), false},
		{"via the Service", viaService, false},
		{"cold app", entry("app", "app.example.com", "app"), true},
	}
	for _, tc := range cases {
		for _, fast := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fast=%v", tc.name, fast), func(t *testing.T) {
				// Created before the harness, so that the dialer can lead the Service's name to it.
				s, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "for "+r.Host) })
				target := strings.TrimPrefix(s.URL, "http://")
				h := newHarness(t, []routing.Entry{tc.entry}, func(o *proxy.Options, srv *proxy.Server) {
					srv.FastHTTP1 = fast
					o.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
						if strings.HasSuffix(addr, ".svc.cluster.local:80") {
							addr = target // the Service's name leads to the backend
						}
						return (&net.Dialer{}).DialContext(ctx, network, addr)
					}
				})
				type answer struct {
					code int
					body string
					hdr  http.Header
					err  error
				}
				got := make(chan answer, 1)
				go func() {
					code, body, hdr, err := h.get(context.Background(), "app.example.com", "/")
					got <- answer{code, body, hdr, err}
				}()
				if tc.cold {
					ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
					defer stop()
					if err := h.src.WaitWaiting(ctx, key("app"), 1); err != nil {
						t.Fatalf("the request was not held: %v", err)
					}
				}
				h.src.Set(key("app"), ep)
				a := <-got
				if a.err != nil || a.code != http.StatusOK || a.body != "for app.example.com" {
					t.Fatalf("got %d %q %v", a.code, a.body, a.err)
				}
				if tc.cold && a.hdr.Get(proxy.HeaderColdStart) != "true" {
					t.Errorf("the held request's response lacks %s: %v", proxy.HeaderColdStart, a.hdr)
				}
			})
		}
	}
}
