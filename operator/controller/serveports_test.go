package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/routing"
)

// Serve ports are decided with the table: one per Serve-mode app that is published, kept while it is,
// taken back from a stored table after a restart, released when the app leaves or loses its route,
// and none once the range is exhausted.
func TestServePortsAreDecidedWithTheTable(t *testing.T) {
	s, err := newTableState(routing.DefaultMaxShardBytes, routing.DefaultMaxShardEntries)
	if err != nil {
		t.Fatal(err)
	}
	s.ports = newPortAllocator(20000, 20001)
	put := func(key, host string, age time.Duration, serve bool, storedPort int32) {
		t.Helper()
		c := cand(key, host, age)
		c.serve, c.entry.ServePort = serve, storedPort
		if err := c.prepare(routing.DefaultMaxEntryBytes); err != nil {
			t.Fatal(err)
		}
		s.set(key, &c)
	}
	published := func(key string) int32 {
		t.Helper()
		m, shards, err := s.enc.Encode()
		if err != nil {
			t.Fatal(err)
		}
		data := map[string][]byte{}
		for _, sh := range shards {
			data[sh.Name] = sh.Data
		}
		var r routing.Reader
		tb, err := r.Decode(m, data)
		if err != nil {
			t.Fatal(err)
		}
		if e, ok := tb.Lookup(key); ok {
			return e.ServePort
		}
		return -1
	}

	// A restarted writer: the stored table gave b/web port 20001.
	put("b/web", "web.example.com", time.Hour, false, 20001)
	put("a/shop", "shop.example.com", time.Hour, true, 0)
	put("a/plain", "plain.example.com", time.Hour, false, 0)
	s.decide()
	if got := published("b/web"); got != 20001 {
		t.Errorf("b/web: port %d, want the stored 20001", got)
	}
	if got := published("a/shop"); got != 20000 {
		t.Errorf("a/shop: port %d, want the free 20000", got)
	}
	if got := published("a/plain"); got != 0 {
		t.Errorf("a Proxy-mode app got port %d", got)
	}
	// b/web decided again by the routing controller: it keeps its port.
	put("b/web", "web.example.com", time.Hour, true, 0)
	s.decide()
	if got := published("b/web"); got != 20001 || s.ports.port("b/web") != 20001 {
		t.Errorf("b/web after its decision: port %d, want 20001", got)
	}
	// The range is exhausted: a third app gets none.
	put("c/more", "more.example.com", time.Hour, true, 0)
	s.decide()
	if got := published("c/more"); got != 0 {
		t.Errorf("c/more with the range exhausted: port %d, want none", got)
	}
	// a/shop loses its route to an older object: its port goes, to c/more in the same decision.
	put("z/older", "shop.example.com", 2*time.Hour, false, 0)
	changed := s.decide()
	if published("a/shop") != -1 || s.ports.port("a/shop") != 0 {
		t.Errorf("a/shop lost its route but kept port %d", s.ports.port("a/shop"))
	}
	if got := published("c/more"); got != 20000 || !slices.Contains(changed, "c/more") {
		t.Errorf("c/more once a port is free: %d (changed %v), want 20000 and reported", got, changed)
	}
}
