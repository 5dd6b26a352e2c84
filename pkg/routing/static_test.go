package routing

import (
	"errors"
	"strings"
	"testing"
)

func withRoutes(prefixes, ignored []string, static ...StaticRoute) func(*Entry) {
	return func(e *Entry) {
		e.PathPrefixes, e.Ignored, e.Static = prefixes, ignored, static
	}
}

func TestMatchRouteIgnoredAndStaticArePrefixesLikeTheOthers(t *testing.T) {
	ok := &Placeholder{StatusCode: 200, Body: "ok"}
	tbl, err := NewTable([]Entry{
		entry("shop/web", []string{"shop.example.com"}, withRoutes(nil, []string{"/healthz/"},
			StaticRoute{PathPrefix: "/ping", Response: ok},
			StaticRoute{PathPrefix: "/status", Backend: &Backend{Service: "status", Port: 8080}})),
		entry("shop/deep", []string{"shop.example.com"}, withRoutes([]string{"/healthz/deep"}, nil)),
		entry("shop/api", []string{"*.example.com"}, withRoutes([]string{"/api"}, []string{"/api/health"})),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host, path string
		key        string
		kind       RouteKind
		static     string
	}{
		{"shop.example.com", "/", "shop/web", RouteApp, ""},
		{"shop.example.com", "/healthz", "shop/web", RouteIgnored, ""},
		{"shop.example.com", "/healthz/live", "shop/web", RouteIgnored, ""},
		{"shop.example.com", "/healthzx", "shop/web", RouteApp, ""},
		// The longest prefix wins whatever its kind: another object's deeper prefix is its own.
		{"shop.example.com", "/healthz/deep/x", "shop/deep", RouteApp, ""},
		{"shop.example.com", "/ping", "shop/web", RouteStatic, "/ping"},
		{"shop.example.com", "/status/a", "shop/web", RouteStatic, "/status"},
		{"x.example.com", "/api/v1", "shop/api", RouteApp, ""},
		{"x.example.com", "/api/health", "shop/api", RouteIgnored, ""},
		{"x.example.com", "/health", "", 0, ""},
	} {
		r, found := tbl.MatchRoute(c.host, c.path, nil)
		if c.key == "" {
			if found {
				t.Errorf("%s%s: matched %s, want no route", c.host, c.path, r.Entry.Key())
			}
			continue
		}
		if !found {
			t.Errorf("%s%s: no route, want %s", c.host, c.path, c.key)
			continue
		}
		static := ""
		if r.Static != nil {
			static = r.Static.PathPrefix
		}
		if r.Entry.Key() != c.key || r.Kind != c.kind || static != c.static {
			t.Errorf("%s%s: %s kind %d static %q, want %s kind %d static %q", c.host, c.path, r.Entry.Key(), r.Kind, static, c.key, c.kind, c.static)
		}
		if e, _ := tbl.Match(c.host, c.path, nil); e != r.Entry {
			t.Errorf("%s%s: Match and MatchRoute disagree", c.host, c.path)
		}
	}
}

func TestIgnoredAndStaticRoutesConflictWithOtherObjectsRoutes(t *testing.T) {
	ok := &Placeholder{StatusCode: 204}
	entries := []Entry{
		entry("a/old", []string{"shop.example.com"}, withRoutes(nil, []string{"/healthz"}, StaticRoute{PathPrefix: "/status", Response: ok})),
		entry("b/static", []string{"shop.example.com"}, withRoutes([]string{"/status/"}, nil)),
		entry("c/ignored", []string{"shop.example.com"}, withRoutes([]string{"/healthz"}, []string{"/healthz"})),
		entry("d/other-host", []string{"other.example.com"}, withRoutes([]string{"/status"}, nil)),
	}
	got := Conflicts(entries)
	want := []Conflict{
		{Loser: "b/static", Winner: "a/old", Host: "shop.example.com", PathPrefix: "/status"},
		{Loser: "c/ignored", Winner: "a/old", Host: "shop.example.com", PathPrefix: "/healthz"},
	}
	if d := diff(want, got); d != "" {
		t.Errorf("Conflicts (want → got):\n%s", d)
	}
	// RouteKeys index the same routes, so the operator's writer finds these conflicts too.
	a, _, err := EncodeEntry(entries[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := len(RouteKeys(&a)); n != 3 {
		t.Errorf("RouteKeys of a/old: %d keys, want 3 (/, /healthz, /status)", n)
	}
}

func TestEntryRejectsBadIgnoredAndStaticRoutes(t *testing.T) {
	ok := &Placeholder{StatusCode: 200}
	be := &Backend{Service: "status", Port: 80}
	for name, c := range map[string]struct {
		mod  func(*Entry)
		want string
	}{
		"ignored outside the path prefixes": {withRoutes([]string{"/api"}, []string{"/healthz"}), `ignored path "/healthz" is not inside`},
		"ignored on a partial segment":      {withRoutes([]string{"/api"}, []string{"/apis"}), `ignored path "/apis" is not inside`},
		"ignored without a slash":           {withRoutes(nil, []string{"healthz"}), "does not start with '/'"},
		"static with both":                  {withRoutes(nil, nil, StaticRoute{PathPrefix: "/s", Response: ok, Backend: be}), "exactly one of a response or a backend"},
		"static with neither":               {withRoutes(nil, nil, StaticRoute{PathPrefix: "/s"}), "exactly one of a response or a backend"},
		"static twice":                      {withRoutes(nil, nil, StaticRoute{PathPrefix: "/s", Response: ok}, StaticRoute{PathPrefix: "/s/", Backend: be}), "listed twice"},
		"static on a path prefix":           {withRoutes([]string{"/s"}, nil, StaticRoute{PathPrefix: "/s", Response: ok}), "served one way"},
		"static on the root":                {withRoutes(nil, nil, StaticRoute{PathPrefix: "/", Response: ok}), "served one way"},
		"static on an ignored path":         {withRoutes(nil, []string{"/h"}, StaticRoute{PathPrefix: "/h", Response: ok}), "served one way"},
		"static with a bad status":          {withRoutes(nil, nil, StaticRoute{PathPrefix: "/s", Response: &Placeholder{StatusCode: 99}}), "status code 99"},
		"static with a bad backend":         {withRoutes(nil, nil, StaticRoute{PathPrefix: "/s", Backend: &Backend{Service: "Status", Port: 80}}), `service "Status"`},
	} {
		e := entry("ns/app", []string{"a.example.com"}, c.mod)
		err := e.Validate()
		if err == nil || !errors.Is(err, ErrInvalidEntry) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want an ErrInvalidEntry containing %q", name, err, c.want)
		}
	}
	// An ignored path may equal a path prefix: it takes that prefix over.
	tbl, err := NewTable([]Entry{entry("ns/app", []string{"a.example.com"}, withRoutes([]string{"/api", "/healthz"}, []string{"/healthz"}))})
	if err != nil {
		t.Fatal(err)
	}
	if r, _ := tbl.MatchRoute("a.example.com", "/healthz", nil); r.Kind != RouteIgnored {
		t.Errorf("/healthz listed in both: kind %d, want RouteIgnored", r.Kind)
	}
}

func TestIgnoredAndStaticRoutesSurviveTheCodec(t *testing.T) {
	in := entry("ns/app", []string{"a.example.com"}, withRoutes([]string{"/"}, []string{"/healthz/", "/a/ready"},
		StaticRoute{PathPrefix: "/z", Backend: &Backend{Service: "status", Port: 80}},
		StaticRoute{PathPrefix: "/ping/", Response: &Placeholder{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "pong"}}))
	tbl, err := NewTable([]Entry{in})
	if err != nil {
		t.Fatal(err)
	}
	m, shards, err := Encode(tbl, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string][]byte{}
	for _, s := range shards {
		byName[s.Name] = s.Data
	}
	back, err := Decode(m, byName)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(tbl.Entries(), back.Entries()); d != "" {
		t.Errorf("decoded entries (want → got):\n%s", d)
	}
	got := back.Entries()[0]
	if d := diff([]string{"/a/ready", "/healthz"}, got.Ignored); d != "" {
		t.Errorf("canonical ignored paths (want → got):\n%s", d)
	}
	if got.Static[0].PathPrefix != "/ping" || got.Static[1].PathPrefix != "/z" || got.Static[1].Backend.Protocol != ProtocolHTTP {
		t.Errorf("canonical static routes: %+v", got.Static)
	}
	_, line, err := EncodeEntry(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"ig":["/a/ready","/healthz"]`, `"st":[{"p":"/ping","r":{`} {
		if !strings.Contains(string(line), key) {
			t.Errorf("stored line %s lacks %s", line, key)
		}
	}
	// An entry without them is stored exactly as before they existed: same table versions, and
	// interceptors that do not know the keys read it as it is.
	_, plain, err := EncodeEntry(entry("ns/app", []string{"a.example.com"}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(plain), `"ig"`) || strings.Contains(string(plain), `"st"`) {
		t.Errorf("an entry without ignored paths or static routes is stored as %s", plain)
	}
}
