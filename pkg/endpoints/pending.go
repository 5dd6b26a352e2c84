package endpoints

import (
	"slices"
	"time"
)

// Listing is what the EndpointSlices of one Service port say while it starts: the endpoints listed
// ready, those listed and not ready yet (pods that are starting), and which of these a cold-start
// probe found answering. It is an immutable snapshot; readers must not modify it.
type Listing struct {
	// Ready are the endpoints listed ready (the kubelet's readiness); nil when none.
	Ready *Set
	// Answered are the pending endpoints served because a probe found them answering (Set.Probed);
	// nil when none, and always nil while Ready is not.
	Answered *Set
	// Pending are the endpoints listed neither ready nor terminating, sorted by address.
	Pending []Endpoint
	// ListedAt is when the slices went from listing no endpoint to listing one (ready or not),
	// ReadyAt when they went from none ready to some; zero while there is none.
	ListedAt, ReadyAt time.Time
	// Changed is closed when any of the above changes, or when the key stops being tracked.
	Changed <-chan struct{}
}

// Prober is what a cold-start prober needs beyond Source: the endpoints that are not ready yet, and
// a way to serve one of them early. Cache implements it.
type Prober interface {
	Source
	// Listed returns k's listing. A key that is not tracked yet can be listed (it is empty until
	// the key is tracked). Cost: an atomic load, no allocation, for a tracked key.
	Listed(k ServiceKey) Listing
	// Answered serves ep as k's endpoint while k has no ready endpoint, and wakes k's waiters as a
	// ready endpoint does. ep must be one of k's pending endpoints (same address, pod and pod UID);
	// it reports whether ep is served. An answered endpoint is served until an endpoint of k is
	// listed ready (from then on only the listed ones are), it leaves the pending ones (deleted,
	// terminating, ready) or Withdraw.
	Answered(k ServiceKey, ep Endpoint) bool
	// Withdraw stops serving an answered endpoint.
	Withdraw(k ServiceKey, ep Endpoint)
	// Unfollow tells that the caller no longer follows k's listing. The channels k's snapshot got
	// for waiters and followers are dropped (anyone still waiting on them wakes and looks again,
	// which gives k new ones), so that a key waited for once does not keep them for good.
	Unfollow(k ServiceKey)
}

var _ Prober = (*Cache)(nil)

// Listed implements Prober.
func (c *Cache) Listed(k ServiceKey) Listing {
	ks := c.stateFor(k)
	st := ks.state.Load()
	if st.removed {
		ks = c.stateFor(k)
		st = ks.state.Load()
	}
	if st.changed == nil {
		st = c.arm(ks)
	}
	l := Listing{Ready: st.listed, Pending: st.pending, Changed: st.changed, ListedAt: st.listedAt, ReadyAt: st.readyAt}
	if st.listed == nil && st.set != nil && st.set.Probed {
		l.Answered = st.set // not the endpoints kept for the readiness grace
	}
	return l
}

// Answered implements Prober.
func (c *Cache) Answered(k ServiceKey, ep Endpoint) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks, _ := c.keys.Load().Get(k)
	if ks == nil {
		return false
	}
	st := ks.state.Load()
	if st.removed || st.listed != nil {
		return false
	}
	if !slices.ContainsFunc(st.pending, func(p Endpoint) bool {
		return p.IP == ep.IP && p.Port == ep.Port && p.Pod == ep.Pod && p.PodUID == ep.PodUID
	}) {
		return false
	}
	if ks.answered == nil {
		ks.answered = map[string]Endpoint{}
	}
	ks.answered[ep.Addr()] = ep
	ks.publish(st, st.listed, st.pending, c.now())
	return true
}

// Withdraw implements Prober.
func (c *Cache) Withdraw(k ServiceKey, ep Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks, _ := c.keys.Load().Get(k)
	if ks == nil {
		return
	}
	if _, ok := ks.answered[ep.Addr()]; !ok {
		return
	}
	delete(ks.answered, ep.Addr())
	st := ks.state.Load()
	if !st.removed {
		ks.publish(st, st.listed, st.pending, c.now())
	}
}

// Unfollow implements Prober: k's snapshot is replaced by one without channels, and its channels
// are closed (a waiter or follower wakes, finds no channel and arms the key again). A key at zero
// that had a request then costs no channel (two, 192 bytes) and, with nothing listed, no snapshot
// of its own (112 bytes) until someone waits for it again.
func (c *Cache) Unfollow(k ServiceKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ks, _ := c.keys.Load().Get(k)
	if ks == nil {
		return
	}
	old := ks.state.Load()
	if old.removed || old.changed == nil {
		return
	}
	next := unarmed
	if old.set != nil || old.listed != nil || len(old.pending) > 0 {
		cp := *old
		cp.ready, cp.changed = nil, nil
		next = &cp
	}
	ks.state.Store(next)
	if old.set == nil {
		close(old.ready)
	}
	close(old.changed)
}
