package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
	"github.com/httpscale/httpscale/pkg/routing"
)

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
	// snap numbers the writer's state this view was written from (TableWriter.write); zero before
	// the first write of this process.
	snap uint64
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

// Lost reports whether the written table reports key as the loser of a route conflict.
func (w *Written) Lost(key string) bool {
	_, ok := w.Conflicts[key]
	return ok
}

// Seq returns the order of a table version, or false for a version this process never wrote or read.
func (w *Written) Seq(version string) (uint64, bool) {
	s, ok := w.versions[version]
	return s, ok
}

// TableWriter owns the routing table. The routing controller hands it one decision per object (Set);
// it writes the table ConfigMaps at once when idle and at most once per debounce interval under a
// burst, so a burst of changes costs a handful of writes. Each write re-decides only the objects a
// change can affect and re-encodes and rewrites only the shards they land in (tableState,
// routing.Encoder): one new object costs one shard ConfigMap create, the head update and one stale
// shard delete, whatever the size of the table. It runs only on the elected leader.
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
	// MaxShardEntries bounds the entries of one shard; zero means routing.DefaultMaxShardEntries.
	MaxShardEntries int
	// MaxEntryBytes bounds one entry's stored form; a larger entry is left out of the table (the
	// reconciler reports it invalid), so it can never fail a shard's encoding and with it every
	// write. Zero means routing.DefaultMaxEntryBytes.
	MaxEntryBytes int
	Log           logr.Logger
	// Notify is called after each write with the keys whose routing or conflict state may have changed.
	Notify func(keys []string)
	// AfterWrite is called after each write that changed the table version (the prober re-asks then).
	AfterWrite func()

	mu      sync.Mutex
	state   *tableState
	pending map[string]struct{} // existing objects not yet decided after start-up
	// deleting holds, per key, the object being deleted whose removal the routing controller
	// decided; decisions for that object made from an older read are stale and ignored.
	deleting map[string]deletion
	// snap numbers the states write took (under mu): a write whose snap is above a deletion's
	// after was encoded without that object.
	snap    uint64
	touched map[string]struct{} // keys decided since the last successful write
	// early holds the keys decided before seed read the stored table (nil once it has): such a
	// decision is newer than anything the stored table says of the key, removals included.
	early   map[string]struct{}
	seeded  bool
	dirty   chan struct{}
	initErr error

	// Owned by the Start goroutine: the shard ConfigMaps known to exist (nil: list them), the
	// head's last resourceVersion written, and the version the stored head is known to hold (""
	// when unknown: not read yet, or a head write failed and may or may not have been applied).
	shardCMs map[string]bool
	headRV   string
	stored   string

	written atomic.Pointer[Written]
	// Writes counts ConfigMap creates, updates and deletes; Tables counts table versions written.
	Writes atomic.Int64
	Tables atomic.Int64
	seq    uint64
}

func (w *TableWriter) init() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == nil && w.initErr == nil {
		maxBytes, maxEntries := w.MaxShardBytes, w.MaxShardEntries
		if maxBytes <= 0 {
			maxBytes = routing.DefaultMaxShardBytes
		}
		if maxEntries <= 0 {
			maxEntries = routing.DefaultMaxShardEntries
		}
		w.state, w.initErr = newTableState(maxBytes, maxEntries)
		w.touched = map[string]struct{}{}
		w.dirty = make(chan struct{}, 1)
		w.written.Store(&Written{Conflicts: map[string]routing.Conflict{}, versions: map[string]uint64{}, introduced: map[string]introduction{}})
	}
}

// Set records the decision for key: a candidate entry, or nil to leave the key out of the table. An
// entry the table would reject is logged and left out. It never blocks on I/O; the entry is encoded
// by the caller's goroutine. Safe for concurrent use.
func (w *TableWriter) Set(key string, c *candidate) {
	w.init()
	if c != nil {
		c = &candidate{entry: c.entry, created: c.created, uid: c.uid}
		if err := c.prepare(w.maxEntryBytes()); err != nil {
			// The reconciler validates entries before handing them over; this guard keeps one bad
			// entry from blocking every other app should the two ever disagree.
			w.Log.Error(err, "leaving an invalid entry out of the routing table", "key", key)
			c = nil
		}
	}
	w.mu.Lock()
	if !w.seeded {
		if w.early == nil {
			w.early = map[string]struct{}{}
		}
		w.early[key] = struct{}{}
	}
	if d, ok := w.deleting[key]; ok && c != nil {
		if c.uid == d.uid {
			w.mu.Unlock()
			return // decided from a read older than the deletion
		}
		delete(w.deleting, key) // a new object of the same name
	}
	delete(w.pending, key)
	changed := w.state != nil && w.state.set(key, c)
	w.mu.Unlock()
	if changed {
		w.markDirty()
	}
}

