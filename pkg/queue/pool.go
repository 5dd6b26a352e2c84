package queue

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
)

// Errors of Pool.Admit and of an evicted hold.
var (
	// ErrPoolFull: the interceptor holds as many requests (or bytes) as it may, and the app already
	// holds at least its fair share of them.
	ErrPoolFull = errors.New("interceptor holds as many requests as it may")
	// ErrEvicted: a held request gave its room to an app below its fair share (see Pool).
	ErrEvicted = errors.New("held request evicted for an app below its fair share")
)

// PoolLimits bound what one interceptor holds for every app together. A zero field is no bound.
type PoolLimits struct {
	// MaxRequests bounds the requests held at once.
	MaxRequests int64
	// MaxBytes bounds the sum of the held requests' costs (see Pool.Admit).
	MaxBytes int64
}

// Pool bounds the requests all apps hold at once on one interceptor, in number and in bytes (each
// request charged the memory it keeps while held), and shares the bound fairly: first between
// namespaces (tenants), then between the apps of a namespace.
//
// Below the bound any app may take the free room, however much it already holds. At the bound the
// pool is contended. A share is the larger of a fraction of the requests and a fraction of the bytes
// (dominant resource fairness, so a tenant of few huge requests and one of many small ones are
// compared on what they actually use). With N namespaces holding (the asking one included), a
// namespace's fair share is 1/N of the pool; a request whose namespace stays within its share is
// admitted by evicting the newest held requests of the namespace furthest above its own (from that
// namespace's app furthest above the others). A namespace at its share may still rebalance among its
// own apps: with m of its apps holding, a request whose app stays within 1/m of the namespace's room
// (its fair share, or what it holds when that is more) evicts from the namespace's app furthest above
// that. Anything else is refused (ErrPoolFull).
// So a flood uses the whole pool while nobody else needs it and gives way request by request as
// soon as another tenant does, and a tenant cannot widen its share by spreading the flood over many
// apps: its apps share its namespace's part.
//
// Admit and Release take one mutex and never block on anything else; a refused request costs
// O(namespaces holding), an admission at the bound O(namespaces + apps of the victim) per eviction.
// It is safe for concurrent use.
type Pool struct {
	limits PoolLimits

	mu           sync.Mutex
	count, bytes int64
	spaces       map[string]*nsHolds
	apps         map[*App]*appHolds

	// refused and evicted count ErrPoolFull answers and evictions (metrics).
	refused, evicted atomic.Uint64
}

// nsHolds are one namespace's holds. Guarded by Pool.mu.
type nsHolds struct {
	count, bytes int64
	apps         map[*App]*appHolds
}

// appHolds are one app's holds in admission order, oldest first. Guarded by Pool.mu.
type appHolds struct {
	ns           *nsHolds
	count, bytes int64
	head, tail   *Hold
}

// Hold is one request admitted to a Pool. Release it exactly once, when the request stops being
// held (forwarded, answered or gone); a hold that was evicted releases nothing.
type Hold struct {
	pool       *Pool
	app        *App
	cost       int64
	evict      func()
	prev, next *Hold
	gone       bool // released or evicted; guarded by pool.mu
}

// NewPool returns a pool with the given limits.
func NewPool(l PoolLimits) *Pool {
	return &Pool{limits: l, spaces: map[string]*nsHolds{}, apps: map[*App]*appHolds{}}
}

// Limits returns the pool's limits.
func (p *Pool) Limits() PoolLimits { return p.limits }

// Usage returns the requests and bytes held now.
func (p *Pool) Usage() (requests, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count, p.bytes
}

// AppUsage returns the requests and bytes a holds now.
func (p *Pool) AppUsage(a *App) (requests, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.apps[a]; h != nil {
		return h.count, h.bytes
	}
	return 0, 0
}

// NamespaceUsage returns the requests and bytes the apps of namespace ns hold now.
func (p *Pool) NamespaceUsage(ns string) (requests, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.spaces[ns]; h != nil {
		return h.count, h.bytes
	}
	return 0, 0
}

// Refused and Evicted count the requests refused with ErrPoolFull and the holds evicted so far.
func (p *Pool) Refused() uint64 { return p.refused.Load() }

// Evicted counts the holds evicted so far.
func (p *Pool) Evicted() uint64 { return p.evicted.Load() }

