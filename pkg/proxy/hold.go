package proxy

import (
	"fmt"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
)

// What a held request costs the interceptor, measured with hack/bench/holdflood (resident memory
// above the idle process, divided by the requests held; docs/benchmarks.md#held-requests-under-a-flood):
// a request keeps its connection's buffers, its goroutines and their stacks, the request and its
// parsed header (every value a string of its own), a copy of the head kept by the connection's
// head watch, and its share of the garbage collector's headroom over all of that. The event loops
// keep less for the heads they hold themselves (one copy of the head, no goroutine per connection):
// the same charge bounds both.
const (
	// HeldBaseCost is what a held request with a small head costs.
	HeldBaseCost = 20 << 10
	// HeldHeadFactor is what each byte of a held request's head costs.
	HeldHeadFactor = 3
)

// holdCost returns what holding rq costs (see HeldBaseCost): the memory the pool charges for it,
// the body its server may buffer while it is held included.
func holdCost(rq engine.Waiting) int64 {
	return HeldBaseCost + HeldHeadFactor*rq.HeadBytes + rq.Buffered
}

// admit takes the request's room in the interceptor's pool of held requests (Options.Pool); evict
// ends the hold when the pool gives the room to an app below its fair share. Without a pool every
// request is admitted.
func (x *exchange) admit(evict func()) error {
	pool := x.p.opts.Pool
	if pool == nil {
		return nil
	}
	cost := x.cost
	if cost == 0 {
		cost = HeldBaseCost // held without its request at hand (Wait called directly)
	}
	h, err := pool.Admit(x.app.counts, cost, evict)
	if err != nil {
		x.app.series().poolRefused()
		return fmt.Errorf("%s: %w (%d bytes)", x.app.key, err, cost)
	}
	x.hold = h
	return nil
}

// unhold ends the request's hold, if it is held: its count and its room in the pool.
func (x *exchange) unhold() {
	if x.hold != nil {
		x.hold.Release()
		x.hold = nil
	}
	if x.holding {
		x.app.counts.Unhold()
		x.holding = false
	}
}

// wokeUnheld records a wake by a request that was refused a hold (its app's queue or the pool was
// full): like a waiting page's, the app's cold start is followed where it can be.
func (x *exchange) wokeUnheld(wakeAt time.Time, streams int) {
	t := x.p.opts.ColdStarts
	if t == nil {
		return
	}
	if cs := t.Woken(x.app.coldApp(), x.start); cs != nil && !wakeAt.IsZero() {
		cs.WakeSent(wakeAt, streams)
	}
}
