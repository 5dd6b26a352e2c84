package proxy_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/httpscale/httpscale/pkg/routing"
)

// TestMetricSeriesAppearWithAnAppsFirstRequest checks that a routed app that received no request
// has no series but the counters' (in_flight, held, requests_total), so that memory does not grow
// with every routed app, and that a request creates its series.
func TestMetricSeriesAppearWithAnAppsFirstRequest(t *testing.T) {
	_, ep := backend(t, "shop")
	h := newHarness(t, []routing.Entry{entry("shop", "shop.example.com", "shop"), entry("idle", "idle.example.com", "idle")}, nil)
	h.src.Set(key("shop"), ep)
	if code, _, _ := h.mustGet("shop.example.com", "/"); code != http.StatusOK {
		t.Fatalf("GET shop: %d", code)
	}
	mfs, err := h.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fromCounters := []string{"httpscale_interceptor_in_flight", "httpscale_interceptor_held", "httpscale_interceptor_requests_total"}
	seen := map[string][]string{} // app → metric families with a series of it
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "app" && !slices.Contains(seen[lp.GetValue()], mf.GetName()) {
					seen[lp.GetValue()] = append(seen[lp.GetValue()], mf.GetName())
				}
			}
		}
	}
	slices.Sort(seen["ns/idle"])
	if want := slices.Sorted(slices.Values(fromCounters)); !slices.Equal(seen["ns/idle"], want) {
		t.Errorf("series of the idle app: %v, want only %v", seen["ns/idle"], want)
	}
	for _, name := range []string{"httpscale_interceptor_responses_total", "httpscale_interceptor_request_duration_seconds", "httpscale_interceptor_cold_starts_total"} {
		if !slices.Contains(seen["ns/shop"], name) {
			t.Errorf("the requested app has no %s series (has %v)", name, seen["ns/shop"])
		}
	}
	if v := h.metric("httpscale_interceptor_responses_total", map[string]string{"app": "ns/shop", "code": "2xx"}); v != 1 {
		t.Errorf("2xx responses of ns/shop = %v, want 1", v)
	}
}
