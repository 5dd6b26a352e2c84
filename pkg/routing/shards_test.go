package routing

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestReaderFollowsEncoder changes a table one step at a time through an Encoder and checks, after
// every step, that a Reader that followed every version serves exactly the table a fresh decode
// gives (entries, version and every route), and that each single-entry step changed one shard.
func TestReaderFollowsEncoder(t *testing.T) {
	const maxEntries = 16
	enc, err := NewEncoder(DefaultMaxShardBytes, maxEntries)
	if err != nil {
		t.Fatal(err)
	}
	pool := syntheticEntries(400)
	// Several entries share hosts, so removing a route's winner must hand the route to the next one.
	for i := 0; i < 40; i++ {
		pool[i].Hosts = []string{"shared.example.com"}
		pool[i].Headers = nil
		pool[i].PathPrefixes = nil
	}
	r := rand.New(rand.NewPCG(1, 2))
	live := map[string]Entry{}
	var follower Reader
	var prev Manifest
	var prevTable *Table
	diffs := 0
	put := func(e *Entry) {
		_, line, err := EncodeEntry(*e)
		if err != nil {
			t.Fatal(err)
		}
		enc.Put(e.Key(), line)
		live[e.Key()] = *e
	}
	for step := 0; step < 600; step++ {
		e := pool[r.IntN(len(pool))]
		op := "put"
		switch _, ok := live[e.Key()]; {
		case ok && r.IntN(3) == 0:
			op = "delete"
			enc.Put(e.Key(), nil)
			delete(live, e.Key())
		case ok:
			op = "change"
			e.Generation = int64(step)
			if r.IntN(2) == 0 {
				e.Hosts = []string{fmt.Sprintf("moved-%d.example.com", step), "shared.example.com"}
			}
			put(&e)
		default:
			put(&e)
		}
		m, shards, err := enc.Encode()
		if err != nil {
			t.Fatal(err)
		}
		data := shardMap(shards)
		got, err := follower.Decode(m, data)
		if err != nil {
			t.Fatalf("step %d (%s): follower: %v", step, op, err)
		}
		fresh, err := Decode(m, data)
		if err != nil {
			t.Fatalf("step %d: fresh decode: %v", step, err)
		}
		var want []Entry
		for _, x := range live {
			want = append(want, x)
		}
		wantTable := mustTable(t, want...)
		if d := diff(wantTable.Entries(), got.Entries()); d != "" {
			t.Fatalf("step %d (%s): follower's entries (-want +got):\n%s", step, op, d)
		}
		if got.Version() != m.Version || fresh.Version() != m.Version {
			t.Fatalf("step %d: versions follower %s fresh %s manifest %s", step, got.Version(), fresh.Version(), m.Version)
		}
		sameRoutes(t, fresh, got, pool, step)
		if removed, added, ok := got.Diff(prevTable); ok {
			diffs++
			checkDiff(t, prevTable, got, removed, added, step)
		}
		if _, _, ok := got.Diff(fresh); ok {
			t.Fatalf("step %d: Diff against an unrelated table succeeded", step)
		}
		prevTable = got
		if prev.Buckets == m.Buckets && step > 0 {
			if n := changedShards(prev, m); n > 1 {
				t.Fatalf("step %d (%s of %s): %d shards changed, want at most 1", step, op, e.Key(), n)
			}
		}
		for _, ref := range m.Shards {
			if ref.Entries > maxEntries {
				t.Fatalf("step %d: shard %s holds %d entries, limit %d", step, ref.Name, ref.Entries, maxEntries)
			}
		}
		prev = m
	}
	if prev.Buckets < 8 {
		t.Errorf("ended with %d buckets; the test meant to exercise several", prev.Buckets)
	}
	if diffs < 400 {
		t.Errorf("only %d of 600 versions had a Diff to the previous one", diffs)
	}
}

// checkDiff checks that prev's entries without removed plus added are next's, by identity: the
// entries a change did not touch are shared.
func checkDiff(t *testing.T, prev, next *Table, removed, added []*Entry, step int) {
	t.Helper()
	want := map[string]*Entry{}
	for e := range prev.All() {
		want[e.Key()] = e
	}
	for _, e := range removed {
		if want[e.Key()] != e {
			t.Fatalf("step %d: Diff removed %s, which the previous table does not hold", step, e.Key())
		}
		delete(want, e.Key())
	}
	for _, e := range added {
		if _, dup := want[e.Key()]; dup {
			t.Fatalf("step %d: Diff added %s twice", step, e.Key())
		}
		want[e.Key()] = e
	}
	if next.Len() != len(want) {
		t.Fatalf("step %d: %d entries, the Diff says %d", step, next.Len(), len(want))
	}
	for e := range next.All() {
		if want[e.Key()] != e {
			t.Fatalf("step %d: %s is not the entry the Diff says", step, e.Key())
		}
	}
}

