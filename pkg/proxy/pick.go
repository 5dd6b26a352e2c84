package proxy

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

// candidate is an endpoint with its dial address computed once. ep points into the Set's endpoints
// (or the zone's subset of them), which the view keeps alive: an endpoint is not copied per view.
type candidate struct {
	ep   *endpoints.Endpoint
	addr string
}

// zoneView caches endpoints.Candidates for one immutable Set.
type zoneView struct {
	set   *endpoints.Set
	zone  string
	all   []candidate // every ready endpoint
	cands []candidate // the zone's candidates (a subset of all, or all)

	session atomic.Pointer[sessionIndex] // built on first use (session persistence, session.go)
}

// backend is the forwarding state of one Service port in one table: endpoint choice (round robin
// over the zone's candidates) and endpoints recently seen refusing connections. Safe for concurrent use.
type backend struct {
	key      endpoints.ServiceKey
	protocol string
	// serviceAddr is the address forwarding through the Service dials (routing.Backend.Addr): set
	// only where it may be dialled (ViaService, a fallback, a static route's Service), "" for the
	// target of an app forwarded to its pods, which is only ever forwarded to a ready endpoint.
	serviceAddr string

	next atomic.Uint32
	view atomic.Pointer[zoneView]

	badMu sync.Mutex
	bad   atomic.Pointer[map[string]time.Time] // copy-on-write; nil when none
}

// candidates returns the endpoints to spread over for set, cached while set stays current.
func (b *backend) candidates(set *endpoints.Set, zone string) *zoneView {
	if v := b.view.Load(); v != nil && v.set == set && v.zone == zone {
		return v
	}
	v := &zoneView{set: set, zone: zone, all: make([]candidate, len(set.Endpoints))}
	for i := range set.Endpoints {
		ep := &set.Endpoints[i]
		v.all[i] = candidate{ep: ep, addr: ep.Addr()}
	}
	local, _ := endpoints.Candidates(set, zone, zone != "")
	if len(local) == len(set.Endpoints) {
		v.cands = v.all
	} else {
		v.cands = make([]candidate, len(local))
		for i := range local {
			ep := &local[i]
			v.cands[i] = candidate{ep: ep, addr: ep.Addr()}
		}
	}
	b.view.Store(v)
	return v
}

// pick returns the next endpoint from cands, skipping those tried already and, while others remain,
// those marked bad. ok is false when every candidate was tried.
func (b *backend) pick(cands []candidate, tried []string, now time.Time) (c *candidate, ok bool) {
	n := len(cands)
	if n == 0 {
		return nil, false
	}
	start := 0
	if n > 1 { // one endpoint: no shared counter to touch
		start = int(b.next.Add(1) - 1)
	}
	bad := b.bad.Load()
	fallback := -1
	for i := range n {
		c := &cands[(start+i)%n]
		if len(tried) > 0 && slices.Contains(tried, c.addr) {
			continue
		}
		if bad != nil {
			if until, isBad := (*bad)[c.addr]; isBad && now.Before(until) {
				if fallback < 0 {
					fallback = (start + i) % n
				}
				continue
			}
		}
		return c, true
	}
	if fallback >= 0 {
		// Every untried endpoint is marked bad: a mark is only a guess, so try one anyway.
		return &cands[fallback], true
	}
	return nil, false
}

// isBad reports whether addr carries a bad mark that has not expired at now (a time taken when
// hasBad reported true).
func (b *backend) isBad(addr string, now time.Time) bool {
	bad := b.bad.Load()
	if bad == nil {
		return false
	}
	until, ok := (*bad)[addr]
	return ok && now.Before(until)
}

// hasBad reports whether any endpoint carries a bad mark (expired or not).
func (b *backend) hasBad() bool { return b.bad.Load() != nil }

// markBad keeps addr out of the rotation until until, while other endpoints remain.
func (b *backend) markBad(addr string, now, until time.Time) {
	b.badMu.Lock()
	defer b.badMu.Unlock()
	next := map[string]time.Time{addr: until}
	if cur := b.bad.Load(); cur != nil {
		for a, u := range *cur {
			if a != addr && now.Before(u) {
				next[a] = u
			}
		}
	}
	b.bad.Store(&next)
}
