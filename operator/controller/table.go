package controller

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
	"github.com/httpscale/httpscale/pkg/routing"
)

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
	// Clock paces the writes (tableloop.go); nil means the real clock.
	Clock clock.Clock
	// ServePortMin and ServePortMax bound the Serve ports given to apps (serveports.go); zero means
	// DefaultServePortMin-DefaultServePortMax.
	ServePortMin, ServePortMax int32

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

	// Owned by the Start goroutine: the ConfigMap storage and the propagation ledger.
	store  tableStore
	ledger tableLedger

	written atomic.Pointer[Written]
	// Writes counts ConfigMap creates, updates and deletes; Tables counts table versions written.
	Writes atomic.Int64
	Tables atomic.Int64
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
		if w.state != nil {
			w.state.ports = newPortAllocator(w.ServePortMin, w.ServePortMax)
		}
		w.store = tableStore{client: w.Client, reader: w.Reader, namespace: w.Namespace, base: w.Base, writes: &w.Writes}
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
		c = &candidate{entry: c.entry, created: c.created, uid: c.uid, serve: c.serve}
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
	table, buckets, err := w.store.read(ctx)
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
	// The objects the stored table routes: their status may already say "not written yet", computed
	// from the empty view before the seed (the controllers start with the writer, and the seed waits
	// for the cache). The writer's next write does not name them when it leaves them as the stored
	// table has them, so they are brought back to the controller here, once the view knows them —
	// those decided before the seed too (their decision stands; a write that changes them names
	// them again).
	var routed []string
	defer func() {
		if w.Notify != nil && len(routed) > 0 {
			w.Notify(routed)
		}
	}()
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
	prev := w.written.Load()
	next := &Written{Version: table.Version(), Conflicts: prev.Conflicts, versions: map[string]uint64{table.Version(): 0}, introduced: map[string]introduction{}}
	for key, c := range seeded {
		next.introduced[key] = introduction{generation: c.entry.Generation, seq: 0, version: table.Version()}
		if _, decided := early[key]; decided {
			// Decided meanwhile (a removal, say): the decision stands, and the next write records
			// what it did to the key, even when it left the key out of a state that never held it.
			w.touched[key] = struct{}{}
			routed = append(routed, key)
			continue
		}
		w.state.set(key, c)
		routed = append(routed, key)
	}
	w.written.Store(next)
	w.markDirty()
	return nil
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
	if manifest.Version != prev.Version || !w.store.current(manifest.Version) {
		if manifest.Version != prev.Version {
			// An interceptor may serve the new version as soon as the head is written, before the
			// write returns here; a probe must then find it known (see announce).
			prev = w.ledger.announce(prev, manifest.Version)
			w.written.Store(prev)
		}
		headWritten, err := w.store.write(ctx, manifest, shards)
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
	next := w.ledger.record(prev, manifest.Version, touched, conflicts)
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

func (w *TableWriter) clock() clock.Clock {
	if w.Clock == nil {
		return clock.RealClock{}
	}
	return w.Clock
}
