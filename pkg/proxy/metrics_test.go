package proxy_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
)

// seriesByApp gathers h's metrics and returns, per app label value, the metric families that have a
// series of it ("" for series without an app label), and the number of series in all.
func seriesByApp(t *testing.T, h *harness) (map[string][]string, int) {
	t.Helper()
	mfs, err := h.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen, n := map[string][]string{}, 0
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			n++
			app := ""
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "app" {
					app = lp.GetValue()
				}
			}
			if !slices.Contains(seen[app], mf.GetName()) {
				seen[app] = append(seen[app], mf.GetName())
			}
		}
	}
	for _, names := range seen {
		slices.Sort(names)
	}
	return seen, n
}

// The default per-app metrics are counters read at scrape time: a routed app that got no request
// has only in_flight, held and requests_total; one that got requests adds its hold-queue limit and
// the counters that are not zero (here responses_total{code="2xx"}), and no histogram names an app
// (the fleet's count every request). The limit is the routing table's in use.
func TestPerAppCountersByDefault(t *testing.T) {
	_, ep := backend(t, "shop")
	h := newHarness(t, []routing.Entry{entry("shop", "shop.example.com", "shop"), entry("idle", "idle.example.com", "idle")}, nil)
	h.src.Set(key("shop"), ep)
	for range 3 {
		if code, _, _ := h.mustGet("shop.example.com", "/"); code != http.StatusOK {
			t.Fatalf("GET shop: %d", code)
		}
	}
	seen, _ := seriesByApp(t, h)
	gauges := []string{"httpscale_interceptor_held", "httpscale_interceptor_in_flight", "httpscale_interceptor_requests_total"}
	if diff := cmp.Diff(gauges, seen["ns/idle"]); diff != "" {
		t.Errorf("series of the idle app (-want +got):\n%s", diff)
	}
	want := append(slices.Clone(gauges), "httpscale_interceptor_queue_limit", "httpscale_interceptor_responses_total")
	slices.Sort(want)
	if diff := cmp.Diff(want, seen["ns/shop"]); diff != "" {
		t.Errorf("series of the requested app (-want +got):\n%s", diff)
	}
	if v := h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/shop", "code": "2xx"}); v != 3 {
		t.Errorf("2xx responses of ns/shop = %v, want 3", v)
	}
	if v := h.metric("httpscale_interceptor_request_duration_seconds", nil); v != 3 {
		t.Errorf("the fleet's request duration histogram counted %v requests, want 3", v)
	}
	shop := entry("shop", "shop.example.com", "shop")
	shop.ColdStart.QueueLimit = 7
	h.setTable(shop, entry("idle", "idle.example.com", "idle"))
	if code, _, _ := h.mustGet("shop.example.com", "/"); code != http.StatusOK {
		t.Fatalf("GET shop: %d", code)
	}
	if v := h.metric("httpscale_interceptor_queue_limit", map[string]string{"app": "ns/shop"}); v != 7 {
		t.Errorf("queue limit of ns/shop after a table setting coldStart.queueLimit 7 = %v", v)
	}
}

// With histograms, an app that got a request also has its own request-duration histogram; with
// none, no series names an app at all and the counters are the fleet's.
func TestPerAppMetricsModes(t *testing.T) {
	for _, tc := range []struct {
		mode        proxy.PerApp
		shopSeries  []string
		fleetSeries string // a family that must have a series without an app label
		fleet2xx    bool
	}{{
		mode: proxy.PerAppHistograms,
		shopSeries: []string{"httpscale_interceptor_cold_start_wait_seconds", "httpscale_interceptor_held", "httpscale_interceptor_in_flight",
			"httpscale_interceptor_queue_limit", "httpscale_interceptor_request_duration_seconds", "httpscale_interceptor_requests_total",
			"httpscale_interceptor_responses_total"},
		fleetSeries: "httpscale_interceptor_unrouted_requests_total",
	}, {
		mode:        proxy.PerAppNone,
		fleetSeries: "httpscale_interceptor_request_duration_seconds",
		fleet2xx:    true,
	}} {
		t.Run(string(tc.mode), func(t *testing.T) {
			_, ep := backend(t, "shop")
			h := newHarnessPerApp(t, tc.mode, []routing.Entry{entry("shop", "shop.example.com", "shop")}, nil)
			h.src.Set(key("shop"), ep)
			if code, _, _ := h.mustGet("shop.example.com", "/"); code != http.StatusOK {
				t.Fatalf("GET shop: %d", code)
			}
			seen, _ := seriesByApp(t, h)
			if diff := cmp.Diff(tc.shopSeries, seen["ns/shop"]); diff != "" {
				t.Errorf("series of the app (-want +got):\n%s", diff)
			}
			if !slices.Contains(seen[""], tc.fleetSeries) {
				t.Errorf("no series of %s without an app label: %v", tc.fleetSeries, seen[""])
			}
			if tc.fleet2xx {
				if v := h.metric("httpscale_interceptor_responses_total", map[string]string{"code": "2xx"}); v != 1 {
					t.Errorf("the fleet's 2xx responses = %v, want 1", v)
				}
			}
		})
	}
}

// What the user's Prometheus scrapes: three series per routed app, and two more per app that got
// requests (its queue_limit and, all answered 2xx, one responses_total), whatever the number of
// requests.
func TestScrapeSeriesPerApp(t *testing.T) {
	const apps = 50
	var entries []routing.Entry
	_, ep := backend(t, "app")
	for i := range apps {
		entries = append(entries, entry(fmt.Sprintf("app-%d", i), fmt.Sprintf("app-%d.example.com", i), "app"))
	}
	h := newHarness(t, entries, nil)
	h.src.Set(key("app"), ep)
	get := func(i int) {
		if code, _, _ := h.mustGet(fmt.Sprintf("app-%d.example.com", i), "/"); code != http.StatusOK {
			t.Fatalf("GET app-%d: %d", i, code)
		}
	}
	get(0) // the proxy reads the routing table: every app has its counters from now on
	seen, idle := seriesByApp(t, h)
	if len(seen["ns/app-1"]) != 3 {
		t.Fatalf("series of an app without requests: %v, want in_flight, held, requests_total", seen["ns/app-1"])
	}
	for i := range apps {
		get(i)
		get(i)
	}
	_, busy := seriesByApp(t, h)
	if got := busy - idle; got != 2*(apps-1) {
		t.Errorf("series after every app got requests: %d more than before, want %d (queue_limit and one responses_total each)", got, 2*(apps-1))
	}
}
