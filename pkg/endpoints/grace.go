package endpoints

import (
	"slices"
	"time"
)

// The readiness grace. When the API server comes back after an outage longer than the node
// monitor's grace period (50 s by default), the controller-manager marks the nodes whose leases it
// has not seen renewed yet Unknown and every pod on them not ready, before the kubelets report again
// a few seconds later and set them ready. Nothing happened to the pods: they serve on. A warm app's
// endpoints then all turn not ready at once, none terminating, and an interceptor that took that at
// its word would hold the app's requests as if it were at zero, for the seconds until the kubelets
// report (e2e "Fault: API server stopped for 60 s": 13 of 1,046 requests held past a 5 s client
// timeout; the pods were marked not ready for 7 to 9 s).
//
// So when no endpoint of a key is listed ready any more, the endpoints that were listed ready last
// are kept for the readiness grace as long as the slices still list them, with the same pod, not
// ready and not terminating. A pod that really stopped answering fails its connections (a dial
// error, which the proxy answers 502 or retries elsewhere), and a pod that is being deleted, scaled
// away or rolled is terminating and never kept; after the grace the key has no ready endpoint and
// requests are held as usual. A key with some endpoints still listed ready is not affected: it uses
// those.
//
// The grace never serves a pod that was not listed ready before: a starting pod (a cold start, a
// rollout's new pod) is served only once the kubelet finds it ready or, while requests are held for
// the app, a cold-start probe answered for it (Cache.Answered), which then comes before the kept
// endpoints. Once the grace is over, the kept pods are pending endpoints like any other: held requests
// have them probed, and served the moment they answer.

// keep updates ks's readiness grace for a listing at now of listed ready (nil for none) and pending
// endpoints: ks.kept becomes the endpoints of pending that were listed ready last (old.listed when
// the grace begins), while the grace lasts. It reports whether a grace began. c.mu held.
func (c *Cache) keep(ks *keyState, old *readyState, listed *Set, pending []Endpoint, now time.Time) bool {
	if listed != nil || c.grace <= 0 {
		ks.kept, ks.unreadySince = nil, time.Time{}
		return false
	}
	base, began := ks.kept, false
	if base == nil {
		if old.listed == nil {
			return false // nothing was listed ready: at zero, starting, or the grace is over
		}
		base, began = old.listed, true
		ks.unreadySince = now
	}
	var eps []Endpoint
	if now.Sub(ks.unreadySince) < c.grace {
		for _, p := range pending {
			if slices.ContainsFunc(base.Endpoints, func(e Endpoint) bool {
				return e.IP == p.IP && e.Port == p.Port && e.Pod == p.Pod && e.PodUID == p.PodUID
			}) {
				eps = append(eps, p)
			}
		}
	}
	if len(eps) == 0 {
		ks.kept, ks.unreadySince = nil, time.Time{}
		return false
	}
	ks.kept = &Set{Key: ks.key, Endpoints: eps}
	return began
}

// graceBegan logs that ks's endpoints are kept and has them published again once the grace is over.
// c.mu held.
func (c *Cache) graceBegan(ks *keyState) {
	c.log.Info("every endpoint of a routed Service turned not ready, none terminating; keeping them for the readiness grace",
		"service", ks.key.String(), "endpoints", len(ks.kept.Endpoints), "grace", c.grace.String())
	c.clock.AfterFunc(c.grace, func() {
		// In a goroutine of its own: a clock may run the function with its own lock held, which
		// update needs too (Now).
		go func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if cur, _ := c.keys.Load().Get(ks.key); c.stopped || cur != ks {
				return
			}
			st := ks.state.Load()
			c.update(ks, st.listed, st.pending)
		}()
	})
}
