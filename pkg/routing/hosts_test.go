package routing

import "testing"

// A host belongs to one namespace: a request for a host namespace b routes never falls through to
// namespace a's wildcard or catch-all because b routes no such path or header.
func TestNoFallThroughAcrossNamespaces(t *testing.T) {
	tbl := mustTable(t,
		entry("b/shop", []string{"shop.example.com"}, paths("/api")),
		entry("b/wild", []string{"*.b.example.com"}, paths("/b")),
		entry("b/shopwild", []string{"*.shop.example.com"}),
		entry("a/wild", []string{"*.example.com"}),
		entry("x/all", []string{"*"}),
	)
	for _, tc := range []struct{ host, path, want string }{
		{"shop.example.com", "/api/v1", "b/shop"},
		{"shop.example.com", "/login", ""},  // b's host: not a's wildcard, not x's catch-all
		{"x.b.example.com", "/other", ""},   // b's wildcard owns the name
		{"x.b.example.com", "/b", "b/wild"}, //
		{"www.shop.example.com", "/login", "b/shopwild"},
		{"cart.example.com", "/login", "a/wild"}, // a's name
		{"unknown.test", "/", "x/all"},           // nobody's name: the catch-all
	} {
		got := ""
		if e, ok := tbl.Match(tc.host, tc.path, nil); ok {
			got = e.Key()
		}
		if got != tc.want {
			t.Errorf("Match(%s%s) = %q, want %q", tc.host, tc.path, got, tc.want)
		}
	}
	for host, want := range map[string]string{"shop.example.com": "b", "x.shop.example.com": "b", "cart.example.com": "a", "elsewhere.test": "x"} {
		if ns, ok := tbl.HostNamespace(host); !ok || ns != want {
			t.Errorf("HostNamespace(%s) = %q, %v; want %q", host, ns, ok, want)
		}
	}
	if _, ok := mustTable(t).HostNamespace("shop.example.com"); ok {
		t.Error("an empty table routes no host")
	}
}

// Within one namespace a request still falls through from an exact host to the namespace's own
// wildcard, as before hosts had owners.
func TestFallThroughWithinNamespace(t *testing.T) {
	tbl := mustTable(t,
		entry("a/api", []string{"api.example.com"}, paths("/v1")),
		entry("a/wild", []string{"*.example.com"}),
	)
	if e, ok := tbl.Match("api.example.com", "/other", nil); !ok || e.Key() != "a/wild" {
		t.Errorf("got %v, %v; want a/wild", e, ok)
	}
}
