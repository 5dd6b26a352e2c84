package controller

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func cand(key, host string, age time.Duration) candidate {
	ns, name, _ := strings.Cut(key, "/")
	return candidate{
		entry:   routing.Entry{Namespace: ns, Name: name, Generation: 1, Hosts: []string{host}, Service: name, Port: 80},
		created: t0.Add(-age),
	}
}

// decideAll returns the published keys, the losers' winners and the table version of a fresh state
// given cands in the order given.
func decideAll(t *testing.T, cands []candidate) (published []string, winners map[string]string, version string) {
	t.Helper()
	s, err := newTableState(routing.DefaultMaxShardBytes, routing.DefaultMaxShardEntries)
	if err != nil {
		t.Fatal(err)
	}
	for i := range cands {
		c := cands[i]
		if err := c.prepare(routing.DefaultMaxEntryBytes); err != nil {
			t.Fatal(err)
		}
		s.set(c.entry.Key(), &c)
	}
	s.decide()
	m, _, err := s.enc.Encode()
	if err != nil {
		t.Fatal(err)
	}
	for k := range s.published {
		published = append(published, k)
	}
	slices.Sort(published)
	winners = map[string]string{}
	for loser, c := range s.losers {
		winners[loser] = c.Winner
	}
	return published, winners, m.Version
}

func TestDecideOldestWinsWhateverTheOrder(t *testing.T) {
	cands := []candidate{
		cand("a/aa-young", "shared.example.com", time.Minute),
		cand("z/zz-old", "shared.example.com", time.Hour),
		cand("m/same-age-b", "tie.example.com", time.Hour),
		cand("m/same-age-a", "tie.example.com", time.Hour),
		cand("x/alone", "alone.example.com", time.Second),
	}
	var version string
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		r.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		published, winners, v := decideAll(t, cands)
		if d := cmp.Diff([]string{"m/same-age-a", "x/alone", "z/zz-old"}, published); d != "" {
			t.Fatalf("table keys (-want +got):\n%s", d)
		}
		if d := cmp.Diff(map[string]string{"a/aa-young": "z/zz-old", "m/same-age-b": "m/same-age-a"}, winners); d != "" {
			t.Fatalf("conflicts (-want +got):\n%s", d)
		}
		if i > 0 && v != version {
			t.Fatalf("version %s differs from %s for the same input in another order", v, version)
		}
		version = v
	}
}

// A change is decided incrementally: after any sequence of sets and removals the state equals a fresh
// decision over what is left, including a loser that wins once the winner is gone and the chain
// A beats B, B would beat C (C wins, since a loser claims nothing).
func TestDecideIncrementallyEqualsFresh(t *testing.T) {
	pool := []candidate{
		cand("a/a", "one.example.com", 5*time.Hour),
		cand("b/b", "one.example.com", 4*time.Hour),
		cand("c/c", "two.example.com", 3*time.Hour),
		cand("d/d", "three.example.com", 2*time.Hour),
		cand("e/e", "alone.example.com", time.Hour),
	}
	pool[1].entry.Hosts = []string{"one.example.com", "two.example.com"} // b loses to a, so c keeps two
	pool[3].entry.Hosts = []string{"two.example.com", "three.example.com"}
	s, err := newTableState(routing.DefaultMaxShardBytes, 2)
	if err != nil {
		t.Fatal(err)
	}
	live := map[string]candidate{}
	r := rand.New(rand.NewPCG(7, 8))
	for step := range 300 {
		c := pool[r.IntN(len(pool))]
		key := c.entry.Key()
		if _, ok := live[key]; ok && r.IntN(2) == 0 {
			s.set(key, nil)
			delete(live, key)
		} else {
			if r.IntN(3) == 0 {
				c.entry.Hosts = []string{fmt.Sprintf("h%d.example.com", r.IntN(3)), "two.example.com"}
			}
			p := c
			if err := p.prepare(routing.DefaultMaxEntryBytes); err != nil {
				t.Fatal(err)
			}
			s.set(key, &p)
			live[key] = c
		}
		s.decide()
		m, _, err := s.enc.Encode()
		if err != nil {
			t.Fatal(err)
		}
		var rest []candidate
		for _, c := range live {
			rest = append(rest, c)
		}
		published, winners, version := decideAll(t, rest)
		var got []string
		for k := range s.published {
			got = append(got, k)
		}
		slices.Sort(got)
		gotWinners := map[string]string{}
		for loser, c := range s.losers {
			gotWinners[loser] = c.Winner
		}
		if d := cmp.Diff(published, got); d != "" {
			t.Fatalf("step %d: published (-fresh +incremental):\n%s", step, d)
		}
		if d := cmp.Diff(winners, gotWinners); d != "" {
			t.Fatalf("step %d: conflicts (-fresh +incremental):\n%s", step, d)
		}
		// Bucket counts only grow, so compare content rather than versions.
		if m.Entries != len(published) {
			t.Fatalf("step %d: encoded %d entries, want %d (fresh version %s)", step, m.Entries, len(published), version)
		}
	}
}

