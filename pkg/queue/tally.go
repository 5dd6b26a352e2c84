package queue

import (
	"iter"
	"sync/atomic"
)

// TallySlots is the number of counters in a Tally.
const TallySlots = 16

// Tally counts how an app's requests ended (status classes, cold starts, rejections, upstream
// failures by reason, ...), one counter per slot; the caller defines what each slot means (the
// interceptor's metrics, see pkg/proxy). It lives as long as the app's counters, across routing
// tables, and is exported at scrape time: no metrics-library series per app.
type Tally [TallySlots]atomic.Uint64

// Tally returns the app's Tally, allocating it on first use (128 bytes: an app that never gets a
// request costs none). Cost after that: one atomic load.
func (a *App) Tally() *Tally {
	if t := a.tally.Load(); t != nil {
		return t
	}
	a.tally.CompareAndSwap(nil, new(Tally))
	return a.tally.Load()
}

// Tallied returns the app's Tally, or nil when nothing was ever counted in it.
func (a *App) Tallied() *Tally { return a.tally.Load() }

// SetQueueLimit records the app's hold-queue limit for its metrics (the limit TryHold is given by
// the routing table in use).
func (a *App) SetQueueLimit(n int64) { a.queueLimit.Store(n) }

// QueueLimit is the limit last given to SetQueueLimit (0 before).
func (a *App) QueueLimit() int64 { return a.queueLimit.Load() }

// Key is the app's key (namespace/name).
func (a *App) Key() string { return a.key }

// Apps iterates over every app's counters, in no particular order, without advancing the counts
// sequence (for metrics scrapes). It reads one immutable snapshot.
func (r *Registry) Apps() iter.Seq[*App] {
	apps := r.apps.Load()
	return func(yield func(*App) bool) {
		for _, a := range apps.All() {
			if !yield(a) {
				return
			}
		}
	}
}
