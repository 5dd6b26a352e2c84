package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
	"github.com/httpscale/httpscale/pkg/routing"
)

// candidate is one valid object's bid for the routing table.
type candidate struct {
	entry   routing.Entry
	created time.Time
}

// introduction records the first written table that held a key at a generation.
type introduction struct {
	generation int64
	seq        uint64 // order of the table among the tables this process wrote or read
	version    string
}

// Written is an immutable view of the last table written to the ConfigMaps.
type Written struct {
	// Version of the table; empty before the first write.
	Version string
	// Conflicts by loser key.
	Conflicts map[string]routing.Conflict
	// versions maps every table version this process knows to its order.
	versions map[string]uint64
	// introduced maps each key in the table to the table that first held its current generation.
	introduced map[string]introduction
}

// Introduced returns the version of the first table that held key at generation, if the current
// table holds it at that generation.
func (w *Written) Introduced(key string, generation int64) (version string, seq uint64, ok bool) {
	in, ok := w.introduced[key]
	if !ok || in.generation != generation {
		return "", 0, false
	}
	return in.version, in.seq, true
}

// Contains reports whether the written table holds key at any generation.
func (w *Written) Contains(key string) bool {
	_, ok := w.introduced[key]
	return ok
}

// Seq returns the order of a table version, or false for a version this process never wrote or read.
func (w *Written) Seq(version string) (uint64, bool) {
	s, ok := w.versions[version]
	return s, ok
}

// TableWriter owns the routing table. Reconciles hand it one decision per object (Set); it writes the
// table ConfigMaps at most once per debounce interval, so a burst of changes costs a handful of writes.
// It runs only on the elected leader.
type TableWriter struct {
	Client    client.Client // writes ConfigMaps
	Reader    client.Reader // uncached reads of ConfigMaps and the object list at start-up
	Namespace string
	// WatchNamespaces limits the objects the writer waits for at start-up; empty means all.
	WatchNamespaces []string
	Base            string
	// Debounce is the quiet time that ends a burst of changes; MaxDelay bounds how long a burst may
	// postpone the write after its first change (values below Debounce mean Debounce).
	Debounce time.Duration
	MaxDelay time.Duration
	// StartupGrace bounds how long the first write waits for every existing object to be reconciled.
	StartupGrace  time.Duration
	MaxShardBytes int
	Log           logr.Logger
	// Notify is called after each write with the keys whose routing or conflict state may have changed.
	Notify func(keys []string)
	// AfterWrite is called after each write that changed the table version (the prober re-asks then).
	AfterWrite func()

	mu      sync.Mutex
	desired map[string]candidate
	pending map[string]struct{} // existing objects not yet decided after start-up
	dirty   chan struct{}

	written atomic.Pointer[Written]
	// Writes counts ConfigMap creates, updates and deletes; Tables counts table versions written.
	Writes atomic.Int64
	Tables atomic.Int64
	seq    uint64
}

func (w *TableWriter) init() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.desired == nil {
		w.desired = map[string]candidate{}
		w.dirty = make(chan struct{}, 1)
		w.written.Store(&Written{Conflicts: map[string]routing.Conflict{}, versions: map[string]uint64{}, introduced: map[string]introduction{}})
	}
}

// Set records the decision for key: a candidate entry, or nil to leave the key out of the table.
// It never blocks on I/O. Safe for concurrent use.
func (w *TableWriter) Set(key string, c *candidate) {
	w.init()
	w.mu.Lock()
	old, had := w.desired[key]
	delete(w.pending, key)
	changed := false
	switch {
	case c == nil:
		changed = had
		delete(w.desired, key)
	case !had || !sameCandidate(old, *c):
		changed = true
		w.desired[key] = *c
	}
	w.mu.Unlock()
	if changed {
		w.markDirty()
	}
}

func sameCandidate(a, b candidate) bool {
	return a.created.Equal(b.created) && reflect.DeepEqual(a.entry, b.entry)
}

func (w *TableWriter) markDirty() {
	select {
	case w.dirty <- struct{}{}:
	default:
	}
}

// Written returns the last written table's view. Safe for concurrent use.
func (w *TableWriter) Written() *Written {
	w.init()
	return w.written.Load()
}