func TestSetLeavesInvalidEntriesOut(t *testing.T) {
	w := &TableWriter{Log: logr.Discard()}
	bad := cand("a/bad", "bad.example.com", time.Hour)
	bad.entry.Hosts = nil
	w.Set("a/bad", &bad)
	good := cand("a/good", "good.example.com", time.Hour)
	w.Set("a/good", &good)
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.state.desired["a/bad"]; ok {
		t.Error("an invalid entry was accepted")
	}
	if _, ok := w.state.desired["a/good"]; !ok {
		t.Error("one invalid entry kept a valid one out")
	}
}

// A table written again after another (A, B, A) is a new write: a replica still serving B must not
// count as serving an entry that only the second A brought back.
func TestRecordSequencesRewrittenVersions(t *testing.T) {
	w := &TableWriter{}
	w.init()
	none := map[string]routing.Conflict{}
	wa := w.ledger.record(w.Written(), "A", map[string]int64{"ns/x": 1, "ns/y": 1}, none)
	wb := w.ledger.record(wa, "B", map[string]int64{"ns/y": -1}, none)
	wa2 := w.ledger.record(wb, "A", map[string]int64{"ns/y": 1}, none)

	_, ySeq, ok := wa2.Introduced("ns/y", 1)
	if !ok {
		t.Fatal("y not introduced by the second A")
	}
	fleet := &Fleet{Replicas: []Replica{{Address: "1", Version: "B"}, {Address: "2", Version: "A"}}}
	if ready, total := fleet.Propagation(wa2, ySeq); ready != 1 || total != 2 {
		t.Errorf("propagation of y = %d/%d, want 1/2 (the replica on B does not route y)", ready, total)
	}
	_, xSeq, _ := wa2.Introduced("ns/x", 1)
	if ready, _ := fleet.Propagation(wa2, xSeq); ready != 2 {
		t.Errorf("propagation of x = %d, want 2 (every table since its introduction holds it)", ready)
	}
	if _, _, ok := wa2.Introduced("ns/x", 2); ok {
		t.Error("x introduced at a generation the table does not hold")
	}
	if wa2.Contains("ns/z") || !wa2.Contains("ns/y") {
		t.Error("Contains disagrees with the table")
	}
}

func TestPruneVersions(t *testing.T) {
	in := map[string]uint64{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}
	if d := cmp.Diff(map[string]uint64{"c": 3, "d": 4, "e": 5}, pruneVersions(in, 3, 10)); d != "" {
		t.Errorf("older than the oldest introduction (-want +got):\n%s", d)
	}
	if d := cmp.Diff(map[string]uint64{"d": 4, "e": 5}, pruneVersions(in, 0, 2)); d != "" {
		t.Errorf("limit keeps the newest (-want +got):\n%s", d)
	}
}