// SetDeleting takes the object uid out of the table for good: later Sets of a candidate of the same
// object (decided from an older read) are ignored. Safe for concurrent use.
func (w *TableWriter) SetDeleting(key string, uid types.UID) {
	w.init()
	w.mu.Lock()
	if w.deleting == nil {
		w.deleting = map[string]deletion{}
	}
	w.deleting[key] = deletion{uid: uid, after: w.snap}
	w.mu.Unlock()
	w.Set(key, nil)
	// Even when the key was not in the table (an object that never resolved), Released waits for a
	// write that took the state after this decision: ask for one (it writes nothing if nothing changed).
	w.markDirty()
}

// deletion is a decision to take an object out of the table for good.
type deletion struct {
	uid   types.UID
	after uint64 // the writer's snap when it was decided
}

// Gone records that no object has key any more (it was deleted): it leaves the table and is
// forgotten. Safe for concurrent use.
func (w *TableWriter) Gone(key string) {
	w.init()
	w.mu.Lock()
	delete(w.deleting, key)
	w.mu.Unlock()
	w.Set(key, nil)
}

// Released reports whether the object uid being deleted is out of the written table for good: its
// removal was decided (SetDeleting) and a table encoded after that decision was written without it.
// A write already under way when the removal was decided may still publish the object (it took the
// state before), so a view that merely lacks the key is not enough. Safe for concurrent use.
func (w *TableWriter) Released(key string, uid types.UID) bool {
	w.init()
	w.mu.Lock()
	d, decided := w.deleting[key]
	w.mu.Unlock()
	written := w.written.Load()
	return decided && d.uid == uid && written.snap > d.after && !written.Contains(key)
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
	if w.initErr != nil {
		return fmt.Errorf("routing-table writer: %w", w.initErr)
	}
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
	table, buckets, err := w.readCurrent(ctx)
	if err != nil {
		w.Log.Info("no usable routing table in the cluster; starting empty", "reason", err.Error())
	}
	// Prepare outside the lock: encoding thousands of entries takes a while.
	seeded := map[string]*candidate{}
	for e := range table.All() {
		o, ok := existing[e.Key()]
		if !ok {
			continue
		}
		c := &candidate{entry: e.Clone(), created: o.CreationTimestamp.Time, uid: o.UID}
		if err := c.prepare(w.maxEntryBytes()); err != nil {
			continue
		}
		seeded[e.Key()] = c
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	early := w.early
	w.early, w.seeded = nil, true
	w.pending = map[string]struct{}{}
	for key := range existing {
		if _, decided := early[key]; !decided {
			w.pending[key] = struct{}{}
		}
	}
	if table == nil {
		// Write a table even when there is nothing to route yet: interceptors report ready only once
		// they serve one, so a fresh install must not wait for its first HTTPScaledObject.
		w.markDirty()
		return nil
	}
	// Keep the table's bucket count, so that the first write rewrites only what changed.
	w.state.enc.Grow(buckets)
	w.stored = table.Version()
	prev := w.written.Load()
	next := &Written{Version: table.Version(), Conflicts: prev.Conflicts, versions: map[string]uint64{table.Version(): 0}, introduced: map[string]introduction{}}
	for key, c := range seeded {
		next.introduced[key] = introduction{generation: c.entry.Generation, seq: 0, version: table.Version()}
		if _, decided := early[key]; decided {
			// Decided meanwhile (a removal, say): the decision stands, and the next write records
			// what it did to the key, even when it left the key out of a state that never held it.
			w.touched[key] = struct{}{}
			continue
		}
		w.state.set(key, c)
	}
	w.written.Store(next)
	w.markDirty()
	return nil
}

// readCurrent reads the table in the cluster and its bucket count.
func (w *TableWriter) readCurrent(ctx context.Context) (*routing.Table, int, error) {
	head := &corev1.ConfigMap{}
	if err := w.Reader.Get(ctx, types.NamespacedName{Namespace: w.Namespace, Name: w.Base}, head); err != nil {
		return nil, 0, fmt.Errorf("reading %s/%s: %w", w.Namespace, w.Base, err)
	}
	m, err := routing.ReadManifest(head)
	if err != nil {
		return nil, 0, err
	}
	shards, err := w.listShards(ctx)
	if err != nil {
		return nil, 0, err
	}
	t, err := routing.FromConfigMaps(head, shards)
	if err != nil {
		return nil, 0, err
	}
	return t, m.Buckets, nil
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

// write settles the changes since the last write and writes the shards they touched and the head,
// if the table's version changed.
func (w *TableWriter) write(ctx context.Context) error {
	w.mu.Lock()
	w.snap++
	snap := w.snap
	for _, k := range w.state.decide() {
		w.touched[k] = struct{}{}
	}
	manifest, shards, err := w.state.enc.Encode()
	touched := make(map[string]int64, len(w.touched))
	for k := range w.touched {
		gen, ok := w.state.published[k]
		if !ok {
			gen = -1
		}
		touched[k] = gen
	}
	conflicts := maps.Clone(w.state.losers)
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encoding routing table: %w", err)
	}

	prev := w.written.Load()
	// The stored table is written whenever it may differ from this one: a new version, a head whose
	// content is unknown (a failed write may have been applied), or shards left to clean up. Comparing
	// with the recorded view alone is not enough: a write that failed after its head was applied,
	// followed by a return to the recorded content, would skip the write and record a table the
	// cluster does not hold (an object released while the stored head still routes it).
	var cleanupErr error
	if manifest.Version != prev.Version || manifest.Version != w.stored || w.shardCMs == nil {
		if manifest.Version != prev.Version {
			// An interceptor may serve the new version as soon as the head is written, before the
			// write returns here; a probe must then find it known (see announce).
			prev = w.announce(prev, manifest.Version)
			w.written.Store(prev)
		}
		headWritten, err := w.writeConfigMaps(ctx, manifest, shards)
		if !headWritten {
			return err
		}
		// The head holds this version: record it even when cleaning up the stale shards failed
		// (retried with the next write).
		cleanupErr = err
		if manifest.Version != prev.Version {
			w.Tables.Add(1)
		}
	}
	next := w.record(prev, manifest.Version, touched, conflicts)
	next.snap = snap
	w.written.Store(next)
	w.mu.Lock()
	for k := range touched {
		delete(w.touched, k)
	}
	w.mu.Unlock()
	changed := changedKeys(prev, next, touched)
	if manifest.Version != prev.Version {
		w.Log.Info("wrote routing table", "version", manifest.Version, "apps", manifest.Entries, "shards", len(manifest.Shards),
			"conflicts", len(conflicts), "changedObjects", len(changed))
		if w.AfterWrite != nil {
			w.AfterWrite()
		}
	}
	if w.Notify != nil && len(changed) > 0 {
		w.Notify(changed)
	}
	return cleanupErr
}

// maxKnownVersions bounds how many table versions the writer remembers for the propagation proof. A
// replica serving a version older than that is reported as not (yet) serving the current one.
const maxKnownVersions = 1024

// record returns the view after writing the table version, given the published generation of every
// key decided since the last write (-1: not in the table) and the conflicts. Every write of a new
// version gets the next sequence number, even when the same content was written before (a table A,
// then B, then A again): a replica still serving B must not count as serving what the second A
// introduced. Cost: one copy of the previous view's maps, whatever the number of changes.
func (w *TableWriter) record(prev *Written, version string, touched map[string]int64, conflicts map[string]routing.Conflict) *Written {
	next := &Written{Version: version, Conflicts: conflicts, versions: prev.versions, introduced: maps.Clone(prev.introduced)}
	seq := uint64(0)
	if version != prev.Version {
		if s, ok := prev.versions[version]; ok && s == w.seq {
			seq = s // announced
		} else {
			w.seq++
			seq = w.seq
		}
	} else {
		seq = prev.versions[version]
	}
	for k, gen := range touched {
		if gen < 0 {
			delete(next.introduced, k)
			continue
		}
		if in, ok := prev.introduced[k]; !ok || in.generation != gen {
			next.introduced[k] = introduction{generation: gen, seq: seq, version: version}
		}
	}
	if version != prev.Version {
		oldest := seq
		for _, in := range next.introduced {
			oldest = min(oldest, in.seq)
		}
		next.versions = pruneVersions(prev.versions, oldest, maxKnownVersions-1)
		next.versions[version] = seq
	}
	return next
}

// announce returns prev with version known at the next sequence number, and nothing else changed:
// it is stored before the table is written, so that a probe answered with the new version finds it
// known (a replica serving it counts for everything introduced before it). Were it unknown until the
// write returned, the objects evaluated in that window would count no replica, and those the write
// did not change would never be re-evaluated: the prober re-queues objects only when its answers
// change, and the writer only the objects the write changed. Objects that version introduces are not
// introduced yet, so no object is counted as served by a table that does not exist.
func (w *TableWriter) announce(prev *Written, version string) *Written {
	w.seq++
	versions := maps.Clone(prev.versions)
	versions[version] = w.seq
	return &Written{Version: prev.Version, Conflicts: prev.Conflicts, versions: versions, introduced: prev.introduced, snap: prev.snap}
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

// changedKeys returns the keys among touched whose routing or conflict state differs between prev
// and next.
func changedKeys(prev, next *Written, touched map[string]int64) []string {
	var keys []string
	for k := range touched {
		in, ok := next.introduced[k]
		old, had := prev.introduced[k]
		c, lost := next.Conflicts[k]
		oc, lostBefore := prev.Conflicts[k]
		if ok != had || in != old || lost != lostBefore || c.Winner != oc.Winner {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// writeConfigMaps writes the table in the order routing.ToConfigMaps documents: new shards, then the
// head (unless it is known to hold this version already), then stale shards deleted. Shards that
// already exist (content-addressed names) are not written again, so a change that touched one shard
// creates one ConfigMap. headWritten reports whether the head now holds the version; an error with
// headWritten true failed only the clean-up of stale shards.
func (w *TableWriter) writeConfigMaps(ctx context.Context, manifest routing.Manifest, shards []routing.Shard) (headWritten bool, err error) {
	head, shardCMs := routing.ToConfigMaps(w.Namespace, w.Base, manifest, shards)
	if w.shardCMs == nil {
		existing, err := w.listShards(ctx)
		if err != nil {
			return false, err
		}
		w.shardCMs = map[string]bool{}
		for _, cm := range existing {
			w.shardCMs[cm.Name] = true
		}
	}
	keep := map[string]bool{}
	var create []*corev1.ConfigMap
	for _, cm := range shardCMs {
		keep[cm.Name] = true
		if !w.shardCMs[cm.Name] { // content-addressed: an existing shard already holds these bytes
			create = append(create, cm)
		}
	}
	err = concurrently(len(create), func(i int) error {
		if err := w.Client.Create(ctx, create[i]); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating routing-table shard %s: %w", create[i].Name, err)
		}
		w.Writes.Add(1)
		return nil
	})
	if err != nil {
		w.shardCMs = nil // re-list before the next attempt
		return false, err
	}
	for _, cm := range create {
		w.shardCMs[cm.Name] = true
	}
	if w.stored != manifest.Version {
		if err := w.writeHead(ctx, head); err != nil {
			w.stored = "" // it may have been applied all the same
			return false, err
		}
		w.stored = manifest.Version
		w.Writes.Add(1)
	}
	var stale []string
	for name := range w.shardCMs {
		if !keep[name] {
			stale = append(stale, name)
		}
	}
	err = concurrently(len(stale), func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: stale[i], Namespace: w.Namespace}}
		if err := w.Client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting stale routing-table shard %s: %w", stale[i], err)
		}
		w.Writes.Add(1)
		return nil
	})
	if err != nil {
		w.shardCMs = nil
		return true, err
	}
	for _, name := range stale {
		delete(w.shardCMs, name)
	}
	return true, nil
}

