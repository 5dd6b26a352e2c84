package queue

import (
	"errors"
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
// request charged the memory it keeps while held), and shares the bound fairly between apps.
//
// Below the bound any app may take the free room, however much it already holds. At the bound the
// pool is contended: with n apps holding (the asking app included), an app's fair share is 1/n of
// each limit, and its share is the larger of its fraction of the requests and its fraction of the
// bytes (dominant resource fairness, so an app of few huge requests and one of many small ones are
// compared on what they actually use). A request is then admitted only if its app stays within its
// fair share, by evicting the newest held requests of the apps furthest above theirs until it fits;
// otherwise it is refused (ErrPoolFull). So a flood for one app uses the whole pool while nobody
// else needs it, and gives way request by request as soon as another app does: no app can keep
// another from holding its fair share.
//
// Admit and Release take one mutex and never block on anything else; a refused request costs O(1),
// an admission at the bound O(apps holding) per eviction. It is safe for concurrent use.
type Pool struct {
	limits PoolLimits

	mu      sync.Mutex
	count   int64
	bytes   int64
	holding map[*App]*appHolds

	// refused and evicted count ErrPoolFull answers and evictions (metrics).
	refused, evicted atomic.Uint64
}

// appHolds are one app's holds in admission order, oldest first. Guarded by Pool.mu.
type appHolds struct {
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
	return &Pool{limits: l, holding: map[*App]*appHolds{}}
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
	if h := p.holding[a]; h != nil {
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
// refused: a would be above its fair share, the request alone exceeds MaxBytes, or the apps above
// their fair share hold too little to make room. Nothing is changed. p.mu held.
func (p *Pool) victims(a *App, cost int64) ([]*Hold, bool) {
	if l := p.limits.MaxBytes; l > 0 && cost > l {
		return nil, false
	}
	mine := p.holding[a]
	n := len(p.holding)
	var count, bytes int64
	if mine != nil {
		count, bytes = mine.count, mine.bytes
	} else {
		n++
	}
	fair := 1 / float64(n)
	if p.share(count+1, bytes+cost) > fair {
		return nil, false
	}
	// Evict newest first from whichever app is furthest above its fair share, recomputing after
	// each eviction, until the request fits.
	type left struct {
		count, bytes int64
		next         *Hold // the next hold to evict, walking back from the newest
	}
	taken := map[*App]*left{}
	needCount := p.count + 1 - p.limits.MaxRequests
	needBytes := p.bytes + cost - p.limits.MaxBytes
	var out []*Hold
	for (p.limits.MaxRequests > 0 && needCount > 0) || (p.limits.MaxBytes > 0 && needBytes > 0) {
		var (
			worst *left
			best  float64
		)
		for app, h := range p.holding {
			if app == a {
				continue
			}
			l := taken[app]
			if l == nil {
				l = &left{count: h.count, bytes: h.bytes, next: h.tail}
				taken[app] = l
			}
			if l.next == nil {
				continue
			}
			if s := p.share(l.count, l.bytes); s > fair && s > best {
				worst, best = l, s
			}
		}
		if worst == nil {
			return nil, false
		}
		v := worst.next
		worst.next = v.prev
		worst.count--
		worst.bytes -= v.cost
		needCount--
		needBytes -= v.cost
		out = append(out, v)
	}
	return out, true
}

// add records a new hold of a. p.mu held.
func (p *Pool) add(a *App, cost int64, evict func()) *Hold {
	h := &Hold{pool: p, app: a, cost: cost, evict: evict}
	ah := p.holding[a]
	if ah == nil {
		ah = &appHolds{}
		p.holding[a] = ah
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
	p.count++
	p.bytes += cost
	return h
}

// remove unlinks h. p.mu held.
func (p *Pool) remove(h *Hold) {
	h.gone = true
	ah := p.holding[h.app]
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
	p.count--
	p.bytes -= h.cost
	if ah.count == 0 {
		delete(p.holding, h.app)
	}
}