func TestChangedKeys(t *testing.T) {
	prev := &Written{
		introduced: map[string]introduction{"ns/same": {1, 1, "v1"}, "ns/updated": {1, 1, "v1"}, "ns/removed": {1, 1, "v1"}},
		Conflicts:  map[string]routing.Conflict{"ns/loser": {Winner: "ns/removed"}},
	}
	next := &Written{
		introduced: map[string]introduction{"ns/same": {1, 1, "v1"}, "ns/updated": {2, 2, "v2"}, "ns/loser": {1, 2, "v2"}},
		Conflicts:  map[string]routing.Conflict{"ns/new-loser": {Winner: "ns/same"}},
	}
	touched := map[string]int64{"ns/same": 1, "ns/updated": 2, "ns/removed": -1, "ns/loser": 1, "ns/new-loser": -1}
	if d := cmp.Diff([]string{"ns/loser", "ns/new-loser", "ns/removed", "ns/updated"}, changedKeys(prev, next, touched)); d != "" {
		t.Errorf("changed (-want +got):\n%s", d)
	}
}

// The writer's pacing, in simulated time: one change to an idle writer is written at once; a steady
// stream of changes is written at its first change and then once per MaxDelay, not once per change.
func TestTableWriterCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		scheme := fakeScheme(t)
		c := fake.NewClientBuilder().WithScheme(scheme).Build()
		w := &TableWriter{
			Client: c, Reader: c, Namespace: "httpscale-system", Base: routing.DefaultBaseName,
			Debounce: 250 * time.Millisecond, MaxDelay: 2 * time.Second, StartupGrace: time.Minute,
			MaxShardBytes: routing.DefaultMaxShardBytes, Log: logr.Discard(),
		}
		var notified []string
		w.Notify = func(keys []string) { notified = append(notified, keys...) }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Start(ctx) }()
		time.Sleep(time.Second) // the start-up write of the (empty) table, then idle
		synctest.Wait()
		base := w.Tables.Load()

		w.Set("ns/one", ptrTo(cand("ns/one", "one.example.com", time.Hour)))
		synctest.Wait()
		if got := w.Tables.Load() - base; got != 1 {
			t.Fatalf("an idle writer wrote %d tables at once for one change, want 1 (no quiet period first)", got)
		}
		if !slices.Equal(notified, []string{"ns/one"}) {
			t.Errorf("notified %v, want [ns/one]", notified)
		}

		// A second change right after the write waits for the quiet period.
		w.Set("ns/two", ptrTo(cand("ns/two", "two.example.com", time.Hour)))
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		if got := w.Tables.Load() - base; got != 1 {
			t.Fatalf("written %d tables before the quiet period after a write ended, want 1", got)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := w.Tables.Load() - base; got != 2 {
			t.Fatalf("written %d tables after the quiet period, want 2", got)
		}
		time.Sleep(time.Second) // idle again

		// 200 changes, one every 50 ms (10 s): the first at once, then a write every 2 s plus the last one.
		for i := range 200 {
			key := fmt.Sprintf("ns/app-%03d", i)
			w.Set(key, ptrTo(cand(key, fmt.Sprintf("app-%03d.example.com", i), time.Hour)))
			time.Sleep(50 * time.Millisecond)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := w.Tables.Load() - base - 2; got < 6 || got > 7 {
			t.Errorf("200 changes over 10s made %d writes, want 6 or 7 (the first change, then one per MaxDelay)", got)
		}
		table, err := readStored(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if table.Len() != 202 || table.Version() != w.Written().Version {
			t.Errorf("stored table has %d entries, version %s; want 202, %s", table.Len(), table.Version(), w.Written().Version)
		}

		// Setting what is already there changes nothing and writes nothing.
		before := w.Writes.Load()
		w.Set("ns/one", ptrTo(cand("ns/one", "one.example.com", time.Hour)))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if w.Writes.Load() != before {
			t.Errorf("an unchanged Set caused %d ConfigMap writes", w.Writes.Load()-before)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start returned %v", err)
		}
	})
}

func ptrTo[T any](v T) *T { return &v }

func readStored(ctx context.Context, c client.Reader) (*routing.Table, error) {
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace("httpscale-system")); err != nil {
		return nil, err
	}
	var head *corev1.ConfigMap
	var shards []*corev1.ConfigMap
	for i := range list.Items {
		if list.Items[i].Name == routing.DefaultBaseName {
			head = &list.Items[i]
		} else {
			shards = append(shards, &list.Items[i])
		}
	}
	return routing.FromConfigMaps(head, shards)
}

