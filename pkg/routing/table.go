package routing

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"iter"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/httpscale/httpscale/pkg/pmap"
)

// versionDomain starts every hashed encoding so that a future format cannot collide with this one.
const versionDomain = "httpscale.dev/routing-table/v1\n"

// Table is an immutable routing snapshot: the entries sorted by key and an index for Match.
//
// A Table never changes after NewTable or a decode returns it, so it is safe for concurrent use by any
// number of goroutines without locking; publish a new one (for example through an atomic.Pointer) to
// change routing. Tables derived from one another by an incremental decode (see Reader) share the
// entries and per-host indexes that did not change. Methods accept a nil *Table, which behaves as an
// empty table with version "".
type Table struct {
	version string
	// id identifies this Table in this process; parent is the id of the Table it was derived from by
	// an incremental decode (0 when built from scratch), and removed/added what changed (see Diff).
	id, parent     uint64
	removed, added []*Entry

	byKey pmap.Map[string, *Entry]
	// byHost lists, per host as written in entries ("shop.example.com", "*.example.com", "*"), the
	// entries naming it in key order: what an incremental update needs to rebuild one host's routes.
	byHost pmap.Map[string, []*Entry]

	exact    pmap.Map[string, *hostRoutes] // "shop.example.com"
	wildcard pmap.Map[string, *hostRoutes] // "example.com" for "*.example.com"
	any      *hostRoutes                   // "*"

	// sorted holds the entries in key order: set when built from scratch, else made on first use
	// (All, Entries), so that a derived table does not copy the entry list of every version. base is
	// the sorted entries of the table it was derived from when those were made (nil otherwise): then
	// the first use merges the change into them, O(n), instead of sorting, O(n log n).
	sortOnce sync.Once
	sorted   atomic.Pointer[[]*Entry]
	base     []*Entry
}

// tableIDs numbers Tables for Diff.
var tableIDs atomic.Uint64

// NewTable validates and canonicalises entries (see Entry.Validate) and builds a Table. The input is
// copied: later changes to entries do not affect the Table. Input order is irrelevant.
//
// Every invalid entry and every duplicate key is an error wrapping ErrInvalidEntry; NewTable never
// panics. Entries that claim an identical route (same host, path prefix and header set) are not an
// error: the first in namespace/name order wins that route and the other entry is not matched on it.
// Operators should remove such losers beforehand with Conflicts, which lets them choose the winner.
//
// The Version is the first 16 hex characters of the SHA-256 of the canonical encoding (the JSON lines
// Encode stores, in key order), so equal content yields an equal version. Cost: O(n log n) in the
// number of entries plus one JSON encoding of each; not for the hot path.
func NewTable(entries []Entry) (*Table, error) {
	canon := make([]Entry, len(entries))
	for i := range entries {
		c, err := entries[i].canonical()
		if err != nil {
			return nil, err
		}
		canon[i] = c
	}
	slices.SortFunc(canon, compareEntryKeys)
	lines := make([][]byte, len(canon))
	for i := range canon {
		if i > 0 && compareEntryKeys(canon[i-1], canon[i]) == 0 {
			return nil, fmt.Errorf("%w: %s appears more than once", ErrInvalidEntry, canon[i].Key())
		}
		line, err := json.Marshal(&canon[i])
		if err != nil {
			return nil, fmt.Errorf("encoding routing entry %s: %w", canon[i].Key(), err)
		}
		lines[i] = line
	}
	ptrs := make([]*Entry, len(canon))
	for i := range canon {
		ptrs[i] = &canon[i]
	}
	return buildTable(hashLines(lines), ptrs), nil
}

// Version identifies the table's content (see NewTable). Tables with equal versions route identically.
func (t *Table) Version() string {
	if t == nil {
		return ""
	}
	return t.version
}

// Len returns the number of entries.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.byKey.Len()
}

// Lookup returns the entry with key "namespace/name". The entry is shared and must not be modified.
// Cost: one map lookup, no allocation.
func (t *Table) Lookup(key string) (*Entry, bool) {
	if t == nil {
		return nil, false
	}
	return t.byKey.Get(key)
}

// All yields every entry, sorted by namespace/name, without copying: the entries are shared and must
// not be modified. Use it instead of Entries to read a large table (Entries copies every entry; on a
// table of 50,000 apps that is megabytes of garbage per reader). Cost: no allocation per entry.
func (t *Table) All() iter.Seq[*Entry] {
	return func(yield func(*Entry) bool) {
		if t == nil {
			return
		}
		for _, e := range t.entries() {
			if !yield(e) {
				return
			}
		}
	}
}

