package routing

import (
	"slices"
	"testing"
)

func TestConflicts(t *testing.T) {
	tests := []struct {
		name    string
		entries []Entry
		want    []Conflict
	}{
		{
			name: "distinct routes",
			entries: []Entry{
				entry("a/one", []string{"shop.example.com"}),
				entry("a/two", []string{"shop.example.com"}, paths("/api")),
				entry("a/three", []string{"shop.example.com"}, hdr("X-Beta=1")),
				entry("a/four", []string{"shop.example.com"}, hdr("X-Beta")),
				entry("a/five", []string{"*.example.com"}),
				entry("a/six", []string{"*"}),
			},
		},
		{
			name: "identical route: first in slice order wins",
			entries: []Entry{
				entry("z/first", []string{"shop.example.com"}, paths("/api")),
				entry("a/second", []string{"shop.example.com"}, paths("/api")),
			},
			want: []Conflict{{Loser: "a/second", Winner: "z/first", Host: "shop.example.com", PathPrefix: "/api"}},
		},
		{
			name: "compared after canonicalisation",
			entries: []Entry{
				entry("a/first", []string{"Shop.Example.com"}, paths("/api/"), hdr("x-beta=1")),
				entry("a/second", []string{"other.example.com", "shop.example.com"}, paths("/api"), hdr("X-BETA=1")),
			},
			want: []Conflict{{Loser: "a/second", Winner: "a/first", Host: "shop.example.com", PathPrefix: "/api",
				Headers: []HeaderMatch{{Name: "X-Beta", Value: ptr("1")}}}},
		},
		{
			name: "no prefix is the root prefix",
			entries: []Entry{
				entry("a/first", []string{"*"}),
				entry("a/second", []string{"*"}, paths("/", "/x")),
			},
			want: []Conflict{{Loser: "a/second", Winner: "a/first", Host: "*", PathPrefix: "/"}},
		},
		{
			name: "a loser claims nothing",
			entries: []Entry{
				entry("a/first", []string{"one.example.com"}),
				entry("a/second", []string{"one.example.com", "two.example.com"}),
				entry("a/third", []string{"two.example.com"}),
			},
			want: []Conflict{{Loser: "a/second", Winner: "a/first", Host: "one.example.com", PathPrefix: "/"}},
		},
		{
			name: "several losers to one winner",
			entries: []Entry{
				entry("a/first", []string{"one.example.com"}),
				entry("b/second", []string{"one.example.com"}),
				entry("c/third", []string{"one.example.com"}),
			},
			want: []Conflict{
				{Loser: "b/second", Winner: "a/first", Host: "one.example.com", PathPrefix: "/"},
				{Loser: "c/third", Winner: "a/first", Host: "one.example.com", PathPrefix: "/"},
			},
		},
		{
			name: "invalid entries and repeated keys are skipped",
			entries: []Entry{
				entry("a/first", []string{"UPPER CASE"}),
				entry("a/second", []string{"one.example.com"}),
				entry("a/second", []string{"one.example.com"}),
				entry("a/third", []string{"two.example.com"}, func(e *Entry) { e.Port = 0 }),
				entry("a/fourth", []string{"two.example.com"}),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := diff(tc.want, Conflicts(tc.entries)); d != "" {
				t.Errorf("Conflicts (-want +got):\n%s", d)
			}
		})
	}
}

// TestNewTableConflictDeterministic checks that NewTable, given entries Conflicts would report, is
// deterministic: the first entry in namespace/name order holds the route whatever the input order.
func TestNewTableConflictDeterministic(t *testing.T) {
	entries := []Entry{
		entry("b/loser", []string{"shop.example.com"}, paths("/api")),
		entry("a/winner", []string{"shop.example.com"}, paths("/api")),
		entry("c/other", []string{"shop.example.com"}),
	}
	var version string
	for i := range 3 {
		tbl := mustTable(t, entries...)
		e, ok := tbl.Match("shop.example.com", "/api/x", nil)
		if !ok || e.Key() != "a/winner" {
			t.Fatalf("order %d: matched %v, want a/winner", i, e)
		}
		if _, ok := tbl.Lookup("b/loser"); !ok {
			t.Errorf("order %d: the losing entry is not in the table", i)
		}
		if version != "" && tbl.Version() != version {
			t.Errorf("order %d: version %s, want %s", i, tbl.Version(), version)
		}
		version = tbl.Version()
		slices.Reverse(entries)
		entries[0], entries[1] = entries[1], entries[0]
	}
}
