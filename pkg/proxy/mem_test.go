package proxy

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// mapSource is an endpoints.Source of fixed Sets.
type mapSource map[endpoints.ServiceKey]*endpoints.Set

func (m mapSource) Ready(k endpoints.ServiceKey) *endpoints.Set { return m[k] }
func (m mapSource) WaitReady(ctx context.Context, k endpoints.ServiceKey) (*endpoints.Set, error) {
	if s := m[k]; s != nil {
		return s, nil
	}
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestPerAppMemory: the proxy's state for an app that has had a request and has a ready endpoint of
// its own (hack/bench/memtable -traffic close): the app, its backend with its endpoint choice, its
// counters. The routing table and the endpoints are measured by their own packages' tests.
func TestPerAppMemory(t *testing.T) {
	const n = 5000
	entries := make([]routing.Entry, n)
	src := mapSource{}
	for i := range entries {
		entries[i] = routing.Entry{
			Namespace: fmt.Sprintf("app-%d", i%100), Name: fmt.Sprintf("web-%d", i), Generation: 1,
			Hosts:   []string{fmt.Sprintf("web-%d.example.com", i)},
			Service: fmt.Sprintf("web-%d", i), Port: 80, PortName: "http", TargetPort: 8080,
		}
		k := endpoints.ServiceKey{Namespace: entries[i].Namespace, Service: entries[i].Service, PortName: "http"}
		src[k] = &endpoints.Set{Key: k, Endpoints: []endpoints.Endpoint{{IP: fmt.Sprintf("10.255.%d.%d", i/250, i%250), Port: 8080}}}
	}
	tb, err := routing.NewTable(entries)
	if err != nil {
		t.Fatal(err)
	}
	before := testenv.HeapInUse()
	p, err := New(Options{Tables: TableFunc(func() *routing.Table { return tb }), Endpoints: src, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	request := func(i int) {
		x := p.Route(fmt.Sprintf("web-%d.example.com", i), "/", nil)
		if x == nil || !x.Ready() {
			t.Fatalf("app %d not routed or not ready", i)
		}
		x.Begin()
		x.Forwarding()
		addr, ok := x.Pick(0)
		if !ok {
			t.Fatalf("app %d: no endpoint", i)
		}
		x.Forwarded(addr)
		x.Responded(200, nil)
		x.End()
	}
	request(0) // builds the routes: every app's state, its backend and counters
	routed := testenv.HeapInUse()
	for i := 1; i < n; i++ {
		request(i)
	}
	after := testenv.HeapInUse()
	runtime.KeepAlive(p)
	runtime.KeepAlive(tb)
	perRoute := (int64(routed) - int64(before)) / n
	perRequest := (int64(after) - int64(routed)) / (n - 1)
	t.Logf("proxy state per app: %d bytes routed, %d more after its first request (%d in all)", perRoute, perRequest, perRoute+perRequest)
	// 1,058 bytes (668 + 390) while every app kept its cold-start description, every backend its
	// Service's address and every endpoint view a copy of its endpoints; 824 since.
	if perRoute+perRequest > 880 {
		t.Errorf("%d bytes per app with traffic, want at most 880", perRoute+perRequest)
	}
}