// Entries returns a deep copy of the entries, sorted by namespace/name, in canonical form. Cost: O(n)
// allocations; not for the hot path.
func (t *Table) Entries() []Entry {
	if t == nil {
		return nil
	}
	entries := t.entries()
	out := make([]Entry, len(entries))
	for i, e := range entries {
		out[i] = e.Clone()
	}
	return out
}

// entries returns the entries sorted by key, making them on first use for a derived table.
func (t *Table) entries() []*Entry {
	if p := t.sorted.Load(); p != nil {
		return *p
	}
	t.sortOnce.Do(func() {
		if t.sorted.Load() != nil {
			return
		}
		var out []*Entry
		if t.base != nil {
			gone := make(map[*Entry]struct{}, len(t.removed))
			for _, e := range t.removed {
				gone[e] = struct{}{}
			}
			out = mergeEntries(t.base, gone, t.added)
			t.base = nil
		} else {
			out = make([]*Entry, 0, t.byKey.Len())
			for _, e := range t.byKey.All() {
				out = append(out, e)
			}
			slices.SortFunc(out, compareKeys)
		}
		t.sorted.Store(&out)
	})
	return *t.sorted.Load()
}

// Diff returns what changed from prev to t when t was derived from prev by an incremental decode
// (Reader): the entries of prev that t no longer holds and the entries t holds that prev did not,
// each sorted by key (a changed entry is in both, by key). ok is false when t was not derived from
// prev in one step; the caller then has to compare the tables in full. The slices are shared and
// must not be modified. Cost: none; it lets a table's consumers do work proportional to the change.
func (t *Table) Diff(prev *Table) (removed, added []*Entry, ok bool) {
	if t == nil || prev == nil || t.parent == 0 || t.parent != prev.id {
		return nil, nil, false
	}
	return t.removed, t.added, true
}

func compareEntryKeys(a, b Entry) int { return compareKeys(&a, &b) }

func compareKeys(a, b *Entry) int {
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
}