func TestAffectedByAFleetChange(t *testing.T) {
	w := &Written{
		versions:   map[string]uint64{"v1": 1, "v2": 2, "v3": 3},
		introduced: map[string]introduction{"ns/old": {1, 1, "v1"}, "ns/mid": {1, 2, "v2"}, "ns/new": {1, 3, "v3"}},
	}
	fleet := func(versions ...string) *Fleet {
		f := &Fleet{}
		for i, v := range versions {
			f.Replicas = append(f.Replicas, Replica{Address: fmt.Sprint(i), Version: v})
		}
		return f
	}
	for _, tc := range []struct {
		name       string
		prev, next *Fleet
		want       []string
		all        bool
	}{
		{"one replica catches up with the last write", fleet("v2", "v3"), fleet("v3", "v3"), []string{"ns/new"}, false},
		{"replicas far behind", fleet("v1", "v3"), fleet("v2", "v3"), []string{"ns/mid", "ns/new"}, false},
		{"a replica joins", fleet("v3"), fleet("v3", "v3"), nil, true},
		{"an unknown version", fleet("v3", "v0"), fleet("v3", "v3"), nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, all := Affected(tc.prev, tc.next, w)
			slices.Sort(got)
			if all != tc.all || !slices.Equal(got, tc.want) {
				t.Errorf("Affected = %v, all=%v; want %v, all=%v", got, all, tc.want, tc.all)
			}
			// Whatever is left out must really be counted the same in both fleets.
			for k, in := range w.introduced {
				if all || slices.Contains(got, k) {
					continue
				}
				r1, t1 := tc.prev.Propagation(w, in.seq)
				r2, t2 := tc.next.Propagation(w, in.seq)
				if r1 != r2 || t1 != t2 {
					t.Errorf("%s left out but its propagation changes: %d/%d → %d/%d", k, r1, t1, r2, t2)
				}
			}
		})
	}
}

// A decision made from a read older than the object's deletion must not put it back; a new object
// of the same name may.
func TestDeletingIgnoresStaleDecisions(t *testing.T) {
	w := writerForTest(t, nil)
	c := cand("ns/app", "app.example.com", time.Hour)
	c.uid = "uid-1"
	w.Set("ns/app", &c)
	w.SetDeleting("ns/app", "uid-1")
	if w.Released("ns/app", "uid-2") {
		t.Error("released for another object")
	}
	w.Set("ns/app", &c) // a routing decision that read the object before its deletion
	w.mu.Lock()
	_, back := w.state.desired["ns/app"]
	w.mu.Unlock()
	if back {
		t.Fatal("a stale decision put a deleting object back")
	}
	if w.Released("ns/app", "uid-1") {
		t.Error("released before any table was written after its removal was decided")
	}
	if err := w.write(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !w.Released("ns/app", "uid-1") {
		t.Error("not released although its removal was decided and a table written since")
	}
	again := c
	again.uid = "uid-2"
	w.Set("ns/app", &again)
	w.mu.Lock()
	_, back = w.state.desired["ns/app"]
	w.mu.Unlock()
	if !back {
		t.Error("a new object of the same name was refused")
	}
}

// clientSeeingWrites returns a fake client that calls seen with every object it created or updated,
// after the write succeeded.
func clientSeeingWrites(scheme *runtime.Scheme, seen func(client.Object)) client.WithWatch {
	return fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := c.Create(ctx, obj, opts...); err != nil {
				return err
			}
			seen(obj)
			return nil
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := c.Update(ctx, obj, opts...); err != nil {
				return err
			}
			seen(obj)
			return nil
		},
	}).Build()
}

// writerForTest returns a writer on a fake client; onWrite, if not nil, sees every ConfigMap the
// writer created or updated, after the fact.
func writerForTest(t *testing.T, onWrite func(*corev1.ConfigMap)) *TableWriter {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	seen := func(obj client.Object) {
		if cm, ok := obj.(*corev1.ConfigMap); ok && onWrite != nil {
			onWrite(cm)
		}
	}
	c := clientSeeingWrites(scheme, seen)
	return &TableWriter{Client: c, Reader: c, Namespace: "httpscale-system", Base: routing.DefaultBaseName,
		MaxShardBytes: routing.DefaultMaxShardBytes, Log: logr.Discard()}
}

