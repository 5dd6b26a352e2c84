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
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

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

func keys(t *routing.Table) []string {
	var out []string
	for _, e := range t.Entries() {
		out = append(out, e.Key())
	}
	return out
}

func TestBuildTableOldestWinsWhateverTheOrder(t *testing.T) {
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
		table, conflicts, invalid, err := buildTable(cands)
		if err != nil {
			t.Fatal(err)
		}
		if len(invalid) != 0 {
			t.Fatalf("invalid = %v", invalid)
		}
		if d := cmp.Diff([]string{"m/same-age-a", "x/alone", "z/zz-old"}, keys(table)); d != "" {
			t.Fatalf("table keys (-want +got):\n%s", d)
		}
		winners := map[string]string{}
		for loser, c := range conflicts {
			winners[loser] = c.Winner
		}
		if d := cmp.Diff(map[string]string{"a/aa-young": "z/zz-old", "m/same-age-b": "m/same-age-a"}, winners); d != "" {
			t.Fatalf("conflicts (-want +got):\n%s", d)
		}
		if i > 0 && table.Version() != version {
			t.Fatalf("version %s differs from %s for the same input in another order", table.Version(), version)
		}
		version = table.Version()
	}
}

func TestBuildTableLeavesInvalidEntriesOut(t *testing.T) {
	bad := cand("a/bad", "bad.example.com", time.Hour)
	bad.entry.Hosts = nil
	table, _, invalid, err := buildTable([]candidate{bad, cand("a/good", "good.example.com", time.Hour)})
	if err != nil {
		t.Fatalf("one invalid entry must not fail the table: %v", err)
	}
	if d := cmp.Diff([]string{"a/good"}, keys(table)); d != "" {
		t.Errorf("keys (-want +got):\n%s", d)
	}
	if _, ok := invalid["a/bad"]; !ok {
		t.Errorf("invalid = %v, want a/bad reported", invalid)
	}
}

// A table written again after another (A, B, A) is a new write: a replica still serving B must not
// count as serving an entry that only the second A brought back.
func TestRecordSequencesRewrittenVersions(t *testing.T) {
	w := &TableWriter{}
	w.init()
	x := cand("ns/x", "x.example.com", time.Hour)
	y := cand("ns/y", "y.example.com", time.Hour)
	build := func(cs ...candidate) *routing.Table {
		tbl, _, _, err := buildTable(cs)
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	a, b := build(x, y), build(x)
	none := map[string]routing.Conflict{}
	wa := w.record(w.Written(), a, none)
	wb := w.record(wa, b, none)
	wa2 := w.record(wb, a, none)

	_, ySeq, ok := wa2.Introduced("ns/y", 1)
	if !ok {
		t.Fatal("y not introduced by the second A")
	}
	fleet := &Fleet{Replicas: []Replica{{Address: "1", Version: b.Version()}, {Address: "2", Version: a.Version()}}}
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
	if d := cmp.Diff([]string{"ns/loser", "ns/new-loser", "ns/removed", "ns/updated"}, changedKeys(prev, next)); d != "" {
		t.Errorf("changed (-want +got):\n%s", d)
	}
}

// The writer's pacing, in simulated time: one change to an idle writer is written at once; a steady
// stream of changes is written at its first change and then once per MaxDelay, not once per change.
func TestTableWriterCoalesces(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		if err := v1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
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
