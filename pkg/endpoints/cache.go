package endpoints

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/httpscale/httpscale/pkg/pmap"
	"github.com/httpscale/httpscale/pkg/routing"
)

// CacheOptions configure a Cache.
type CacheOptions struct {
	// Log receives watch changes; the zero Logger discards them.
	Log logr.Logger
	// Registerer receives the Cache's metrics; nil means controller-runtime's registry. Two Caches
	// cannot share one Registerer.
	Registerer prometheus.Registerer
	// ReadinessGrace keeps the endpoints a Service port had listed ready for this long when they all
	// turn not ready without terminating (zero: not at all). See grace.go.
	ReadinessGrace time.Duration
	// Clock times Listing's times and ReadinessGrace; nil means the real clock.
	Clock clock.WithDelayedExecution
}

// Cache is the Source the interceptor uses: the ready endpoints of the Service ports it is told to
// Track, learnt from EndpointSlices. It is a controller-runtime Runnable.
//
// It only ever lists and watches the EndpointSlices of tracked Services: each watch is restricted to
// one namespace and to the label selector kubernetes.io/service-name in (tracked Services of that
// namespace), so the API server filters every other slice out and memory does not grow with the
// cluster. A namespace's tracked Services are spread over watches of at most about servicesPerWatch
// Services each, so that tracking one more Service re-lists only a few dozen of them.
//
// Ready and WaitReady are safe for concurrent use; Ready takes no lock and does not allocate.
type Cache struct {
	cs    kubernetes.Interface
	log   logr.Logger
	grace time.Duration
	clock clock.WithDelayedExecution
	now   func() time.Time // clock.Now

	// keys maps every tracked key (and every key someone waits for) to its state. The map is never
	// modified once published: Track, OnTable and stateFor publish a new one under mu, sharing the
	// parts they do not change (package pmap).
	keys atomic.Pointer[pmap.Map[ServiceKey, *keyState]]

	mu       sync.Mutex
	ctx      context.Context // set by Start
	stopped  bool
	wg       sync.WaitGroup
	tracked  bool                     // Track was called
	synced   bool                     // every watch of the first Track after Start has synced
	ports    map[serviceName][]string // tracked port names per Service
	active   map[watchKey]*sliceWatch // watches whose store is in use
	pending  map[watchKey]*sliceWatch // replacements still listing
	nsBucket map[string]uint32        // watches per namespace
	// table is the routing table OnTable tracked last (nil after a Track); each tracked key's state
	// counts the entries of it that route to the key, so a table derived from it changes only the
	// keys its change touches.
	table *routing.Table
}

// serviceName is a Service's namespace and name.
type serviceName struct{ namespace, name string }

// NewCache returns a Cache reading through cs. It learns nothing until it is started and told what to
// Track.
func NewCache(cs kubernetes.Interface, opts CacheOptions) (*Cache, error) {
	if opts.Registerer == nil {
		opts.Registerer = ctrlmetrics.Registry
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	c := &Cache{
		cs:       cs,
		log:      opts.Log,
		grace:    opts.ReadinessGrace,
		clock:    opts.Clock,
		now:      opts.Clock.Now,
		ports:    map[serviceName][]string{},
		active:   map[watchKey]*sliceWatch{},
		pending:  map[watchKey]*sliceWatch{},
		nsBucket: map[string]uint32{},
	}
	empty := pmap.New[ServiceKey, *keyState](hashKey)
	c.keys.Store(&empty)
	if err := registerMetrics(opts.Registerer, c); err != nil {
		return nil, err
	}
	return c, nil
}

// NewCacheForConfig returns a Cache reading through a client built from cfg.
func NewCacheForConfig(cfg *rest.Config, opts CacheOptions) (*Cache, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building Kubernetes client for EndpointSlices: %w", err)
	}
	return NewCache(cs, opts)
}

