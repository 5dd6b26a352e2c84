package proxy_test

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
)

func TestServiceKeysListsTargetsAndFallbacksOnce(t *testing.T) {
	a := entry("a", "a.example.com", "web")
	a.PortName = "http"
	a.ColdStart.Fallback = &routing.Backend{Service: "sorry", Port: 80}
	b := entry("b", "b.example.com", "web")
	b.PortName = "http"
	b.ColdStart.Fallback = &routing.Backend{Service: "sorry", Port: 80}
	tb, err := routing.NewTable([]routing.Entry{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := []endpoints.ServiceKey{
		{Namespace: "ns", Service: "web", PortName: "http"},
		{Namespace: "ns", Service: "sorry"},
	}
	if d := cmp.Diff(want, proxy.ServiceKeys(tb)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}

func TestTableChangedPreparesTheNextTable(t *testing.T) {
	_, ep := backend(t, "new")
	h := newHarness(t, nil, nil)
	h.src.Set(key("new"), ep)
	next, err := routing.NewTable([]routing.Entry{entry("new", "new.example.com", "new")})
	if err != nil {
		t.Fatal(err)
	}
	h.proxy.TableChanged(next) // as the table watch does, before it serves next
	if code, _, _ := h.mustGet("new.example.com", "/"); code != http.StatusNotFound {
		t.Fatalf("route served before its table: %d", code)
	}
	h.table.Store(next)
	if code, body, _ := h.mustGet("new.example.com", "/"); code != http.StatusOK || body != "new /" {
		t.Fatalf("after the swap: %d %q", code, body)
	}
	if _, _, req := h.count("ns/new"); req != 1 {
		t.Errorf("requests = %d, want 1", req)
	}
}