// Admit admits one request of app a costing cost bytes, or refuses it with ErrPoolFull. evict
// is called at most once, after Admit's caller may already hold the returned Hold, when the hold is
// evicted for an app below its fair share: the request must then stop being held and be answered
// (ErrEvicted). Holds evicted to make room for this request have their evict called before Admit
// returns, outside the pool's lock. A request that costs more than MaxBytes on its own is refused.
func (p *Pool) Admit(a *App, cost int64, evict func()) (*Hold, error) {
	cost = max(cost, 0)
	p.mu.Lock()
	if p.fits(1, cost) {
		h := p.add(a, cost, evict)
		p.mu.Unlock()
		return h, nil
	}
	victims, ok := p.victims(a, cost)
	if !ok {
		p.mu.Unlock()
		p.refused.Add(1)
		return nil, ErrPoolFull
	}
	for _, v := range victims {
		p.remove(v)
	}
	h := p.add(a, cost, evict)
	p.mu.Unlock()
	p.evicted.Add(uint64(len(victims)))
	for _, v := range victims {
		if v.evict != nil {
			v.evict()
		}
	}
	return h, nil
}

// Release ends the hold; it does nothing for a hold that was evicted or released before.
func (h *Hold) Release() {
	if h == nil {
		return
	}
	p := h.pool
	p.mu.Lock()
	if !h.gone {
		p.remove(h)
	}
	p.mu.Unlock()
}

// Evicted reports whether the hold was evicted (or released).
func (h *Hold) Evicted() bool {
	h.pool.mu.Lock()
	defer h.pool.mu.Unlock()
	return h.gone
}

// fits reports whether n more requests costing cost fit the limits. p.mu held.
func (p *Pool) fits(n, cost int64) bool {
	l := p.limits
	return (l.MaxRequests <= 0 || p.count+n <= l.MaxRequests) && (l.MaxBytes <= 0 || p.bytes+cost <= l.MaxBytes)
}

// share is the dominant share of count requests and bytes bytes. p.mu held.
func (p *Pool) share(count, bytes int64) float64 {
	var s float64
	if l := p.limits.MaxRequests; l > 0 {
		s = float64(count) / float64(l)
	}
	if l := p.limits.MaxBytes; l > 0 {
		s = max(s, float64(bytes)/float64(l))
	}
	return s
}

// victims returns the holds to evict so that a's request of cost fits, or false when it must be
// refused (see Pool): a would be above its fair share, the request alone exceeds MaxBytes, or those
// above theirs hold too little to make room. Nothing is changed. p.mu held.
func (p *Pool) victims(a *App, cost int64) ([]*Hold, bool) {
	if l := p.limits.MaxBytes; l > 0 && cost > l {
		return nil, false
	}
	e := newEviction(p, cost)
	ns := namespaceOf(a)
	mine := p.spaces[ns]
	n := len(p.spaces)
	var nsCount, nsBytes int64
	if mine != nil {
		nsCount, nsBytes = mine.count, mine.bytes
	} else {
		n++
	}
	if fair := 1 / float64(n); p.share(nsCount+1, nsBytes+cost) <= fair {
		// Take from other namespaces above their share, the furthest first.
		for !e.done() {
			var worst *nsHolds
			best := fair
			for name, h := range p.spaces {
				if name == ns {
					continue
				}
				if c, b := e.left(h); p.share(c, b) > best && e.hasMore(h) {
					worst, best = h, p.share(c, b)
				}
			}
			var v *appHolds
			if worst != nil {
				v = e.heaviest(worst, nil, 0)
			}
			if v == nil {
				return nil, false
			}
			e.take(v)
		}
		return e.out, true
	}
	// The namespace is at its share: its apps may rebalance among themselves.
	if mine == nil {
		return nil, false
	}
	m := len(mine.apps)
	var appCount, appBytes int64
	if h := mine.apps[a]; h != nil {
		appCount, appBytes = h.count, h.bytes
	} else {
		m++
	}
	// The namespace's room: its fair share of the pool, or what it holds when that is more (nobody
	// else asked for it), split evenly between its apps.
	fair := max(1/float64(n), p.share(nsCount, nsBytes)) / float64(m)
	if p.share(appCount+1, appBytes+cost) > fair {
		return nil, false
	}
	for !e.done() {
		v := e.heaviest(mine, a, fair)
		if v == nil {
			return nil, false
		}
		e.take(v)
	}
	return e.out, true
}