// hashLines is the table version: SHA-256 over versionDomain and every line followed by "\n". Lines
// are JSON and never contain a raw newline, so the framing is unambiguous.
func hashLines(lines [][]byte) string {
	h := sha256.New()
	h.Write([]byte(versionDomain))
	for _, l := range lines {
		h.Write(l)
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// buildTable indexes canonical entries sorted by key, taking ownership of the slice. Routes that
// repeat an earlier entry's (host, path prefix, header set) are dropped, so the first entry in key
// order wins them.
func buildTable(version string, entries []*Entry) *Table {
	t := &Table{
		version:  version,
		id:       tableIDs.Add(1),
		exact:    pmap.New[string, *hostRoutes](pmap.String),
		wildcard: pmap.New[string, *hostRoutes](pmap.String),
	}
	if entries == nil {
		entries = []*Entry{}
	}
	t.sorted.Store(&entries)
	byKey := pmap.New[string, *Entry](pmap.String).EditSized(len(entries))
	hosts := map[string][]*Entry{}
	for _, e := range entries {
		byKey.Set(e.Key(), e)
		for _, host := range e.Hosts {
			hosts[host] = append(hosts[host], e)
		}
	}
	t.byKey = byKey.Map()
	t.byHost = pmap.From(pmap.String, len(hosts), maps.All(hosts))
	ex, wc := t.exact.EditSized(len(hosts)), t.wildcard.Edit()
	for host, list := range hosts {
		t.setHost(ex, wc, host, newHostRoutesFor(host, list))
	}
	t.exact, t.wildcard = ex.Map(), wc.Map()
	return t
}

// setHost stores the routes of host (nil removes them) in the index its kind belongs to.
func (t *Table) setHost(exact, wildcard *pmap.Builder[string, *hostRoutes], host string, hr *hostRoutes) {
	switch {
	case host == "*":
		t.any = hr
	case strings.HasPrefix(host, "*."):
		if hr == nil {
			wildcard.Delete(host[2:])
		} else {
			wildcard.Set(host[2:], hr)
		}
	default:
		if hr == nil {
			exact.Delete(host)
		} else {
			exact.Set(host, hr)
		}
	}
}

// newHostRoutesFor builds the routes of one host from the entries naming it, in key order. A route
// (path prefix and header set) already claimed by an earlier entry is skipped. Canonical entries
// repeat no host or prefix, so a host named by one entry needs no bookkeeping.
func newHostRoutesFor(host string, entries []*Entry) *hostRoutes {
	byPrefix := map[string][]rule{}
	var claimed map[string]struct{}
	if len(entries) > 1 {
		claimed = map[string]struct{}{}
	}
	for _, e := range entries {
		headers := compileHeaders(e.Headers)
		for r := range entryRoutes(e) {
			if claimed != nil {
				rk := routeKey(host, r.prefix, e.Headers)
				if _, dup := claimed[rk]; dup {
					continue
				}
				claimed[rk] = struct{}{}
			}
			byPrefix[r.prefix] = append(byPrefix[r.prefix], rule{headers: headers, entry: e, kind: r.kind, static: r.static, rewrite: r.rewrite})
		}
	}
	hr := newHostRoutes(byPrefix)
	for i, e := range entries {
		if i == 0 {
			hr.ns = e.Namespace
		} else if e.Namespace != hr.ns {
			hr.ns = ""
			break
		}
	}
	return hr
}

// withChanges returns a table with version holding t's entries minus removed (entries of t, compared
// by identity) plus added (canonical, sorted by key, keys not in t once removed is taken out). It
// shares every per-host index, every part of its maps (package pmap) and every entry that neither
// touches, so its cost grows with the size of the change, not with the table. t is not modified.
// The result routes as buildTable over the same entries, and Diff(t) returns removed and added.
func (t *Table) withChanges(version string, removed, added []*Entry) *Table {
	gone := make(map[*Entry]struct{}, len(removed))
	hosts := map[string]struct{}{}
	for _, e := range removed {
		gone[e] = struct{}{}
		for _, h := range e.Hosts {
			hosts[h] = struct{}{}
		}
	}
	for _, e := range added {
		for _, h := range e.Hosts {
			hosts[h] = struct{}{}
		}
	}
	n := &Table{
		version: version,
		id:      tableIDs.Add(1),
		parent:  t.id,
		removed: removed,
		added:   added,
		any:     t.any,
	}
	if p := t.sorted.Load(); p != nil {
		n.base = *p
	}
	byKey := t.byKey.Edit()
	for _, e := range removed {
		if cur, _ := byKey.Get(e.Key()); cur == e {
			byKey.Delete(e.Key())
		}
	}
	for _, e := range added {
		byKey.Set(e.Key(), e)
	}
	byHost, ex, wc := t.byHost.Edit(), t.exact.Edit(), t.wildcard.Edit()
	for host := range hosts {
		var plus []*Entry
		for _, e := range added {
			if slices.Contains(e.Hosts, host) {
				plus = append(plus, e)
			}
		}
		was, _ := t.byHost.Get(host)
		list := mergeEntries(was, gone, plus)
		if len(list) == 0 {
			byHost.Delete(host)
			n.setHost(ex, wc, host, nil)
			continue
		}
		byHost.Set(host, list)
		n.setHost(ex, wc, host, newHostRoutesFor(host, list))
	}
	n.byKey, n.byHost, n.exact, n.wildcard = byKey.Map(), byHost.Map(), ex.Map(), wc.Map()
	return n
}

// mergeEntries returns a new slice of the entries of old not in gone merged with added; both inputs
// are sorted by key.
func mergeEntries(old []*Entry, gone map[*Entry]struct{}, added []*Entry) []*Entry {
	out := make([]*Entry, 0, len(old)+len(added))
	i := 0
	for _, e := range old {
		if _, ok := gone[e]; ok {
			continue
		}
		for i < len(added) && compareKeys(added[i], e) < 0 {
			out = append(out, added[i])
			i++
		}
		out = append(out, e)
	}
	return append(out, added[i:]...)
}

var rootPrefix = []string{"/"}

// routePrefixes returns the entry's path prefixes, with "no prefixes" meaning "/".
func routePrefixes(e *Entry) []string {
	if len(e.PathPrefixes) == 0 {
		return rootPrefix
	}
	return e.PathPrefixes
}

// routeKey identifies one route of a canonical entry; two entries with an equal routeKey claim the
// same requests. Header names and values contain no control characters, so the separators are safe.
func routeKey(host, prefix string, headers []HeaderMatch) string {
	var b strings.Builder
	b.WriteString(host)
	b.WriteByte(0)
	b.WriteString(prefix)
	for _, h := range headers {
		b.WriteByte(0)
		b.WriteString(h.Name)
		if h.Value == nil {
			b.WriteByte(1)
		} else {
			b.WriteByte(2)
			b.WriteString(*h.Value)
		}
	}
	return b.String()
}