// Ready returns the ready endpoints of k, nil when it has none or is not tracked. Cost: two atomic
// loads and a map lookup; no lock, no allocation.
func (c *Cache) Ready(k ServiceKey) *Set {
	ks, _ := c.keys.Load().Get(k)
	if ks == nil {
		return nil
	}
	return ks.state.Load().set
}

// WaitReady blocks until k has a ready endpoint and returns its endpoints, or returns ctx's error.
// All waiters of k wake together when the watch delivers k's first ready endpoint; waiters of other
// keys do not wake. A key that is not tracked yet can be waited for: it becomes ready once it is
// tracked and has a ready endpoint.
func (c *Cache) WaitReady(ctx context.Context, k ServiceKey) (*Set, error) {
	ks := c.stateFor(k)
	for {
		st := ks.state.Load()
		if st.set != nil {
			return st.set, nil
		}
		if st.removed {
			// Track dropped k while we waited; wait on its new state.
			ks = c.stateFor(k)
			continue
		}
		if st.ready == nil {
			c.arm(ks) // and look again
			continue
		}
		select {
		case <-st.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// stateFor returns k's state, adding one for a key that is not tracked.
func (c *Cache) stateFor(k ServiceKey) *keyState {
	if ks, _ := c.keys.Load().Get(k); ks != nil {
		return ks
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := c.keys.Load()
	if ks, _ := cur.Get(k); ks != nil {
		return ks
	}
	next := cur.Edit()
	ks := newKeyState(k)
	next.Set(k, ks)
	c.storeKeys(next)
	return ks
}

// Track replaces the set of keys the Cache follows. Keys no longer tracked forget their endpoints
// (their waiters keep waiting, see WaitReady). Watches change only for the namespaces whose tracked
// Services change; until a changed watch has listed its slices, the endpoints known before are kept.
// Track does not block on the API server; it may be called before Start. Cost: O(keys).
func (c *Cache) Track(keys []ServiceKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.table = nil
	c.track(keys)
}

// track is Track. c.mu held.
func (c *Cache) track(keys []ServiceKey) {
	ports := map[serviceName][]string{}
	tracked := make(map[ServiceKey]struct{}, len(keys))
	for _, k := range keys {
		if _, dup := tracked[k]; dup {
			continue
		}
		tracked[k] = struct{}{}
		sn := serviceName{k.Namespace, k.Service}
		ports[sn] = append(ports[sn], k.PortName)
	}

	cur := c.keys.Load()
	next := pmap.New[ServiceKey, *keyState](hashKey).EditSized(len(tracked))
	var added []ServiceKey
	for k := range tracked {
		if ks, _ := cur.Get(k); ks != nil {
			next.Set(k, ks)
		} else {
			next.Set(k, newKeyState(k))
		}
		if !slices.Contains(c.ports[serviceName{k.Namespace, k.Service}], k.PortName) { // not tracked before this Track
			added = append(added, k)
		}
	}
	c.storeKeys(next)
	for k, ks := range cur.All() {
		if _, ok := tracked[k]; !ok {
			ks.remove()
		}
	}
	c.ports = ports
	c.tracked = true
	c.watchChanges(nil, added)
}

// watchChanges starts and stops the watches of namespaces (nil: every namespace) after c.ports
// changed, and computes the keys added to a Service whose watch is unchanged. c.mu held.
func (c *Cache) watchChanges(namespaces map[string]struct{}, added []ServiceKey) {
	if c.ctx == nil || c.stopped {
		return
	}
	c.reconcileWatches(namespaces)
	// A key new to a Service whose watch is unchanged (another port of it) is computed now.
	for _, k := range added {
		if w := c.watchOf(k.Namespace, k.Service); w != nil {
			c.recompute(w, k.Namespace, k.Service)
		}
	}
	c.checkSynced()
}

func (c *Cache) storeKeys(b *pmap.Builder[ServiceKey, *keyState]) {
	m := b.Map()
	c.keys.Store(&m)
}

// hashKey spreads ServiceKeys over a pmap's parts.
func hashKey(k ServiceKey) uint64 {
	return pmap.String(k.Namespace) ^ pmap.String(k.Service)*31 ^ pmap.String(k.PortName)*961
}

// OnTable tracks every Service port t routes to: each entry's target and cold-start fallback. Its
// signature suits tablewatch.Watcher.OnChange. When t was derived from the table OnTable tracked
// last (routing.Table.Diff), only the keys of the entries that changed are looked at, so a version
// costs what its change costs; otherwise every entry is (O(apps)).
func (c *Cache) OnTable(t *routing.Table) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if removed, added, ok := t.Diff(c.table); ok {
		c.table = t
		c.applyDiff(removed, added)
		return
	}
	refs := entryCounts(t)
	c.track(slices.Collect(maps.Keys(refs)))
	cur := c.keys.Load()
	for k, n := range refs {
		if ks, _ := cur.Get(k); ks != nil {
			ks.refs = n
		}
	}
	c.table = t
}

// applyDiff tracks the keys that the added entries route to and no other entry did, and stops
// tracking those that only the removed entries routed to. c.mu held.
func (c *Cache) applyDiff(removed, added []*routing.Entry) {
	next := c.keys.Load().Edit()
	was := map[ServiceKey]bool{}
	count := func(e *routing.Entry, d int) {
		for _, k := range entryKeys(e) {
			ks, _ := next.Get(k)
			if _, seen := was[k]; !seen {
				was[k] = ks != nil && ks.refs > 0
			}
			if ks == nil {
				if d < 0 {
					continue
				}
				ks = newKeyState(k)
				next.Set(k, ks)
			}
			ks.refs = max(0, ks.refs+d)
		}
	}
	for _, e := range removed {
		count(e, -1)
	}
	for _, e := range added {
		count(e, +1)
	}
	var fresh, gone []ServiceKey
	for k, before := range was {
		ks, _ := next.Get(k)
		switch now := ks != nil && ks.refs > 0; {
		case now && !before:
			fresh = append(fresh, k)
		case before && !now:
			gone = append(gone, k)
		}
	}
	if len(fresh) == 0 && len(gone) == 0 {
		return
	}
	namespaces := map[string]struct{}{}
	for _, k := range fresh {
		sn := serviceName{k.Namespace, k.Service}
		if len(c.ports[sn]) == 0 {
			namespaces[k.Namespace] = struct{}{}
		}
		c.ports[sn] = append(c.ports[sn], k.PortName)
	}
	var removedStates []*keyState
	for _, k := range gone {
		if ks, _ := next.Get(k); ks != nil {
			removedStates = append(removedStates, ks)
			next.Delete(k)
		}
		sn := serviceName{k.Namespace, k.Service}
		ports := slices.DeleteFunc(slices.Clone(c.ports[sn]), func(p string) bool { return p == k.PortName })
		if len(ports) == 0 {
			delete(c.ports, sn)
			namespaces[k.Namespace] = struct{}{}
		} else {
			c.ports[sn] = ports
		}
	}
	c.storeKeys(next)
	for _, ks := range removedStates {
		ks.remove()
	}
	c.tracked = true
	c.watchChanges(namespaces, fresh)
}

// entryKeys returns the Service ports e routes to: its target and its cold-start fallback.
func entryKeys(e *routing.Entry) []ServiceKey {
	keys := []ServiceKey{{Namespace: e.Namespace, Service: e.Service, PortName: e.PortName}}
	if fb := e.ColdStart.Fallback; fb != nil {
		keys = append(keys, ServiceKey{Namespace: e.Namespace, Service: fb.Service, PortName: fb.PortName})
	}
	return keys
}

// KeysFromTable returns the Service ports t routes to, each once, in no particular order.
func KeysFromTable(t *routing.Table) []ServiceKey { return slices.Collect(maps.Keys(entryCounts(t))) }

// entryCounts counts, for every Service port t routes to, the entries that route to it.
func entryCounts(t *routing.Table) map[ServiceKey]int {
	refs := map[ServiceKey]int{}
	for e := range t.All() {
		for _, k := range entryKeys(e) {
			refs[k]++
		}
	}
	return refs
}

// Synced reports whether the watches needed by the first Track after Start have listed their
// EndpointSlices. It stays true afterwards: later Tracks (new routes) do not make it false.
func (c *Cache) Synced() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.synced
}

// ReadyCheck returns nil once Synced, else an error; it suits a readiness check.
func (c *Cache) ReadyCheck(*http.Request) error {
	if c.Synced() {
		return nil
	}
	return errors.New("EndpointSlices of routed Services not listed yet")
}

// CachedSlices returns the number of EndpointSlices the Cache holds (in every watch's store).
func (c *Cache) CachedSlices() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, ws := range []map[watchKey]*sliceWatch{c.active, c.pending} {
		for _, w := range ws {
			n += w.store.len()
		}
	}
	return n
}

// NeedLeaderElection reports false: every interceptor replica forwards.
func (c *Cache) NeedLeaderElection() bool { return false }

// Start runs the watches the tracked keys need until ctx ends, then stops them and returns nil.
func (c *Cache) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.ctx != nil {
		c.mu.Unlock()
		return errors.New("endpoint cache already started")
	}
	c.ctx = ctx
	c.reconcileWatches(nil)
	c.checkSynced()
	c.mu.Unlock()

	<-ctx.Done()
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// keyState is one key's readiness. Its state is replaced (under Cache.mu), never modified.
type keyState struct {
	key   ServiceKey
	state atomic.Pointer[readyState]
	// refs counts the entries of Cache.table that route to the key. Cache.mu held.
	refs int
	// answered are the pending endpoints a cold-start probe found answering (Cache.Answered), by
	// address; they are served while no endpoint is ready. Cache.mu held.
	answered map[string]Endpoint
	// kept are the endpoints last listed ready that are kept for the readiness grace while no
	// endpoint is listed ready, since unreadySince; nil and zero otherwise. Cache.mu held.
	kept         *Set
	unreadySince time.Time
}

// readyState is an immutable snapshot: set is nil exactly while ready is open. When the key gets its
// first ready endpoint, a snapshot with the set is published and then ready is closed, waking every
// waiter; when it drops to none, a snapshot with a new open channel is published. Every replacement
// closes changed.
//
// The channels exist only once someone waits for the key or follows its listing (Cache.arm): until
// then ready and changed are nil in every snapshot, which saves a key that is only ever read with
// Ready (one that had a ready endpoint whenever a request came, or none) two channels and one
// more per change. Nobody can wait on a snapshot without channels: arm and publish run under
// Cache.mu, and a snapshot with channels is only ever followed by snapshots with channels.
type readyState struct {
	set     *Set
	ready   chan struct{}
	removed bool // the key is no longer tracked; look it up again
	// listed are the endpoints ready by the EndpointSlices (the kubelet's readiness), nil when none;
	// set is listed, or while listed is nil the answered pending endpoints, else those kept for the
	// readiness grace.
	listed *Set
	// pending are the endpoints listed neither ready nor terminating.
	pending []Endpoint
	// listedAt is when the slices last went from listing nothing to listing an endpoint (ready or
	// pending), readyAt when they last went from none ready to some; zero while they list none.
	listedAt, readyAt time.Time
	// changed is closed when this snapshot is replaced.
	changed chan struct{}
}

// unarmed is the state of a key nothing was listed for and nobody waited for (no channels).
var unarmed = &readyState{}

// closedChan is the ready channel of every snapshot with a ready endpoint, and the channels of a
// removed key: closed once and for all.
var closedChan = func() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}()

