package routing

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

func precedenceTable(t *testing.T, withStar bool) *Table {
	entries := []Entry{
		entry("exact/shop", []string{"shop.example.com"}),
		entry("exact/shop-api", []string{"shop.example.com"}, paths("/api")),
		entry("exact/shop-api-v1", []string{"shop.example.com"}, paths("/api/v1")),
		entry("exact/shop-beta", []string{"shop.example.com"}, paths("/api"), hdr("X-Beta=1")),
		entry("exact/shop-beta-tenant", []string{"shop.example.com"}, paths("/api"), hdr("X-Beta=1"), hdr("x-tenant")),
		entry("exact/docs", []string{"docs.example.com"}, paths("/docs/")),
		entry("exact/only", []string{"only.example.com"}, paths("/only")),
		entry("exact/needs-header", []string{"hdr.example.com"}, hdr("X-Debug")),
		entry("wild/example", []string{"*.example.com"}),
		entry("wild/b", []string{"*.b.example.com"}),
		entry("wild/c-admin", []string{"*.c.example.com"}, paths("/admin")),
		entry("ip/v4", []string{"10.0.0.1"}),
	}
	if withStar {
		entries = append(entries, entry("star/all", []string{"*"}))
	}
	return mustTable(t, entries...)
}

func TestMatchPrecedence(t *testing.T) {
	star := precedenceTable(t, true)
	noStar := precedenceTable(t, false)
	tests := []struct {
		name   string
		noStar bool // match against the table without a "*" route
		host   string
		path   string
		header http.Header
		want   string // key, "" for no match
	}{
		{name: "exact host", host: "shop.example.com", path: "/", want: "exact/shop"},
		{name: "exact beats wildcard and star", host: "shop.example.com", path: "/cart", want: "exact/shop"},
		{name: "wildcard one label", host: "a.example.com", path: "/", want: "wild/example"},
		{name: "wildcard several labels", host: "x.y.example.com", path: "/", want: "wild/example"},
		{name: "wildcard does not match its base", host: "example.com", path: "/", want: "star/all"},
		{name: "wildcard base without star", noStar: true, host: "example.com", path: "/", want: ""},
		{name: "nested wildcard is more specific", host: "a.b.example.com", path: "/", want: "wild/b"},
		{name: "nested wildcard deeper", host: "x.a.b.example.com", path: "/", want: "wild/b"},
		{name: "nested wildcard base uses outer wildcard", host: "b.example.com", path: "/", want: "wild/example"},
		{name: "fall through from wildcard level on path", host: "a.c.example.com", path: "/other", want: "wild/example"},
		{name: "wildcard level path hit", host: "a.c.example.com", path: "/admin/users", want: "wild/c-admin"},
		{name: "no fall through from exact level on path to another namespace", host: "only.example.com", path: "/elsewhere", want: ""},
		{name: "exact level path hit", host: "only.example.com", path: "/only", want: "exact/only"},
		{name: "no fall through from exact level on header to another namespace", host: "hdr.example.com", path: "/", want: ""},
		{name: "header present only", host: "hdr.example.com", path: "/", header: http.Header{"X-Debug": {""}}, want: "exact/needs-header"},
		{name: "star catches unknown host", host: "unknown.org", path: "/x", want: "star/all"},
		{name: "unknown host without star", noStar: true, host: "unknown.org", path: "/x", want: ""},
		{name: "empty host without star", noStar: true, host: "", path: "/", want: ""},
		{name: "longest prefix", host: "shop.example.com", path: "/api/v1/items", want: "exact/shop-api-v1"},
		{name: "prefix exact path", host: "shop.example.com", path: "/api", want: "exact/shop-api"},
		{name: "prefix with trailing slash in request", host: "shop.example.com", path: "/api/", want: "exact/shop-api"},
		{name: "prefix segment boundary", host: "shop.example.com", path: "/apis", want: "exact/shop"},
		{name: "prefix segment boundary deeper", host: "shop.example.com", path: "/api/v10", want: "exact/shop-api"},
		{name: "empty path is root", host: "shop.example.com", path: "", want: "exact/shop"},
		{name: "trailing slash prefix matches under it", host: "docs.example.com", path: "/docs/intro", want: "exact/docs"},
		{name: "trailing slash prefix matches itself", host: "docs.example.com", path: "/docs", want: "exact/docs"},
		{name: "trailing slash prefix boundary", host: "docs.example.com", path: "/docsx", want: ""},
		{name: "one header", host: "shop.example.com", path: "/api/x", header: http.Header{"X-Beta": {"1"}}, want: "exact/shop-beta"},
		{name: "more headers win", host: "shop.example.com", path: "/api/x", header: http.Header{"X-Beta": {"1"}, "X-Tenant": {"t"}}, want: "exact/shop-beta-tenant"},
		{name: "header value exact", host: "shop.example.com", path: "/api/x", header: http.Header{"X-Beta": {"2"}, "X-Tenant": {"t"}}, want: "exact/shop-api"},
		{name: "header any of several values", host: "shop.example.com", path: "/api", header: http.Header{"X-Beta": {"0", "1"}}, want: "exact/shop-beta"},
		{name: "longer prefix beats more headers", host: "shop.example.com", path: "/api/v1", header: http.Header{"X-Beta": {"1"}}, want: "exact/shop-api-v1"},
		{name: "host case-insensitive", host: "SHOP.Example.COM", path: "/api", want: "exact/shop-api"},
		{name: "host with port", host: "shop.example.com:8080", path: "/", want: "exact/shop"},
		{name: "host with empty port", host: "shop.example.com:", path: "/", want: "exact/shop"},
		{name: "host with trailing dot", host: "shop.example.com.", path: "/", want: "exact/shop"},
		{name: "host with trailing dot and port", host: "a.b.example.com.:443", path: "/", want: "wild/b"},
		{name: "ipv4 literal exact", host: "10.0.0.1:80", path: "/", want: "ip/v4"},
		{name: "ipv6 literal with port", host: "[::1]:8080", path: "/", want: "star/all"},
		{name: "ipv6 literal without star", noStar: true, host: "[::1]:8080", path: "/", want: ""},
		{name: "ipv6 mapped ipv4 does not hit wildcards", noStar: true, host: "[::ffff:10.0.0.1]", path: "/", want: ""},
		{name: "bare ipv6", noStar: true, host: "::1", path: "/", want: ""},
		{name: "malformed ipv6", host: "[::1", path: "/", want: "star/all"},
		{name: "leading dot is not a label", noStar: true, host: ".example.com", path: "/", want: ""},
		{name: "path without slash", host: "shop.example.com", path: "*", want: "exact/shop"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := star
			if tc.noStar {
				tbl = noStar
			}
			got := ""
			if e, ok := tbl.Match(tc.host, tc.path, tc.header); ok {
				got = e.Key()
			} else if e != nil {
				t.Errorf("Match returned entry %s with ok=false", e.Key())
			}
			if got != tc.want {
				t.Errorf("Match(%q, %q, %v) = %q, want %q", tc.host, tc.path, tc.header, got, tc.want)
			}
			if ref := referenceMatch(tbl, tc.host, tc.path, tc.header); ref != tc.want {
				t.Errorf("referenceMatch = %q, want %q (the test oracle disagrees)", ref, tc.want)
			}
		})
	}
}