// eviction plans the holds to evict for one admission without changing the pool.
type eviction struct {
	p                    *Pool
	needCount, needBytes int64
	taken                map[*appHolds]*taken
	out                  []*Hold
}

// taken is what an eviction plans to take from one app: how much it leaves and the next hold to
// take, walking back from the newest.
type taken struct {
	count, bytes int64
	next         *Hold
}

func newEviction(p *Pool, cost int64) *eviction {
	return &eviction{p: p, needCount: p.count + 1 - p.limits.MaxRequests, needBytes: p.bytes + cost - p.limits.MaxBytes,
		taken: map[*appHolds]*taken{}}
}

// done reports whether the planned evictions make room.
func (e *eviction) done() bool {
	l := e.p.limits
	return (l.MaxRequests <= 0 || e.needCount <= 0) && (l.MaxBytes <= 0 || e.needBytes <= 0)
}

func (e *eviction) of(h *appHolds) *taken {
	t := e.taken[h]
	if t == nil {
		t = &taken{count: h.count, bytes: h.bytes, next: h.tail}
		e.taken[h] = t
	}
	return t
}

// left returns what namespace h holds once the planned evictions are done.
func (e *eviction) left(h *nsHolds) (count, bytes int64) {
	count, bytes = h.count, h.bytes
	for _, ah := range h.apps {
		if t := e.taken[ah]; t != nil {
			count -= ah.count - t.count
			bytes -= ah.bytes - t.bytes
		}
	}
	return count, bytes
}

// hasMore reports whether namespace h has a hold left to evict.
func (e *eviction) hasMore(h *nsHolds) bool {
	for _, ah := range h.apps {
		if e.of(ah).next != nil {
			return true
		}
	}
	return false
}

// heaviest returns the app of namespace h, other than skip, with the largest share above floor and
// a hold left to evict; nil when none.
func (e *eviction) heaviest(h *nsHolds, skip *App, floor float64) *appHolds {
	var worst *appHolds
	best := floor
	for app, ah := range h.apps {
		if app == skip {
			continue
		}
		t := e.of(ah)
		if s := e.p.share(t.count, t.bytes); t.next != nil && (s > best || worst == nil && floor == 0) {
			worst, best = ah, s
		}
	}
	return worst
}

// take plans the eviction of ah's newest hold not yet taken.
func (e *eviction) take(ah *appHolds) {
	t := e.of(ah)
	v := t.next
	t.next = v.prev
	t.count--
	t.bytes -= v.cost
	e.needCount--
	e.needBytes -= v.cost
	e.out = append(e.out, v)
}

// namespaceOf returns the namespace of a's key ("namespace/name").
func namespaceOf(a *App) string {
	ns, _, _ := strings.Cut(a.key, "/")
	return ns
}

// add records a new hold of a. p.mu held.
func (p *Pool) add(a *App, cost int64, evict func()) *Hold {
	h := &Hold{pool: p, app: a, cost: cost, evict: evict}
	ah := p.apps[a]
	if ah == nil {
		name := namespaceOf(a)
		ns := p.spaces[name]
		if ns == nil {
			ns = &nsHolds{apps: map[*App]*appHolds{}}
			p.spaces[name] = ns
		}
		ah = &appHolds{ns: ns}
		p.apps[a] = ah
		ns.apps[a] = ah
	}
	h.prev = ah.tail
	if ah.tail != nil {
		ah.tail.next = h
	} else {
		ah.head = h
	}
	ah.tail = h
	ah.count++
	ah.bytes += cost
	ah.ns.count++
	ah.ns.bytes += cost
	p.count++
	p.bytes += cost
	return h
}

// remove unlinks h. p.mu held.
func (p *Pool) remove(h *Hold) {
	h.gone = true
	ah := p.apps[h.app]
	if h.prev != nil {
		h.prev.next = h.next
	} else {
		ah.head = h.next
	}
	if h.next != nil {
		h.next.prev = h.prev
	} else {
		ah.tail = h.prev
	}
	h.prev, h.next = nil, nil
	ah.count--
	ah.bytes -= h.cost
	ah.ns.count--
	ah.ns.bytes -= h.cost
	p.count--
	p.bytes -= h.cost
	if ah.count == 0 {
		delete(p.apps, h.app)
		delete(ah.ns.apps, h.app)
		if ah.ns.count == 0 {
			delete(p.spaces, namespaceOf(h.app))
		}
	}
}
