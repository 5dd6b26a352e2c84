// Package queue counts the interceptor's traffic per app (in flight, held, requests received), bounds
// the requests held while an app is cold, and publishes wake notices; its Registry is what the admin
// port serves as counts and the wake stream.
package queue

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/pmap"
)

// Registry holds one App per routed app key. It implements admin.CountsSource and admin.WakeSource.
// It is safe for concurrent use; App lookups take no lock.
type Registry struct {
	epoch string
	// seq is the sequence of counts answers. An App records the value it saw after each change (see
	// App.touch), so an answer for since s lists every App whose changed >= s.
	seq atomic.Uint64
	// removedAt is the seq current when Sync last dropped an app; answers for since <= removedAt are
	// full, because a delta cannot express a removal.
	removedAt atomic.Uint64

	mu   sync.Mutex                             // serialises writers of apps
	apps atomic.Pointer[pmap.Map[string, *App]] // immutable snapshots
	// lingering are apps Remove or Sync was asked to drop while they had requests in flight or held;
	// the next Remove or Sync tries again. Guarded by mu.
	lingering map[string]struct{}
	subs      atomic.Pointer[[]*subscriber] // copy-on-write, guarded by mu for writers
	now       func() time.Time
}

// NewRegistry returns an empty Registry with a fresh random epoch. now is the clock for wake events;
// nil means time.Now.
func NewRegistry(now func() time.Time) *Registry {
	if now == nil {
		now = time.Now
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	r := &Registry{
		epoch:     strconv.FormatInt(time.Now().Unix(), 36) + "-" + hex.EncodeToString(b[:]),
		now:       now,
		lingering: map[string]struct{}{},
	}
	r.seq.Store(1)
	empty := pmap.New[string, *App](pmap.String)
	r.apps.Store(&empty)
	r.subs.Store(&[]*subscriber{})
	return r
}

// Epoch identifies this process's counters (admin.CountsSource).
func (r *Registry) Epoch() string { return r.epoch }

// App returns the counters of key, creating them on first use. Cost on the hot path: one lookup on
// an immutable snapshot; creation derives a new snapshot under a lock and should be rare (Add
// creates the apps of a new routing table in one step).
func (r *Registry) App(key string) *App {
	if a, _ := r.apps.Load().Get(key); a != nil {
		return a
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.apps.Load()
	if a, _ := cur.Get(key); a != nil {
		return a
	}
	b := cur.Edit()
	a := r.newApp(key)
	b.Set(key, a)
	r.store(b)
	return a
}

// Add creates the counters of every key that has none yet in one new snapshot. Its cost grows with
// the number of keys, not with the number of apps (the snapshot shares what it does not change).
// Counters of existing apps are kept; no app is removed.
func (r *Registry) Add(keys []string) {
	if len(keys) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.apps.Load().Edit()
	for _, k := range keys {
		if a, _ := b.Get(k); a == nil {
			b.Set(k, r.newApp(k))
		}
		delete(r.lingering, k) // wanted again
	}
	r.store(b)
}

// Remove drops the counters of keys, except those of apps that still have requests in flight or
// held: they are dropped by a later Remove or Sync once idle. Its cost grows with the number of keys
// and of such lingering apps, not with the number of apps.
func (r *Registry) Remove(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(keys) == 0 && len(r.lingering) == 0 {
		return
	}
	b := r.apps.Load().Edit()
	removed := false
	drop := func(k string) {
		a, ok := b.Get(k)
		if !ok {
			delete(r.lingering, k)
			return
		}
		if a.Concurrency() > 0 {
			r.lingering[k] = struct{}{}
			return
		}
		delete(r.lingering, k)
		b.Delete(k)
		removed = true
	}
	for k := range r.lingering {
		drop(k)
	}
	for _, k := range keys {
		drop(k)
	}
	r.store(b)
	if removed {
		r.removedAt.Store(r.seq.Load())
	}
}

// Sync makes the registry hold exactly the given keys, plus any app that still has requests in
// flight or held (dropped by a later Sync or Remove once idle). Cost: O(apps); a caller that knows
// what changed uses Add and Remove.
func (r *Registry) Sync(keys []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.apps.Load()
	next := pmap.New[string, *App](pmap.String).EditSized(len(keys))
	for _, k := range keys {
		if a, _ := cur.Get(k); a != nil {
			next.Set(k, a)
		} else {
			next.Set(k, r.newApp(k))
		}
	}
	removed := false
	clear(r.lingering)
	for k, a := range cur.All() {
		if _, ok := next.Get(k); !ok {
			if a.Concurrency() > 0 {
				next.Set(k, a)
				r.lingering[k] = struct{}{}
			} else {
				removed = true
			}
		}
	}
	r.store(next)
	if removed {
		// A delta cannot say "gone": make every consumer that has not seen a full answer since this
		// removal get one next, so it forgets the removed apps instead of keeping their last values.
		r.removedAt.Store(r.seq.Load())
	}
}

// store publishes b's snapshot. r.mu held.
func (r *Registry) store(b *pmap.Builder[string, *App]) {
	m := b.Map()
	r.apps.Store(&m)
}

func (r *Registry) newApp(key string) *App {
	a := &App{key: key, reg: r}
	a.end = a.endForward // a method value allocates: made once, not per request
	a.changed.Store(r.seq.Load())
	return a
}

// CountsSince answers admin.CountsSource: every app for since 0, else the apps changed since the
// answer that returned since plus every app with requests in flight or held. It never blocks on I/O;
// cost is O(apps).
func (r *Registry) CountsSince(since uint64) admin.Counts {
	// Changes that happen from now on record a sequence >= seq, so the next answer (since = seq)
	// lists them; changes that recorded an older sequence are visible to the reads below.
	seq := r.seq.Add(1)
	full := since == 0 || since >= seq || since <= r.removedAt.Load()
	apps := r.apps.Load()
	out := admin.Counts{Epoch: r.epoch, Seq: seq, Full: full, Apps: make([]admin.AppCount, 0, apps.Len())}
	for _, a := range apps.All() {
		c := a.Count()
		if full || c.InFlight != 0 || c.Held != 0 || a.changed.Load() >= since {
			out.Apps = append(out.Apps, c)
		}
	}
	slices.SortFunc(out.Apps, func(x, y admin.AppCount) int { return strings.Compare(x.Key, y.Key) })
	return out
}

// Snapshot returns every app's counters, in no particular order, without advancing the counts
// sequence (for metrics scrapes).
func (r *Registry) Snapshot() []admin.AppCount {
	apps := r.apps.Load()
	out := make([]admin.AppCount, 0, apps.Len())
	for _, a := range apps.All() {
		out = append(out, a.Count())
	}
	return out
}

// App is one app's counters. Methods are safe for concurrent use and lock-free.
type App struct {
	key      string
	reg      *Registry
	end      func() // endForward, which StartForward returns
	inFlight atomic.Int64
	held     atomic.Int64
	requests atomic.Uint64
	// changed is the registry sequence current after the latest change (see touch).
	changed atomic.Uint64
	// lastWake is the unix-nano time of the latest wake event published for this app.
	lastWake atomic.Int64
	// tally counts the app's request outcomes; nil until the first (see Tally).
	tally atomic.Pointer[Tally]
	// queueLimit is the hold-queue limit exported next to held (see SetQueueLimit).
	queueLimit atomic.Int64
}

// Count returns the app's current counters.
func (a *App) Count() admin.AppCount {
	return admin.AppCount{Key: a.key, InFlight: a.inFlight.Load(), Held: a.held.Load(), Requests: a.requests.Load()}
}

// Concurrency is in flight plus held.
func (a *App) Concurrency() int64 { return a.inFlight.Load() + a.held.Load() }

// Received counts one request; call it once per request, before it is held or forwarded.
func (a *App) Received() {
	a.requests.Add(1)
	a.touch()
}

// StartForward marks one request (or WebSocket) in flight; call the returned function exactly once
// when it ends.
func (a *App) StartForward() (done func()) {
	a.inFlight.Add(1)
	a.touch()
	return a.end
}

func (a *App) endForward() {
	a.inFlight.Add(-1)
	a.touch()
}

// TryHold admits one request to the app's hold queue if fewer than limit are held, and reports
// whether it did. A limit <= 0 admits nothing. Release with Unhold.
func (a *App) TryHold(limit int64) bool {
	if a.held.Add(1) > limit {
		a.held.Add(-1)
		return false
	}
	a.touch()
	return true
}

// Unhold ends one hold admitted by TryHold.
func (a *App) Unhold() {
	a.held.Add(-1)
	a.touch()
}

// Held returns the number of requests currently held.
func (a *App) Held() int64 { return a.held.Load() }

// InFlight returns the number of requests currently forwarded and not finished.
func (a *App) InFlight() int64 { return a.inFlight.Load() }

// touch records that the counters changed, after the change. It leaves changed at a sequence that
// was current after the change was made: either the answer that read seq before this check already
// saw the change, or the next one lists the app. Cost: two atomic loads when nothing is polled.
func (a *App) touch() {
	for {
		cur := a.reg.seq.Load()
		old := a.changed.Load()
		if old >= cur {
			return
		}
		if a.changed.CompareAndSwap(old, cur) && a.reg.seq.Load() == cur {
			return
		}
	}
}

// Wake publishes a wake event for the app unless one was published less than every ago, and returns
// when it published it and to how many wake streams (zero time when it did not publish). It never
// blocks: subscribers coalesce events behind a slow reader.
func (a *App) Wake(every time.Duration) (at time.Time, streams int) {
	now := a.reg.now()
	last := a.lastWake.Load()
	if last != 0 && now.UnixNano()-last < int64(every) {
		return time.Time{}, 0
	}
	if !a.lastWake.CompareAndSwap(last, now.UnixNano()) {
		return time.Time{}, 0 // a concurrent request publishes it
	}
	return now, a.reg.publish(admin.WakeEvent{Key: a.key, At: now})
}

// Woke forgets the latest wake event, so that the next cold start of the app publishes at once; the
// proxy calls it when a held request is released.
func (a *App) Woke() {
	if a.lastWake.Load() != 0 {
		a.lastWake.Store(0)
	}
}