// TestMatchManyPrefixes covers hosts with more prefixes than linearPrefixLimit (map walk) against
// the reference matcher.
func TestMatchManyPrefixes(t *testing.T) {
	var entries []Entry
	prefixes := []string{"/a", "/a/b", "/a/b/c", "/ab", "/b", "/b/c/d", "/c", "/d/", "/e", "/f/g", "/g", "/h", "/a//b"}
	for i, p := range prefixes {
		entries = append(entries, entry(fmt.Sprintf("many/p%02d", i), []string{"many.example.com"}, paths(p)))
		entries = append(entries, entry(fmt.Sprintf("many/h%02d", i), []string{"many.example.com"}, paths(p), hdr("X-V=1")))
	}
	entries = append(entries, entry("many/root", []string{"many.example.com"}, hdr("X-Root")))
	tbl := mustTable(t, entries...)
	if hr, _ := tbl.exact.Get("many.example.com"); hr == nil || hr.byPrefix == nil {
		t.Fatalf("host with %d prefixes is not indexed by map", len(prefixes))
	}
	requests := []string{"", "/", "*", "a", "/a", "/a/", "/a/b", "/a/bc", "/a/b/c/d", "/ab/", "/abc", "/b/c",
		"/b/c/d/e", "/d", "/d/x", "/d//", "/f", "/f/g/", "/a//b", "/a//b/c", "//a", "/h?x", "/zzz"}
	for _, path := range requests {
		for _, h := range []http.Header{nil, {"X-V": {"1"}}, {"X-Root": {""}}, {"X-V": {"2"}, "X-Root": {"r"}}} {
			got := ""
			if e, ok := tbl.Match("many.example.com", path, h); ok {
				got = e.Key()
			}
			if want := referenceMatch(tbl, "many.example.com", path, h); got != want {
				t.Errorf("Match(%q, %v) = %q, reference says %q", path, h, got, want)
			}
		}
	}
}

