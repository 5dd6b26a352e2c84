package routing

import (
	"net/http"
	"strings"
	"testing"
)

// BenchmarkMatch measures the hot path with one route and with 50,000 (see syntheticEntries: exact
// hosts, tenant wildcards, and 5,000 path routes on one shared host). Run with -benchmem: every case
// must report 0 allocs/op.
func BenchmarkMatch(b *testing.B) {
	one := mustTable(b, entry("shop/front", []string{"shop.example.com"}))
	entries := syntheticEntries(50_000)
	large := mustTable(b, entries...)
	reqs := benchRequests(entries)
	header := http.Header{"Accept": {"*/*"}, "User-Agent": {"bench"}}
	cases := []struct {
		name       string
		tbl        *Table
		host, path string
		want       string
	}{
		{"routes=1/exact", one, "shop.example.com", "/cart/items", "shop/front"},
		{"routes=1/miss", one, "other.example.com", "/cart/items", ""},
		{"routes=50000/exact", large, reqs.exact.host, reqs.exact.path, reqs.exact.want},
		{"routes=50000/exact-port-upper", large, strings.ToUpper(reqs.exact.host[:1]) + reqs.exact.host[1:] + ":443", reqs.exact.path, reqs.exact.want},
		{"routes=50000/wildcard", large, reqs.wildcard.host, reqs.wildcard.path, reqs.wildcard.want},
		{"routes=50000/shared-host-path", large, reqs.path.host, reqs.path.path, reqs.path.want},
		{"routes=50000/miss", large, "unknown.example.org", "/cart/items", ""},
	}
	for _, c := range cases {
		got := ""
		if e, ok := c.tbl.Match(c.host, c.path, header); ok {
			got = e.Key()
		}
		if got != c.want {
			b.Fatalf("%s: Match = %q, want %q", c.name, got, c.want)
		}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				c.tbl.Match(c.host, c.path, header)
			}
		})
	}
}

type benchRequest struct{ host, path, want string }

// benchRequests picks requests that hit an exact host, a tenant wildcard and a path on the shared API
// host of syntheticEntries (see its i%10 cases).
func benchRequests(entries []Entry) (r struct{ exact, wildcard, path benchRequest }) {
	i := len(entries) * 6 / 10
	i -= i % 10
	r.exact = benchRequest{entries[i+7].Hosts[0], "/cart/items", entries[i+7].Key()}
	r.wildcard = benchRequest{"shop.eu" + entries[i].Hosts[0][1:], "/cart/items", entries[i].Key()}
	r.path = benchRequest{entries[i+1].Hosts[0], entries[i+1].PathPrefixes[0] + "/v1/items/42", entries[i+1].Key()}
	return r
}

// BenchmarkMatchParallel shows that concurrent readers do not contend (the table is immutable).
func BenchmarkMatchParallel(b *testing.B) {
	entries := syntheticEntries(50_000)
	large := mustTable(b, entries...)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			e := &entries[(i*7919)%len(entries)]
			if _, ok := large.Match(strings.Replace(e.Hosts[0], "*", "x", 1), "/", http.Header{}); !ok && e.PathPrefixes == nil && e.Headers == nil {
				b.Errorf("no match for %s", e.Key())
			}
			i++
		}
	})
}

func BenchmarkNewTable50k(b *testing.B) {
	entries := syntheticEntries(50_000)
	b.ReportAllocs()
	for b.Loop() {
		mustTable(b, entries...)
	}
}

func BenchmarkEncode50k(b *testing.B) {
	tbl := mustTable(b, syntheticEntries(50_000)...)
	var size, shards int
	b.ReportAllocs()
	for b.Loop() {
		_, s, err := Encode(tbl, DefaultMaxShardBytes)
		if err != nil {
			b.Fatal(err)
		}
		size, shards = 0, len(s)
		for _, sh := range s {
			size += len(sh.Data)
		}
	}
	b.ReportMetric(float64(size), "bytes")
	b.ReportMetric(float64(shards), "shards")
}

func BenchmarkDecode50k(b *testing.B) {
	tbl := mustTable(b, syntheticEntries(50_000)...)
	m, shards, err := Encode(tbl, DefaultMaxShardBytes)
	if err != nil {
		b.Fatal(err)
	}
	data := shardMap(shards)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(m, data); err != nil {
			b.Fatal(err)
		}
	}
}