// A write under way when an object's removal is decided took the state before the decision and
// publishes the object: the object is released (its finalizer may go) only after a later write. A
// burst caught this: objects deleted right after their first routing left the API while the table
// the write in flight published still routed them.
func TestReleasedWaitsForAWriteAfterTheDecision(t *testing.T) {
	var w *TableWriter
	var releasedDuringWrite []bool
	w = writerForTest(t, func(cm *corev1.ConfigMap) {
		if cm.Name != routing.DefaultBaseName || len(releasedDuringWrite) > 0 {
			return
		}
		// The head holding ns/app is being written; the object is deleted now.
		w.SetDeleting("ns/app", "uid-1")
		releasedDuringWrite = append(releasedDuringWrite, w.Released("ns/app", "uid-1"))
	})
	c := cand("ns/app", "app.example.com", time.Hour)
	c.uid = "uid-1"
	w.Set("ns/app", &c)
	ctx := context.Background()
	if err := w.write(ctx); err != nil {
		t.Fatal(err)
	}
	if len(releasedDuringWrite) != 1 || releasedDuringWrite[0] {
		t.Fatalf("released while the head was written: %v", releasedDuringWrite)
	}
	if !w.Written().Contains("ns/app") {
		t.Fatal("the first write did not publish ns/app: the test proves nothing")
	}
	if w.Released("ns/app", "uid-1") {
		t.Fatal("released after a write that published it")
	}
	if err := w.write(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Written().Contains("ns/app") || !w.Released("ns/app", "uid-1") {
		t.Errorf("after a second write: contains %v, released %v; want false, true",
			w.Written().Contains("ns/app"), w.Released("ns/app", "uid-1"))
	}
}

// An interceptor can serve a table the moment its head ConfigMap is written, before the write call
// returns to the writer. A probe in that window must find the version known: were it unknown, every
// object would be counted as served by no replica, and an object the write did not change would not
// be re-evaluated once the writer recorded the version (the fleet's answer no longer changes), so its
// RoutingPropagated stayed False.
func TestVersionKnownBeforeTheHeadIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		scheme := fakeScheme(t)
		var w *TableWriter
		var heads, unknown []string
		checkHead := func(obj client.Object) {
			cm, ok := obj.(*corev1.ConfigMap)
			if !ok || cm.Name != routing.DefaultBaseName {
				return
			}
			m, err := routing.ReadManifest(cm)
			if err != nil {
				t.Errorf("reading the head just written: %v", err)
				return
			}
			heads = append(heads, m.Version)
			// What a probe answered with this version finds: every object of the table counted.
			if _, ok := w.Written().Seq(m.Version); !ok {
				unknown = append(unknown, m.Version)
			}
		}
		c := clientSeeingWrites(scheme, checkHead)
		w = &TableWriter{
			Client: c, Reader: c, Namespace: "httpscale-system", Base: routing.DefaultBaseName,
			Debounce: 250 * time.Millisecond, MaxDelay: 2 * time.Second, StartupGrace: time.Minute,
			MaxShardBytes: routing.DefaultMaxShardBytes, Log: logr.Discard(),
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- w.Start(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		w.Set("ns/sampleapp", ptrTo(cand("ns/sampleapp", "sampleapp.example.com", time.Hour)))
		w.Set("ns/wake", ptrTo(cand("ns/wake", "wake.example.com", time.Hour)))
		time.Sleep(time.Second)
		synctest.Wait()
		w.Set("ns/third", ptrTo(cand("ns/third", "third.example.com", time.Hour)))
		time.Sleep(time.Second)
		synctest.Wait()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start returned %v", err)
		}
		if len(heads) < 3 {
			t.Fatalf("wrote %d heads, want at least 3 (empty table, then two changes)", len(heads))
		}
		if len(unknown) > 0 {
			t.Errorf("versions %v were served before the writer knew them (of %v)", unknown, heads)
		}
		// A replica on the last table serves everything introduced before it.
		last := w.Written()
		fleet := &Fleet{Replicas: []Replica{{Address: "a", Version: last.Version}, {Address: "b", Version: last.Version}}}
		for _, k := range []string{"ns/sampleapp", "ns/wake", "ns/third"} {
			_, seq, ok := last.Introduced(k, 1)
			if !ok {
				t.Fatalf("%s not in the written table", k)
			}
			if ready, total := fleet.Propagation(last, seq); ready != 2 || total != 2 {
				t.Errorf("%s served by %d of %d replicas on the last table, want 2 of 2", k, ready, total)
			}
		}
	})
}