// writeParallelism bounds the ConfigMap requests one table write has in flight. A burst rewrites most
// shards in every version; one at a time, a version of 100 shards took seconds on a busy API server.
const writeParallelism = 16

// concurrently runs f(0..n-1) with at most writeParallelism calls at once and returns the first error
// (after every call returned).
func concurrently(n int, f func(i int) error) error {
	sem := make(chan struct{}, writeParallelism)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeHead updates the head with the resourceVersion of the last write (one request), and reads it
// first only when that is unknown or stale.
func (w *TableWriter) writeHead(ctx context.Context, head *corev1.ConfigMap) error {
	if w.headRV != "" {
		head.ResourceVersion = w.headRV
		err := w.Client.Update(ctx, head)
		if err == nil {
			w.headRV = head.ResourceVersion
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			w.headRV = ""
			return fmt.Errorf("updating routing-table head %s: %w", head.Name, err)
		}
		head.ResourceVersion = ""
	}
	current := &corev1.ConfigMap{}
	err := w.Reader.Get(ctx, client.ObjectKeyFromObject(head), current)
	switch {
	case apierrors.IsNotFound(err):
		if err := w.Client.Create(ctx, head); err != nil {
			w.headRV = ""
			return fmt.Errorf("creating routing-table head %s: %w", head.Name, err)
		}
		w.headRV = head.ResourceVersion
	case err != nil:
		return fmt.Errorf("reading routing-table head %s: %w", head.Name, err)
	default:
		current.Labels, current.Annotations, current.Data, current.BinaryData = head.Labels, head.Annotations, head.Data, head.BinaryData
		if err := w.Client.Update(ctx, current); err != nil {
			w.headRV = ""
			return fmt.Errorf("updating routing-table head %s: %w", head.Name, err)
		}
		w.headRV = current.ResourceVersion
	}
	return nil
}