// TestMatchRandomized compares Match with the reference matcher on random tables and requests.
func TestMatchRandomized(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	labels := []string{"a", "b", "c", "example", "com"}
	segs := []string{"api", "v1", "x", "a", ""}
	randHost := func() string {
		n := 1 + r.IntN(4)
		h := ""
		for i := range n {
			if i > 0 {
				h += "."
			}
			h += labels[r.IntN(len(labels))]
		}
		return h
	}
	randPath := func() string {
		p := ""
		for range r.IntN(4) {
			p += "/" + segs[r.IntN(len(segs))]
		}
		return p
	}
	for round := range 200 {
		var entries []Entry
		for i := range 1 + r.IntN(30) {
			host := randHost()
			switch r.IntN(5) {
			case 0:
				host = "*"
			case 1, 2:
				host = "*." + host
			}
			var opts []func(*Entry)
			if p := randPath(); p != "" {
				opts = append(opts, paths(p))
			}
			for _, h := range []string{"X-A=1", "X-B", "X-C=2"} {
				if r.IntN(3) == 0 {
					opts = append(opts, hdr(h))
				}
			}
			entries = append(entries, entry(fmt.Sprintf("r/e%03d", i), []string{host}, opts...))
		}
		tbl := mustTable(t, entries...)
		for range 50 {
			host, path := randHost(), randPath()
			header := http.Header{}
			for _, k := range []string{"X-A", "X-B", "X-C"} {
				if r.IntN(2) == 0 {
					header[k] = []string{fmt.Sprint(r.IntN(3))}
				}
			}
			got := ""
			if e, ok := tbl.Match(host, path, header); ok {
				got = e.Key()
			}
			if want := referenceMatch(tbl, host, path, header); got != want {
				t.Fatalf("round %d: Match(%q, %q, %v) = %q, reference says %q\nentries: %+v", round, host, path, header, got, want, entries)
			}
		}
	}
}

func TestMatchAllocations(t *testing.T) {
	entries := syntheticEntries(2000)
	tbl := mustTable(t, entries...)
	reqs := benchRequests(entries)
	header := http.Header{"X-Canary": {"true"}}
	for _, req := range []benchRequest{reqs.exact, reqs.wildcard, reqs.path, {host: "nothing.example.org", path: "/"}} {
		got := ""
		if e, ok := tbl.Match(req.host, req.path, header); ok {
			got = e.Key()
		}
		if got != req.want {
			t.Errorf("Match(%q, %q) = %q, want %q", req.host, req.path, got, req.want)
		}
		if n := testing.AllocsPerRun(100, func() { tbl.Match(req.host, req.path, header) }); n != 0 {
			t.Errorf("Match(%q, %q) allocates %v times, want 0", req.host, req.path, n)
		}
	}
}

func TestNilTable(t *testing.T) {
	var tbl *Table
	if e, ok := tbl.Match("a", "/", nil); ok || e != nil {
		t.Errorf("nil table matched %v", e)
	}
	if _, ok := tbl.Lookup("a/b"); ok || tbl.Len() != 0 || tbl.Version() != "" || tbl.Entries() != nil {
		t.Errorf("nil table is not empty")
	}
}

// TestConcurrentUse runs readers against tables published through an atomic.Pointer while a writer
// replaces them, as the interceptor does; run with -race.
func TestConcurrentUse(t *testing.T) {
	var current atomic.Pointer[Table]
	current.Store(mustTable(t, entry("a/v0", []string{"shop.example.com"})))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				tbl := current.Load()
				if e, ok := tbl.Match("shop.example.com", "/", nil); !ok || e.Namespace != "a" {
					t.Errorf("version %s: no match", tbl.Version())
					return
				}
				tbl.Lookup("a/v0")
			}
		})
	}
	for i := range 50 {
		current.Store(mustTable(t, entry(fmt.Sprintf("a/v%d", i), []string{"shop.example.com"})))
	}
	close(stop)
	wg.Wait()
}

// TestAll checks that All yields the entries Entries copies, in the same order, as the shared entries
// Lookup and Match return, and stops when the caller does.
func TestAll(t *testing.T) {
	tbl := mustTable(t, syntheticEntries(50)...)
	var got []Entry
	for e := range tbl.All() {
		if shared, ok := tbl.Lookup(e.Key()); !ok || shared != e {
			t.Fatalf("All yielded %s at %p, Lookup has %p", e.Key(), e, shared)
		}
		got = append(got, e.Clone())
	}
	if d := diff(tbl.Entries(), got); d != "" {
		t.Errorf("All differs from Entries (-Entries +All):\n%s", d)
	}
	n := 0
	for range tbl.All() {
		n++
		if n == 3 {
			break
		}
	}
	if n != 3 {
		t.Errorf("All went on after break: %d", n)
	}
	var nilTable *Table
	for e := range nilTable.All() {
		t.Errorf("nil table yielded %s", e.Key())
	}
}