func newKeyState(k ServiceKey) *keyState {
	ks := &keyState{key: k}
	ks.state.Store(unarmed)
	return ks
}

// arm gives ks's snapshot its channels if it has none yet, and returns the current snapshot.
func (c *Cache) arm(ks *keyState) *readyState {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := ks.state.Load()
	if st.changed != nil || st.removed {
		return st
	}
	next := *st
	next.changed = make(chan struct{})
	if next.set != nil {
		next.ready = closedChan
	} else {
		next.ready = make(chan struct{})
	}
	ks.state.Store(&next)
	return &next
}

// update publishes the endpoints k's slices list now: listed ready (nil for none) and pending, with
// the readiness grace's (see keep). The zone choice among the endpoints is the proxy's (it caches it
// with the dial addresses, see Candidates). c.mu held.
func (c *Cache) update(ks *keyState, listed *Set, pending []Endpoint) {
	old := ks.state.Load()
	if old.removed {
		return
	}
	now := c.now()
	if c.keep(ks, old, listed, pending, now) {
		c.graceBegan(ks)
	}
	ks.publish(old, listed, pending, now)
}

// publish replaces old with the state of listed and pending at now: the listed ready endpoints, else
// the answered endpoints that are still pending, else those kept for the readiness grace (ks.kept,
// see Cache.keep); it does nothing when nothing changed. Cache.mu held.
func (ks *keyState) publish(old *readyState, listed *Set, pending []Endpoint, now time.Time) {
	var set *Set
	switch {
	case listed != nil:
		ks.answered = nil // the kubelet's readiness decides from now on
		set = listed
	case len(ks.answered) > 0:
		var eps []Endpoint
		for _, p := range pending {
			if a, ok := ks.answered[p.Addr()]; ok && a.Pod == p.Pod && a.PodUID == p.PodUID {
				eps = append(eps, p)
			}
		}
		if len(eps) < len(ks.answered) {
			// An answered endpoint left the slices, turned terminating or now names another pod.
			kept := make(map[string]Endpoint, len(eps))
			for _, e := range eps {
				kept[e.Addr()] = e
			}
			ks.answered = kept
		}
		if len(eps) > 0 {
			set = &Set{Key: ks.key, Endpoints: eps, Probed: true}
		}
	}
	if set == nil && listed == nil {
		set = ks.kept
	}
	if sameSet(old.set, set) && sameEndpoints(old.listed, listed) &&
		slices.EqualFunc(old.pending, pending, sameEndpoint) {
		return
	}
	next := &readyState{set: set, listed: listed, pending: pending, listedAt: old.listedAt, readyAt: old.readyAt}
	switch {
	case listed == nil && len(pending) == 0:
		next.listedAt = time.Time{}
	case next.listedAt.IsZero():
		next.listedAt = now
	}
	switch {
	case listed == nil:
		next.readyAt = time.Time{}
	case next.readyAt.IsZero():
		next.readyAt = now
	}
	armed := old.changed != nil
	if armed {
		next.changed = make(chan struct{})
		switch {
		case set != nil:
			next.ready = closedChan
		case old.set != nil:
			next.ready = make(chan struct{})
		default:
			next.ready = old.ready
		}
	}
	ks.state.Store(next)
	if armed {
		if set != nil && old.set == nil {
			close(old.ready)
		}
		close(old.changed)
	}
}

// sameSet reports whether a and b hold equal endpoints of the same origin.
func sameSet(a, b *Set) bool {
	return sameEndpoints(a, b) && (a == nil) == (b == nil) && (a == nil || a.Probed == b.Probed)
}

// remove marks the key untracked and wakes its waiters so that they look it up again. Cache.mu held.
func (ks *keyState) remove() {
	old := ks.state.Load()
	ks.answered, ks.kept, ks.unreadySince = nil, nil, time.Time{}
	ks.state.Store(removedState)
	if old.removed || old.changed == nil {
		return // nobody waits on it
	}
	if old.set == nil {
		close(old.ready)
	}
	close(old.changed)
}

// removedState is the state of every key no longer tracked.
var removedState = &readyState{ready: closedChan, removed: true, changed: closedChan}