// Start seeds the desired set from the table already in the cluster (so a restarted operator never
// writes a table missing apps it has not reconciled yet), then writes on every change until ctx ends.
//
// A change that finds the writer idle (no write within the last Debounce) is written at once, so a
// single new or changed object is routed without waiting for a quiet period. Changes that follow a
// write closely are coalesced: the writer waits until no further change arrived for Debounce, but
// never longer than MaxDelay after the first one, and then writes the whole table once. A burst of
// thousands of changes therefore costs about (burst duration / MaxDelay) + 2 writes.
func (w *TableWriter) Start(ctx context.Context) error {
	w.init()
	if err := w.seed(ctx); err != nil {
		return err
	}
	startedAt := time.Now()
	var lastWrite time.Time // zero: idle since the start
	retry := time.Duration(0)
	for {
		var wait <-chan time.Time
		var retryTimer *time.Timer
		if retry > 0 {
			retryTimer = time.NewTimer(retry)
			wait = retryTimer.C
		}
		select {
		case <-ctx.Done():
		case <-w.dirty:
		case <-wait:
		}
		if retryTimer != nil {
			retryTimer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
		// Leading edge when idle; trailing debounce while changes keep coming.
		if time.Since(lastWrite) < w.Debounce && !w.settle(ctx) {
			return nil
		}
		w.mu.Lock()
		waiting := len(w.pending)
		w.mu.Unlock()
		if waiting > 0 && time.Since(startedAt) < w.StartupGrace {
			retry = w.Debounce
			continue
		}
		if err := w.write(ctx); err != nil {
			w.Log.Error(err, "writing routing table; retrying")
			retry = time.Second
			continue
		}
		lastWrite = time.Now()
		retry = 0
	}
}

// settle waits until no change arrived for Debounce or MaxDelay passed, whichever is first. It
// returns false when ctx ended.
func (w *TableWriter) settle(ctx context.Context) bool {
	maxDelay := w.MaxDelay
	if maxDelay < w.Debounce {
		maxDelay = w.Debounce
	}
	deadline := time.NewTimer(maxDelay)
	defer deadline.Stop()
	quiet := time.NewTimer(w.Debounce)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return true
		case <-quiet.C:
			return true
		case <-w.dirty:
			quiet.Reset(w.Debounce)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// seed loads the current table and the list of existing objects.
func (w *TableWriter) seed(ctx context.Context) error {
	existing := map[string]*v1.HTTPScaledObject{}
	namespaces := w.WatchNamespaces
	if len(namespaces) == 0 {
		namespaces = []string{""} // all
	}
	for _, ns := range namespaces {
		var list v1.HTTPScaledObjectList
		if err := w.Reader.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return fmt.Errorf("listing HTTPScaledObjects: %w", err)
		}
		for i := range list.Items {
			o := &list.Items[i]
			existing[appkey.New(o.Namespace, o.Name).String()] = o
		}
	}
	table, err := w.readCurrent(ctx)
	if err != nil {
		w.Log.Info("no usable routing table in the cluster; starting empty", "reason", err.Error())
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = map[string]struct{}{}
	for key := range existing {
		if _, decided := w.desired[key]; !decided {
			w.pending[key] = struct{}{}
		}
	}
	if table == nil {
		// Write a table even when there is nothing to route yet: interceptors report ready only once
		// they serve one, so a fresh install must not wait for its first HTTPScaledObject.
		w.markDirty()
		return nil
	}
	prev := w.written.Load()
	next := &Written{Version: table.Version(), Conflicts: prev.Conflicts, versions: map[string]uint64{table.Version(): 0}, introduced: map[string]introduction{}}
	for _, e := range table.Entries() {
		o, ok := existing[e.Key()]
		if !ok {
			continue
		}
		next.introduced[e.Key()] = introduction{generation: e.Generation, seq: 0, version: table.Version()}
		if _, decided := w.desired[e.Key()]; !decided {
			w.desired[e.Key()] = candidate{entry: e.Clone(), created: o.CreationTimestamp.Time}
		}
	}
	w.written.Store(next)
	w.markDirty()
	return nil
}

func (w *TableWriter) readCurrent(ctx context.Context) (*routing.Table, error) {
	head := &corev1.ConfigMap{}
	if err := w.Reader.Get(ctx, types.NamespacedName{Namespace: w.Namespace, Name: w.Base}, head); err != nil {
		return nil, fmt.Errorf("reading %s/%s: %w", w.Namespace, w.Base, err)
	}
	shards, err := w.listShards(ctx)
	if err != nil {
		return nil, err
	}
	return routing.FromConfigMaps(head, shards)
}

func (w *TableWriter) listShards(ctx context.Context) ([]*corev1.ConfigMap, error) {
	var list corev1.ConfigMapList
	if err := w.Reader.List(ctx, &list, client.InNamespace(w.Namespace), client.MatchingLabels{routing.LabelTable: w.Base}); err != nil {
		return nil, fmt.Errorf("listing routing-table ConfigMaps: %w", err)
	}
	var out []*corev1.ConfigMap
	for i := range list.Items {
		if list.Items[i].Name != w.Base {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// write builds the table from the desired set and writes it if its version changed.
func (w *TableWriter) write(ctx context.Context) error {
	w.mu.Lock()
	cands := make([]candidate, 0, len(w.desired))
	for _, c := range w.desired {
		cands = append(cands, c)
	}
	w.mu.Unlock()

	table, conflicts, invalid, err := buildTable(cands)
	if err != nil {
		return err
	}
	for key, err := range invalid {
		w.Log.Error(err, "leaving an invalid entry out of the routing table", "key", key)
	}
	prev := w.written.Load()
	if table.Version() != prev.Version {
		if err := w.writeConfigMaps(ctx, table); err != nil {
			return err
		}
		w.Tables.Add(1)
	}
	next := w.record(prev, table, conflicts)
	w.written.Store(next)
	changed := changedKeys(prev, next)
	if table.Version() != prev.Version {
		w.Log.Info("wrote routing table", "version", table.Version(), "apps", table.Len(), "conflicts", len(conflicts), "changedObjects", len(changed))
		if w.AfterWrite != nil {
			w.AfterWrite()
		}
	}
	if w.Notify != nil && len(changed) > 0 {
		w.Notify(changed)
	}
	return nil
}

// maxKnownVersions bounds how many table versions the writer remembers for the propagation proof. A
// replica serving a version older than that is reported as not (yet) serving the current one.
const maxKnownVersions = 1024

// buildTable decides the routing table from the valid objects' candidates: the oldest object (then
// namespace/name) wins a contested route, losers are left out and reported by key, and so is any
// entry the table would reject (the reconciler validates entries before handing them over; this
// guard keeps one bad entry from blocking every other app should the two ever disagree). The result
// does not depend on the order of cands. Pure; safe for concurrent use.
func buildTable(cands []candidate) (*routing.Table, map[string]routing.Conflict, map[string]error, error) {
	cands = slices.Clone(cands)
	slices.SortFunc(cands, func(a, b candidate) int {
		if c := a.created.Compare(b.created); c != 0 {
			return c
		}
		return cmp.Compare(a.entry.Key(), b.entry.Key())
	})
	entries := make([]routing.Entry, len(cands))
	for i, c := range cands {
		entries[i] = c.entry
	}
	// Conflicts skips invalid entries, so they claim no route.
	conflicts := map[string]routing.Conflict{}
	for _, c := range routing.Conflicts(entries) {
		conflicts[c.Loser] = c
	}
	winners := make([]routing.Entry, 0, len(entries)-len(conflicts))
	for _, e := range entries {
		if _, lost := conflicts[e.Key()]; !lost {
			winners = append(winners, e)
		}
	}
	invalid := map[string]error{}
	table, err := routing.NewTable(winners)
	if errors.Is(err, routing.ErrInvalidEntry) {
		// Rare: find the culprits and build without them rather than validating every entry up front.
		valid := winners[:0]
		for _, e := range winners {
			if err := e.Validate(); err != nil {
				invalid[e.Key()] = err
				continue
			}
			valid = append(valid, e)
		}
		table, err = routing.NewTable(valid)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("building routing table: %w", err)
	}
	return table, conflicts, invalid, nil
}

// record returns the view after writing table. Every write of a new version gets the next sequence
// number, even when the same content was written before (a table A, then B, then A again): a replica
// still serving B must not count as serving what the second A introduced.
func (w *TableWriter) record(prev *Written, table *routing.Table, conflicts map[string]routing.Conflict) *Written {
	next := &Written{Version: table.Version(), Conflicts: conflicts, versions: prev.versions, introduced: map[string]introduction{}}
	seq := uint64(0)
	if table.Version() != prev.Version {
		w.seq++
		seq = w.seq
	} else {
		seq = prev.versions[table.Version()]
	}
	oldest := seq
	for _, e := range table.Entries() {
		in, ok := prev.introduced[e.Key()]
		if !ok || in.generation != e.Generation {
			in = introduction{generation: e.Generation, seq: seq, version: table.Version()}
		}
		next.introduced[e.Key()] = in
		oldest = min(oldest, in.seq)
	}
	if table.Version() != prev.Version {
		next.versions = pruneVersions(prev.versions, oldest, maxKnownVersions-1)
		next.versions[table.Version()] = seq
	}
	return next
}

// pruneVersions copies the versions whose sequence is at least oldest (no current entry was introduced
// before them, so older ones prove nothing), keeping at most limit of the newest.
func pruneVersions(versions map[string]uint64, oldest uint64, limit int) map[string]uint64 {
	type vs struct {
		v string
		s uint64
	}
	keep := make([]vs, 0, len(versions))
	for v, s := range versions {
		if s >= oldest {
			keep = append(keep, vs{v, s})
		}
	}
	if len(keep) > limit {
		slices.SortFunc(keep, func(a, b vs) int { return cmp.Compare(b.s, a.s) })
		keep = keep[:limit]
	}
	out := make(map[string]uint64, len(keep)+1)
	for _, k := range keep {
		out[k.v] = k.s
	}
	return out
}

func changedKeys(prev, next *Written) []string {
	var keys []string
	for k, in := range next.introduced {
		if old, ok := prev.introduced[k]; !ok || old != in {
			keys = append(keys, k)
		}
	}
	for k := range prev.introduced {
		if _, ok := next.introduced[k]; !ok {
			keys = append(keys, k)
		}
	}
	for k, c := range next.Conflicts {
		if old, ok := prev.Conflicts[k]; !ok || old.Winner != c.Winner {
			keys = append(keys, k)
		}
	}
	for k := range prev.Conflicts {
		if _, ok := next.Conflicts[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// writeConfigMaps writes the table in the order routing.ToConfigMaps documents: new shards, then the
// head, then stale shards deleted.
func (w *TableWriter) writeConfigMaps(ctx context.Context, table *routing.Table) error {
	manifest, shards, err := routing.Encode(table, w.MaxShardBytes)
	if err != nil {
		return fmt.Errorf("encoding routing table: %w", err)
	}
	head, shardCMs := routing.ToConfigMaps(w.Namespace, w.Base, manifest, shards)
	existing, err := w.listShards(ctx)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, cm := range existing {
		have[cm.Name] = true
	}
	keep := map[string]bool{}
	for _, cm := range shardCMs {
		keep[cm.Name] = true
		if have[cm.Name] {
			continue // content-addressed: an existing shard already holds these bytes
		}
		if err := w.Client.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating routing-table shard %s: %w", cm.Name, err)
		}
		w.Writes.Add(1)
	}
	current := &corev1.ConfigMap{}
	err = w.Reader.Get(ctx, client.ObjectKeyFromObject(head), current)
	switch {
	case apierrors.IsNotFound(err):
		if err := w.Client.Create(ctx, head); err != nil {
			return fmt.Errorf("creating routing-table head %s: %w", head.Name, err)
		}
	case err != nil:
		return fmt.Errorf("reading routing-table head %s: %w", head.Name, err)
	default:
		current.Labels, current.Annotations, current.Data, current.BinaryData = head.Labels, head.Annotations, head.Data, head.BinaryData
		if err := w.Client.Update(ctx, current); err != nil {
			return fmt.Errorf("updating routing-table head %s: %w", head.Name, err)
		}
	}
	w.Writes.Add(1)
	for _, cm := range existing {
		if keep[cm.Name] {
			continue
		}
		if err := w.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting stale routing-table shard %s: %w", cm.Name, err)
		}
		w.Writes.Add(1)
	}
	return nil
}