// A write whose head was applied but whose clean-up of stale shards failed must still be recorded as
// the stored table. Otherwise a return to the previously recorded content (an object added, then
// deleted within the writer's one-second retry) looks unchanged, is not written, and the deleted
// object is released while the stored head still routes it.
func TestFailedCleanupStillRecordsTheStoredHead(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	deletes := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithInterceptorFuncs(interceptor.Funcs{
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if deletes++; deletes == 1 {
				return fmt.Errorf("injected: the API server timed out")
			}
			return c.Delete(ctx, obj, opts...)
		},
	}).Build()
	w := &TableWriter{Client: c, Reader: c, Namespace: "httpscale-system", Base: routing.DefaultBaseName,
		MaxShardBytes: routing.DefaultMaxShardBytes, Log: logr.Discard()}
	ctx := context.Background()
	w.Set("ns/kept", ptrTo(cand("ns/kept", "kept.example.com", time.Hour)))
	if err := w.write(ctx); err != nil {
		t.Fatal(err)
	}
	app := cand("ns/app", "app.example.com", time.Hour)
	app.uid = "uid-1"
	w.Set("ns/app", &app)
	if err := w.write(ctx); err == nil || deletes != 1 {
		t.Fatalf("second write: err %v after %d deletes; want the injected failure of the stale shard's delete", err, deletes)
	}
	if stored, err := readStored(ctx, c); err != nil {
		t.Fatal(err)
	} else if _, ok := stored.Lookup("ns/app"); !ok {
		t.Fatal("the head was not written with ns/app: the test proves nothing")
	}
	w.SetDeleting("ns/app", "uid-1") // back to the first table's content
	if err := w.write(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := readStored(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, routed := stored.Lookup("ns/app"); routed || !w.Released("ns/app", "uid-1") {
		t.Errorf("after the removal's write: stored table routes ns/app %v, released %v; want false, true", routed, w.Released("ns/app", "uid-1"))
	}
	if _, ok := stored.Lookup("ns/kept"); !ok {
		t.Error("ns/kept missing from the stored table")
	}
	if w.Written().Version != stored.Version() {
		t.Errorf("recorded version %s, stored %s", w.Written().Version, stored.Version())
	}
}

// Decisions made before the writer read the stored table at start-up (the routing controller starts
// with it) are newer than that table: a removal decided then is not undone by the seed, and the
// object is released once a table without it is written.
func TestSeedKeepsDecisionsMadeBeforeIt(t *testing.T) {
	scheme := fakeScheme(t)
	ctx := context.Background()
	objs := []client.Object{}
	for _, name := range []string{"gone", "kept"} {
		objs = append(objs, &v1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}})
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
	// The table a previous leader wrote: both objects routed.
	prev := &TableWriter{Client: c, Reader: c, Namespace: "httpscale-system", Base: routing.DefaultBaseName,
		MaxShardBytes: routing.DefaultMaxShardBytes, Log: logr.Discard()}
	for _, name := range []string{"gone", "kept"} {
		cd := cand("ns/"+name, name+".example.com", time.Hour)
		cd.uid = types.UID("uid-" + name)
		prev.Set("ns/"+name, &cd)
	}
	if err := prev.write(ctx); err != nil {
		t.Fatal(err)
	}

	w := &TableWriter{Client: c, Reader: c, Namespace: "httpscale-system", Base: routing.DefaultBaseName,
		MaxShardBytes: routing.DefaultMaxShardBytes, Log: logr.Discard()}
	w.SetDeleting("ns/gone", "uid-gone") // decided before the seed
	if err := w.seed(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.write(ctx); err != nil {
		t.Fatal(err)
	}
	stored, err := readStored(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, routed := stored.Lookup("ns/gone"); routed {
		t.Error("the seed put back ns/gone, whose removal was decided before it")
	}
	if !w.Released("ns/gone", "uid-gone") {
		t.Error("ns/gone not released after a table without it was written")
	}
	if _, ok := stored.Lookup("ns/kept"); !ok {
		t.Error("ns/kept, not decided yet, was not carried over from the stored table")
	}
}

// An object reconciled before the seed (the controllers start with the writer; the seed waits for the
// cache) is told "the routing table holding this generation is not written yet". If the stored table
// routes it and the next write leaves it as it is, that write does not name it: the seed must hand it
// back to the controller, or its status stays Pending (seen when the operator leader was killed in a
// burst: 1 of 1,000 objects stayed Pending).
func TestSeedHandsBackTheObjectsItRoutes(t *testing.T) {
	ctx := context.Background()
	w, cd, notified := newLeaderAfterEarly(t)
	gen := cd.entry.Generation
	if _, _, routed := w.Written().Introduced("ns/early", gen); routed {
		t.Fatal("the view before the seed routes ns/early; the test's premise is gone")
	}
	if err := w.seed(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, routed := w.Written().Introduced("ns/early", gen); !routed {
		t.Fatal("the view after the seed does not route ns/early")
	}
	if !slices.Contains(*notified, "ns/early") {
		t.Errorf("the seed notified %v, want ns/early: its status was computed before the view knew it", *notified)
	}
}

// The same, for an object whose routing decision was also handed over before the seed (Set, from the
// routing controller, while the status controller computed "not written yet" from the empty view):
// the seed leaves such a decision standing, and the next write, finding the object as the stored
// table already routes it, does not name it either. Seen in the e2e fault 'operator leader killed in
// a burst' when the new leader lost its lease under load and the old one took over again: 8 of 1,000
// objects stayed Pending for the 9 minutes until the next leader change.
func TestSeedHandsBackTheObjectsDecidedBeforeIt(t *testing.T) {
	ctx := context.Background()
	w, cd, notified := newLeaderAfterEarly(t)
	gen := cd.entry.Generation
	again := cd // the new leader's routing controller decides the same from the same object
	w.Set("ns/early", &again)
	if _, _, routed := w.Written().Introduced("ns/early", gen); routed {
		t.Fatal("the view before the seed routes ns/early; the test's premise is gone")
	}
	if err := w.seed(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.write(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, routed := w.Written().Introduced("ns/early", gen); !routed {
		t.Fatal("the view after the seed and a write does not route ns/early")
	}
	if !slices.Contains(*notified, "ns/early") {
		t.Errorf("the seed and the write after it notified %v, want ns/early: its status was computed before the view knew it", *notified)
	}
}

// newLeaderAfterEarly stores a routing table that routes ns/early (as a former leader wrote it) and
// returns a new leader's writer whose view is still empty, the candidate that table routes, and the
// keys the writer notifies.
func newLeaderAfterEarly(t *testing.T) (*TableWriter, candidate, *[]string) {
	t.Helper()
	obj := &v1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "early", UID: "uid-early", Generation: 1}}
	c := fake.NewClientBuilder().WithScheme(fakeScheme(t)).WithObjects(obj).Build()
	prev := &TableWriter{Client: c, Reader: c, Namespace: "httpscale-system", Base: routing.DefaultBaseName,
		MaxShardBytes: routing.DefaultMaxShardBytes, Log: logr.Discard()}
	cd := cand("ns/early", "early.example.com", time.Hour)
	cd.uid = "uid-early"
	prev.Set("ns/early", &cd)
	if err := prev.write(context.Background()); err != nil {
		t.Fatal(err)
	}
	notified := new([]string)
	w := &TableWriter{Client: c, Reader: c, Namespace: "httpscale-system", Base: routing.DefaultBaseName,
		MaxShardBytes: routing.DefaultMaxShardBytes, Log: logr.Discard(), Notify: func(keys []string) { *notified = append(*notified, keys...) }}
	return w, cd, notified
}

// fakeScheme is the scheme of the fake clients of the writer's tests: client-go's types and ours.
func fakeScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return scheme
}
