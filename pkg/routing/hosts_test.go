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

// A request on an app's Serve port is routed among that app's routes only, whatever its Host.
func TestMatchPath(t *testing.T) {
	tbl := mustTable(t, entry("b/shop", []string{"shop.example.com"}, paths("/api", "/web"), hdr("X-Tenant=b"), func(e *Entry) {
		e.Ignored = []string{"/api/health"}
		e.Static = []StaticRoute{{PathPrefix: "/ping", Response: &Placeholder{Body: "pong"}}}
		e.ServePort = 20001
	}))
	e, _ := tbl.Lookup("b/shop")
	tenant := map[string][]string{"X-Tenant": {"b"}}
	for _, tc := range []struct {
		path   string
		header map[string][]string
		ok     bool
		kind   RouteKind
	}{
		{"/api/v1", tenant, true, RouteApp},
		{"/api/health/live", tenant, true, RouteIgnored},
		{"/ping", tenant, true, RouteStatic},
		{"/other", tenant, false, 0},
		{"/api", nil, false, 0},
		{"/api", map[string][]string{"X-Tenant": {"a"}}, false, 0},
	} {
		r, ok := e.MatchPath(tc.path, routingHeaders(tc.header))
		if ok != tc.ok || ok && (r.Kind != tc.kind || r.Entry != e) {
			t.Errorf("MatchPath(%s, %v) = %+v, %v; want kind %d, %v", tc.path, tc.header, r, ok, tc.kind, tc.ok)
		}
	}
	if e.ServePort != 20001 {
		t.Errorf("ServePort %d did not survive the table", e.ServePort)
	}
}

type routingHeaders map[string][]string

func (h routingHeaders) Values(k string) []string { return h[k] }
