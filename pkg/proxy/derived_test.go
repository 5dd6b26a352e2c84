package proxy_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/routing/routingtest"
)

// TestDerivedTablesCarryAppsAndDropRemovedOnes follows tables as the table watch produces them
// (routing.Reader: each derived from the one before, routing.Table.Diff) through TableChanged and
// requests: apps the change does not touch keep their counters, a changed app keeps its counters
// under its new route, a removed app is no longer routed and its counters go, a new one is routed.
func TestDerivedTablesCarryAppsAndDropRemovedOnes(t *testing.T) {
	st, err := routingtest.New(4) // many small shards: a one-app change is a small Diff
	if err != nil {
		t.Fatal(err)
	}
	put := func(e routing.Entry) {
		if err := st.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	next := func() *routing.Table {
		tb, err := st.Next()
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	_, ep := backend(t, "app")
	h := newHarness(t, nil, nil)
	h.src.Set(key("app"), ep)
	serve := func(tb *routing.Table) {
		h.proxy.TableChanged(tb)
		h.table.Store(tb)
	}
	want := func(host string, code int) {
		t.Helper()
		if got, _, _ := h.mustGet(host, "/"); got != code {
			t.Fatalf("%s answered %d, want %d", host, got, code)
		}
	}
	// Enough apps that a one-app change is applied as a change, not a rebuild.
	var apps []string
	for i := range 200 {
		apps = append(apps, fmt.Sprintf("f%d", i))
	}
	apps = append(apps, "a", "b")
	for _, n := range apps {
		put(entry(n, n+".example.com", "app"))
	}
	prev := next()
	serve(prev)
	want("a.example.com", http.StatusOK)
	want("b.example.com", http.StatusOK)

	put(entry("new", "new.example.com", "app"))
	st.Remove("ns/b")
	put(entry("a", "moved.example.com", "app"))
	tb := next()
	if removed, added, ok := tb.Diff(prev); !ok || len(removed) == 0 || len(added) == 0 {
		t.Fatalf("Diff = %d removed, %d added, %v; want a table derived from the one before", len(removed), len(added), ok)
	}
	serve(tb)
	want("a.example.com", http.StatusNotFound)
	want("moved.example.com", http.StatusOK)
	want("b.example.com", http.StatusNotFound)
	want("new.example.com", http.StatusOK)
	counts := map[string]uint64{}
	for _, c := range h.reg.CountsSince(0).Apps {
		counts[c.Key] = c.Requests
	}
	wantCounts := map[string]uint64{"ns/a": 2, "ns/new": 1}
	for i := range 200 {
		wantCounts[fmt.Sprintf("ns/f%d", i)] = 0
	}
	if d := cmp.Diff(wantCounts, counts); d != "" {
		t.Errorf("counters after the change (-want +got):\n%s", d)
	}

	// Removing every app but one, in one version, is a rebuild; the counters follow it too.
	for _, n := range apps {
		st.Remove("ns/" + n)
	}
	serve(next())
	want("new.example.com", http.StatusOK)
	if d := cmp.Diff([]admin.AppCount{{Key: "ns/new", Requests: 2}}, h.reg.CountsSince(0).Apps); d != "" {
		t.Errorf("counters after removing all but one (-want +got):\n%s", d)
	}
}