// sameRoutes checks that two tables route every host of pool (and a few others) identically, and
// agree on Lookup.
func sameRoutes(t *testing.T, want, got *Table, pool []Entry, step int) {
	t.Helper()
	hosts := []string{"shared.example.com", "nothing.example.org", "x.wild.example.com"}
	for _, e := range pool {
		hosts = append(hosts, e.Hosts...)
		if k, ok := got.Lookup(e.Key()); ok != func() bool { _, ok := want.Lookup(e.Key()); return ok }() || ok && k.Key() != e.Key() {
			t.Fatalf("step %d: Lookup(%s) differs", step, e.Key())
		}
	}
	hosts = append(hosts, fmt.Sprintf("moved-%d.example.com", step))
	for _, h := range hosts {
		if h == "*" {
			h = "any.example.net"
		}
		if len(h) > 2 && h[:2] == "*." {
			h = "sub" + h[1:]
		}
		for _, path := range []string{"/", "/api/v1", "/cart/items"} {
			for _, hdr := range []http.Header{nil, {"X-Tenant": {"a"}}} {
				a, aok := want.Match(h, path, hdr)
				b, bok := got.Match(h, path, hdr)
				if aok != bok || aok && a.Key() != b.Key() {
					t.Fatalf("step %d: Match(%s, %s, %v): fresh %v, follower %v", step, h, path, hdr, keyOf(a), keyOf(b))
				}
			}
		}
	}
	if !slices.EqualFunc(slices.Collect(want.All()), slices.Collect(got.All()), func(a, b *Entry) bool { return a.Key() == b.Key() }) {
		t.Fatalf("step %d: All() order differs", step)
	}
}

func keyOf(e *Entry) string {
	if e == nil {
		return ""
	}
	return e.Key()
}

func changedShards(a, b Manifest) int {
	old := map[string]string{}
	for _, r := range a.Shards {
		old[r.Name] = r.SHA256
	}
	n := 0
	for _, r := range b.Shards {
		if old[r.Name] != r.SHA256 {
			n++
		}
		delete(old, r.Name)
	}
	return n + len(old)
}

// filledEncoder returns an Encoder of shards of at most maxEntries holding n synthetic entries, and
// the table it encodes.
func filledEncoder(tb testing.TB, n, maxEntries int) (*Encoder, Manifest, []Shard) {
	tb.Helper()
	enc, err := NewEncoder(DefaultMaxShardBytes, maxEntries)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range syntheticEntries(n) {
		put(tb, enc, e)
	}
	m, shards := encode(tb, enc)
	return enc, m, shards
}

// putEncode adds e to enc and returns the table it encodes then.
func putEncode(tb testing.TB, enc *Encoder, e Entry) (Manifest, []Shard) {
	tb.Helper()
	put(tb, enc, e)
	return encode(tb, enc)
}

func put(tb testing.TB, enc *Encoder, e Entry) {
	tb.Helper()
	_, line, err := EncodeEntry(e)
	if err != nil {
		tb.Fatal(err)
	}
	enc.Put(e.Key(), line)
}

func encode(tb testing.TB, enc *Encoder) (Manifest, []Shard) {
	tb.Helper()
	m, shards, err := enc.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	return m, shards
}

// TestReaderReadsOnlyChangedShards counts the shards a Reader asks for.
func TestReaderReadsOnlyChangedShards(t *testing.T) {
	enc, m, shards := filledEncoder(t, 1000, 32)
	var r Reader
	data := shardMap(shards)
	asked := 0
	get := func(name string) ([]byte, bool, error) { asked++; d, ok := data[name]; return d, ok, nil }
	if _, err := r.Read(m, get); err != nil {
		t.Fatal(err)
	}
	if asked != len(m.Shards) || len(m.Shards) < 32 {
		t.Fatalf("first read asked for %d shards of %d", asked, len(m.Shards))
	}
	m, shards = putEncode(t, enc, entry("new/app", []string{"new.example.com"}))
	data = shardMap(shards)
	asked = 0
	got, err := r.Read(m, get)
	if err != nil {
		t.Fatal(err)
	}
	if asked != 1 {
		t.Errorf("after adding one entry the reader asked for %d shards, want 1", asked)
	}
	if e, ok := got.Match("new.example.com", "/", nil); !ok || e.Key() != "new/app" {
		t.Errorf("new entry not routed")
	}
	// A failed read leaves the reader serving what it had.
	enc.Put("new/app", nil)
	m2, _, err := enc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(m2, func(string) ([]byte, bool, error) { return nil, false, nil }); err == nil {
		t.Fatal("read with a missing shard succeeded")
	}
	if r.Table() != got {
		t.Error("a failed read replaced the reader's table")
	}
}

