package routing

import (
	"errors"
	"net/url"
	"strings"
	"testing"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// The table of Gateway API's HTTPPathModifier.ReplacePrefixMatch, every row, plus the root prefix.
func TestPathRewriteFollowsGatewayAPIReplacePrefixMatch(t *testing.T) {
	for _, c := range []struct{ path, prefix, replace, want string }{
		{"/foo/bar", "/foo", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo", "/xyz/", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz/", "/xyz/bar"},
		{"/foo", "/foo", "/xyz", "/xyz"},
		{"/foo/", "/foo", "/xyz", "/xyz/"},
		{"/foo/bar", "/foo", "", "/bar"},
		{"/foo/", "/foo", "", "/"},
		{"/foo", "/foo", "", "/"},
		{"/foo/", "/foo", "/", "/"},
		{"/foo", "/foo", "/", "/"},
		// Beyond the table.
		{"/shop/x/y/", "/shop", "/", "/x/y/"},
		{"/a/b/c", "/a/b", "/z", "/z/c"},
		{"/", "/", "/app", "/app"},
		{"/x", "/", "/app/", "/app/x"},
		{"/x/", "/", "", "/x/"},
		{"/", "/", "", "/"},
		// A leading "//" in the result is one "/": it would read as a host.
		{"/shop//evil.example/x", "/shop", "", "/evil.example/x"},
		{"/shop///x", "/shop", "/", "/x"},
		{"/shop//x", "/shop", "/in", "/in//x"},
		// Not matching on a segment boundary: unchanged.
		{"/shopping", "/shop", "/", "/shopping"},
	} {
		rw := PathRewrite{Prefix: trimPrefixSlash(c.prefix), Replace: c.replace}
		if got := rw.Path(c.path); got != c.want {
			t.Errorf("%s with %s → %q: got %s, want %s", c.path, c.prefix, c.replace, got, c.want)
		}
	}
}

func TestPathRewriteTargetKeepsTheQueryAndTheEncoding(t *testing.T) {
	rw := PathRewrite{Prefix: "/shop", Replace: "/"}
	for _, c := range []struct{ target, want string }{
		{"/shop/x", "/x"},
		{"/shop/x?a=1;b=2&c=%zz", "/x?a=1;b=2&c=%zz"},
		{"/shop?", "/?"},
		{"/shop", "/"},
		{"/shop/a%2Fb/%E2%82%AC", "/a%2Fb/%E2%82%AC"}, // the rest goes on as the client encoded it
		{"/sh%6Fp/x?q", "/x?q"},                       // the prefix encoded
		{"/sh%6Fp/a%2Fb", "/a%2Fb"},                   // and the rest kept as encoded
		{"/shop%2Fx", "/x"},                           // an encoded "/" that ends the prefix
		{"/shop/%2Fx", "/x"},                          // would decode to "//x": re-encoded from "/x"
		{"http://shop.example.com/shop/x?y", "/x?y"},  // absolute form becomes origin form
		{"/other", "/other"},
		{"*", "*"},
	} {
		if got := rw.Target(c.target); got != c.want {
			t.Errorf("Target(%q) = %q, want %q", c.target, got, c.want)
		}
	}
}

func TestHasDotSegment(t *testing.T) {
	for path, want := range map[string]bool{
		"/shop/../admin": true, "/shop/./x": true, "/shop/..": true, "/..": true, "/.": true,
		"/shop/x": false, "/shop/..x": false, "/shop/.well-known/a": false, "/": false, "/a.b/c..": false,
	} {
		if got := HasDotSegment(path); got != want {
			t.Errorf("HasDotSegment(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestMatchRouteCarriesTheRewriteOfTheMatchedPrefix(t *testing.T) {
	tbl := mustTable(t,
		entry("shop/web", []string{"shop.example.com"}, withRoutes([]string{"/shop", "/shop/admin", "/cart/"}, []string{"/shop/healthz", "/shop/admin/healthz"},
			StaticRoute{PathPrefix: "/shop/ping", Response: &Placeholder{Body: "pong"}}),
			func(e *Entry) {
				e.Rewrites = []PathRewrite{{Prefix: "/shop/", Replace: "/"}, {Prefix: "/cart", Replace: "/basket"}}
			}),
		entry("shop/root", []string{"root.example.com"}, func(e *Entry) { e.Rewrites = []PathRewrite{{Prefix: "/", Replace: "/app"}} }),
	)
	for _, c := range []struct{ host, path, want string }{
		{"shop.example.com", "/shop/x", "/x"},
		{"shop.example.com", "/cart/1", "/basket/1"},
		{"shop.example.com", "/shop/admin/x", ""},         // a longer prefix without a rewrite
		{"shop.example.com", "/shop/healthz", "/healthz"}, // an ignored path inside /shop: /shop's rewrite
		{"shop.example.com", "/shop/admin/healthz", ""},   // inside /shop/admin, which has none
		{"shop.example.com", "/shop/ping", ""},            // static routes are never rewritten
		{"root.example.com", "/v1/items", "/app/v1/items"},
	} {
		r, ok := tbl.MatchRoute(c.host, c.path, nil)
		if !ok {
			t.Fatalf("%s%s: no route", c.host, c.path)
		}
		got := ""
		if r.Rewrite != nil {
			got = r.Rewrite.Path(c.path)
		}
		if got != c.want {
			t.Errorf("%s%s: forwarded as %q, want %q (\"\": not rewritten)", c.host, c.path, got, c.want)
		}
	}
}

func TestRewritesAndSessionAreValidated(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Entry)
		want string
	}{
		{"prefix not routed", func(e *Entry) { e.Rewrites = []PathRewrite{{Prefix: "/cart", Replace: "/"}} }, "not one of the path prefixes"},
		{"rewritten twice", func(e *Entry) {
			e.Rewrites = []PathRewrite{{Prefix: "/shop", Replace: "/"}, {Prefix: "/shop/", Replace: "/a"}}
		}, "rewritten twice"},
		{"relative replacement", func(e *Entry) { e.Rewrites = []PathRewrite{{Prefix: "/shop", Replace: "x"}} }, "starting with /"},
		{"encoded replacement", func(e *Entry) { e.Rewrites = []PathRewrite{{Prefix: "/shop", Replace: "/%2e%2e"}} }, `contains '%'`},
		{"dot segments", func(e *Entry) { e.Rewrites = []PathRewrite{{Prefix: "/shop", Replace: "/a/../b"}} }, ". or .. segments"},
		{"empty segment", func(e *Entry) { e.Rewrites = []PathRewrite{{Prefix: "/shop", Replace: "//host"}} }, "contains //"},
		{"cookie with ;", func(e *Entry) { e.Session = &Session{Cookie: "a;Path=/"} }, "letters, digits"},
		{"empty cookie", func(e *Entry) { e.Session = &Session{} }, "must be 1-64"},
		{"secure cookie prefix", func(e *Entry) { e.Session = &Session{Cookie: "__Secure-x"} }, "needs the Secure attribute"},
		{"negative lifetime", func(e *Entry) { e.Session = &Session{Cookie: "c", MaxAge: -1} }, "lifetime"},
		{"session via the Service", func(e *Entry) { e.Session = &Session{Cookie: "c"}; e.ViaService = true }, "not via the Service"},
	} {
		e := entry("shop/web", []string{"shop.example.com"}, paths("/shop"), c.mod)
		err := e.Validate()
		if !errors.Is(err, ErrInvalidEntry) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want ErrInvalidEntry mentioning %q", c.name, err, c.want)
		}
	}
}

func TestCookiePathCoversEveryPrefixOfTheEntry(t *testing.T) {
	for _, c := range []struct {
		prefixes []string
		want     string
	}{
		{nil, "/"},
		{[]string{"/shop"}, "/shop"},
		{[]string{"/shop/", "/shop/cart"}, "/shop"},
		{[]string{"/shop/a", "/shop/b/c"}, "/shop"},
		{[]string{"/shop", "/shopping"}, "/"},
		{[]string{"/shop", "/cart"}, "/"},
		{[]string{"/", "/shop"}, "/"},
	} {
		tbl := mustTable(t, entry("shop/web", []string{"shop.example.com"}, paths(c.prefixes...)))
		e, _ := tbl.Lookup("shop/web")
		if got := e.CookiePath(); got != c.want {
			t.Errorf("CookiePath of %q = %q, want %q", c.prefixes, got, c.want)
		}
	}
}

func TestRewritesAndSessionSurviveTheCodec(t *testing.T) {
	e := entry("shop/web", []string{"shop.example.com"}, paths("/shop", "/cart"), func(e *Entry) {
		e.Rewrites = []PathRewrite{{Prefix: "/shop", Replace: ""}, {Prefix: "/cart", Replace: "/basket/"}}
		e.Session = &Session{Cookie: "pod", MaxAge: 3600}
	})
	m, shards, err := Encode(mustTable(t, e), DefaultMaxShardBytes)
	if err != nil {
		t.Fatal(err)
	}
	head, cms := ToConfigMaps("httpscale-system", DefaultBaseName, m, shards)
	got, err := FromConfigMaps(head, cms)
	if err != nil {
		t.Fatal(err)
	}
	ge, _ := got.Lookup("shop/web")
	want := []PathRewrite{{Prefix: "/cart", Replace: "/basket/"}, {Prefix: "/shop", Replace: ""}} // sorted by prefix
	if d := diff(want, ge.Rewrites); d != "" {
		t.Errorf("rewrites after the codec: %s", d)
	}
	if d := diff(&Session{Cookie: "pod", MaxAge: 3600}, ge.Session); d != "" {
		t.Errorf("session after the codec: %s", d)
	}
}

// FuzzPathRewrite holds Target to Path on the decoded path: whatever the client sends, the app gets
// the rewrite of the path the route matched, never a path that starts with "//", and the query as
// sent.
func FuzzPathRewrite(f *testing.F) {
	f.Add("/shop", "/", "/shop/x?a=b")
	f.Add("/shop", "", "/shop%2F%2Fx")
	f.Add("/", "/app", "/x/y?")
	f.Add("/a/b", "/z/", "/a/b/../c")
	f.Fuzz(func(t *testing.T, prefix, replace, target string) {
		if validatePathPrefix(prefix) != nil || validateReplace(replace) != nil || !strings.HasPrefix(target, "/") {
			return
		}
		rw := PathRewrite{Prefix: trimPrefixSlash(prefix), Replace: replace}
		path, query, hasQuery := strings.Cut(target, "?")
		decoded, err := url.PathUnescape(path)
		if err != nil {
			return
		}
		if _, ok := cutPrefix(decoded, rw.Prefix); !ok {
			return // the route would not have matched
		}
		out := rw.Target(target)
		outPath, outQuery, outHasQuery := strings.Cut(out, "?")
		if outQuery != query || outHasQuery != hasQuery {
			t.Fatalf("Target(%q) = %q: query changed", target, out)
		}
		if !strings.HasPrefix(outPath, "/") || strings.HasPrefix(outPath, "//") {
			t.Fatalf("Target(%q) = %q: not one leading /", target, out)
		}
		got, err := url.PathUnescape(outPath)
		if err != nil {
			t.Fatalf("Target(%q) = %q: does not decode: %v", target, out, err)
		}
		if want := rw.Path(decoded); got != want {
			t.Fatalf("Target(%q) = %q, which decodes to %q, want the rewrite of the decoded path %q", target, out, got, want)
		}
	})
}

func TestEntryFromSpecCopiesRewritesAndSession(t *testing.T) {
	hso := &v1.HTTPScaledObject{}
	hso.Namespace, hso.Name = "shop", "web"
	hso.Spec.Hosts = []v1.Host{"shop.example.com"}
	hso.Spec.PathPrefixes = []v1.PathPrefix{"/shop/"}
	hso.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop/", ReplacePrefixMatch: "/"}}
	life := v1.Duration("1h30m")
	hso.Spec.SessionPersistence = &v1.SessionPersistence{Lifetime: &life}
	e := EntryFromSpec(hso, Backend{Service: "web", Port: 80}, nil)
	if d := diff([]PathRewrite{{Prefix: "/shop/", Replace: "/"}}, e.Rewrites); d != "" {
		t.Errorf("rewrites: %s", d)
	}
	if d := diff(&Session{Cookie: v1.DefaultSessionCookie, MaxAge: 5400}, e.Session); d != "" {
		t.Errorf("session: %s", d)
	}
	if err := e.Validate(); err != nil {
		t.Errorf("the entry of a valid object does not validate: %v", err)
	}
}