// TestReaderFollowingChangesHoldsNoMore checks that a Reader that decoded a table and then many
// one-entry changes holds no more memory than one that decoded the final table at once: an entry
// decoded again must not keep a whole shard's worth of entries alive with it.
func TestReaderFollowingChangesHoldsNoMore(t *testing.T) {
	enc, m, shards := filledEncoder(t, 10_000, DefaultMaxShardEntries)
	follower := &Reader{}
	if _, err := follower.Decode(m, shardMap(shards)); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		m, shards = putEncode(t, enc, entry(fmt.Sprintf("churn/app-%d", i), []string{fmt.Sprintf("app-%d.churn.example.com", i)}))
		if _, err := follower.Decode(m, shardMap(shards)); err != nil {
			t.Fatal(err)
		}
	}
	data := shardMap(shards)
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	before := heap()
	fresh := &Reader{}
	if _, err := fresh.Decode(m, data); err != nil {
		t.Fatal(err)
	}
	withBoth := heap()
	freshHolds := withBoth - before
	runtime.KeepAlive(follower)
	follower = nil
	followerHolds := withBoth - heap()
	runtime.KeepAlive(fresh)
	t.Logf("%d entries: a reader that followed 300 changes holds %d KiB, one that read the final table %d KiB",
		fresh.Table().Len(), followerHolds>>10, freshHolds>>10)
	if followerHolds > freshHolds*11/10+256<<10 {
		t.Errorf("the reader that followed the changes holds %d KiB, more than the %d KiB of a fresh one", followerHolds>>10, freshHolds>>10)
	}
}

func BenchmarkReaderOneChange10k(b *testing.B) {
	enc, m, shards := filledEncoder(b, 10_000, DefaultMaxShardEntries)
	var r Reader
	if _, err := r.Decode(m, shardMap(shards)); err != nil {
		b.Fatal(err)
	}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		i++
		m, shards := putEncode(b, enc, entry(fmt.Sprintf("bench/app-%d", i), []string{fmt.Sprintf("app-%d.bench.example.com", i)}))
		if _, err := r.Decode(m, shardMap(shards)); err != nil {
			b.Fatal(err)
		}
	}
}

// formatV1 stores tbl the way operators before format 2 did: one shard, the version hashed over
// every entry's line.
func formatV1(t *testing.T, tbl *Table) (Manifest, map[string][]byte) {
	t.Helper()
	var text strings.Builder
	for e := range tbl.All() {
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		text.Write(line)
		text.WriteByte('\n')
	}
	data := gz(text.String())
	sum := sha256.Sum256(data)
	m := Manifest{Format: manifestFormatV1, Version: tbl.Version(), Entries: tbl.Len(), Buckets: 1,
		Shards: []ShardRef{{Name: "0", SHA256: hex.EncodeToString(sum[:]), Entries: tbl.Len()}}}
	return m, map[string][]byte{"0": data}
}

// A reader follows a table across a rolling upgrade of the operator: format 1, then 2, then 1 again.
func TestReaderReadsFormatOne(t *testing.T) {
	tbl := mustTable(t, syntheticEntries(300)...)
	m1, data1 := formatV1(t, tbl)
	var r Reader
	got, err := r.Decode(m1, data1)
	if err != nil {
		t.Fatalf("format 1: %v", err)
	}
	if got.Version() != tbl.Version() {
		t.Errorf("format 1 version %s, want %s", got.Version(), tbl.Version())
	}
	if d := diff(tbl.Entries(), got.Entries()); d != "" {
		t.Fatalf("format 1 entries (-want +got):\n%s", d)
	}
	m2, shards := encodeT(t, tbl, DefaultMaxShardBytes)
	if got, err = r.Decode(m2, shardMap(shards)); err != nil || got.Version() != m2.Version {
		t.Fatalf("format 2 after 1: %v, version %s want %s", err, got.Version(), m2.Version)
	}
	if d := diff(tbl.Entries(), got.Entries()); d != "" {
		t.Fatalf("format 2 entries (-want +got):\n%s", d)
	}
	if got, err = r.Decode(m1, data1); err != nil || got.Version() != tbl.Version() {
		t.Fatalf("format 1 after 2: %v", err)
	}
	// A format-1 table whose entries do not hash to its version is corrupt.
	m1.Version = "0123456789abcdef"
	if _, err := Decode(m1, data1); !errors.Is(err, ErrCorrupt) {
		t.Errorf("format 1 with a wrong version: %v, want ErrCorrupt", err)
	}
}
