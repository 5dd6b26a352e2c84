package proxy

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/httpscale/httpscale/pkg/coldstart"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/pmap"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

// routes are the per-app states of one routing table.
type routes struct {
	table *routing.Table
	apps  pmap.Map[*routing.Entry, *app]
	byKey pmap.Map[string, *app]
}

// app is one routed app's state for one routing table.
type app struct {
	entry          *routing.Entry
	key            string
	counts         *queue.App
	metrics        *Metrics
	m              atomic.Pointer[appMetrics] // nil until the app's first request, see series
	target         *backend
	fallback       *backend                             // nil without a fallback
	static         map[*routing.StaticRoute]*backend    // the static routes forwarded to a Service
	session        *sessionCookie                       // nil without session persistence
	prefixHeaders  map[*routing.PathRewrite]http.Header // X-Forwarded-Prefix of each path rewrite
	zoneAware      bool
	readiness      time.Duration
	request        time.Duration
	responseHeader time.Duration
	queueLimit     int64
}

// coldApp returns what the app's cold starts need to know of it. Made per cold start rather than
// kept with every app: most apps of a large fleet are never woken by this replica.
func (a *app) coldApp() coldstart.App {
	c := coldstart.App{Key: a.key, Target: a.target.key, Probe: a.entry.ColdStart.Probe, Hold: a.readiness}
	if a.entry.ViaService {
		// The Service's address reaches only the pods the kubelet found ready: a pod that answered
		// a probe would not get the requests sent there.
		c.NoProbe = "forwarding.viaService (the Service's address reaches only pods the kubelet found ready)"
	}
	return c
}

// current returns the routes of the table to serve with, building them when the table changed.
// Cost on the hot path: two atomic loads.
func (p *Proxy) current() *routes {
	t := p.opts.Tables.Table()
	if rt := p.routes.Load(); rt != nil && rt.table == t {
		return rt
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if rt := p.routes.Load(); rt != nil && rt.table == t {
		return rt
	}
	rt := p.prepared.Load()
	if rt == nil || rt.table != t {
		rt = p.build(t)
	} else {
		p.prepared.Store(nil)
	}
	p.publish(rt)
	return rt
}

// TableChanged builds the per-app state of t before t is served, so the first requests routed by a
// new table do not pay for it; call it from the table watch's change callback. For a table derived
// from the one before by an incremental decode (routing.Table.Diff) it costs what the change costs;
// otherwise O(apps). It does not block requests.
func (p *Proxy) TableChanged(t *routing.Table) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rt := p.routes.Load(); rt != nil && rt.table == t {
		return
	}
	old := p.prepared.Load()
	if old == nil {
		old = p.routes.Load()
	}
	rt := p.build(t)
	p.prepared.Store(rt)
	if old == nil {
		p.syncRegistry()
		return
	}
	// Drop the counters of apps that neither the served nor the prepared routes have any more (an app
	// of a prepared table that a newer one dropped before it was served); the usual single change
	// drops none: the served routes still have what the new table removed.
	if removed, _, ok := t.Diff(old.table); ok {
		p.opts.Registry.Remove(p.gone(removed, rt, p.routes.Load()))
	} else if dropsApps(old, rt) {
		p.syncRegistry()
	}
}

// gone returns the keys of removed that none of keep (nil ones ignored) routes.
func (p *Proxy) gone(removed []*routing.Entry, keep ...*routes) []string {
	var out []string
	for _, e := range removed {
		k := e.Key()
		kept := false
		for _, rt := range keep {
			if rt != nil {
				if _, ok := rt.byKey.Get(k); ok {
					kept = true
					break
				}
			}
		}
		if !kept {
			out = append(out, k)
		}
	}
	return out
}

// dropsApps reports whether an app of old is not in rt.
func dropsApps(old, rt *routes) bool {
	if old.byKey.Len() > rt.byKey.Len() {
		return true
	}
	for k := range old.byKey.All() {
		if _, ok := rt.byKey.Get(k); !ok {
			return true
		}
	}
	return false
}

// build returns the routes of t, carrying state over from the newest routes built before (the
// prepared ones, else the ones served). Tables derived from one another share the entries that did
// not change (routing.Reader): an app whose entry is the very same is carried over as is (counters,
// backends, series). When t was derived from the old routes' table in one step (routing.Table.Diff),
// the new routes are derived from the old ones too and share every part the change did not touch,
// so a version costs what its change costs; otherwise every app is visited. Callers hold p.mu.
func (p *Proxy) build(t *routing.Table) *routes {
	old := p.prepared.Load()
	if old == nil {
		old = p.routes.Load()
	}
	var (
		apps  *pmap.Builder[*routing.Entry, *app]
		byKey *pmap.Builder[string, *app]
		fresh []*routing.Entry
	)
	if removed, added, ok := t.Diff(tableOf(old)); ok {
		apps, byKey = old.apps.Edit(), old.byKey.Edit()
		for _, e := range removed {
			apps.Delete(e)
			if a, _ := byKey.Get(e.Key()); a != nil && a.entry == e {
				byKey.Delete(e.Key())
			}
		}
		fresh = added
	} else {
		apps = pmap.New[*routing.Entry, *app](pmap.Pointer[routing.Entry]).EditSized(t.Len())
		byKey = pmap.New[string, *app](pmap.String).EditSized(t.Len())
		for e := range t.All() {
			if old != nil {
				if a, _ := old.apps.Get(e); a != nil {
					apps.Set(e, a)
					byKey.Set(a.key, a)
					continue
				}
			}
			fresh = append(fresh, e)
		}
	}
	// Create the counters of the table's new apps at once.
	keys := make([]string, len(fresh))
	for i, e := range fresh {
		keys[i] = e.Key()
	}
	p.opts.Registry.Add(keys)
	for _, e := range fresh {
		a := p.newApp(e, old)
		apps.Set(e, a)
		byKey.Set(a.key, a)
	}
	rt := &routes{table: t, apps: apps.Map(), byKey: byKey.Map()}
	p.log.V(1).Info("routing table prepared", "version", t.Version(), "apps", rt.byKey.Len(), "new", len(fresh))
	return rt
}

func tableOf(rt *routes) *routing.Table {
	if rt == nil {
		return nil
	}
	return rt.table
}

// publish serves rt and forgets the counters and metrics of apps that neither rt nor a prepared
// table routes. Callers hold p.mu.
func (p *Proxy) publish(rt *routes) {
	old := p.routes.Swap(rt)
	prep := p.prepared.Load()
	if old != nil {
		if removed, _, ok := rt.table.Diff(old.table); ok {
			gone := p.gone(removed, rt, prep)
			p.opts.Registry.Remove(gone)
			for _, key := range gone {
				p.forget(key)
			}
			return
		}
	}
	p.syncRegistry()
	if old == nil {
		return
	}
	for key := range old.byKey.All() {
		_, kept := rt.byKey.Get(key)
		if !kept && prep != nil {
			_, kept = prep.byKey.Get(key)
		}
		if !kept {
			p.forget(key)
		}
	}
}

// forget drops the metric series of an app that left the routing table.
func (p *Proxy) forget(key string) {
	p.opts.Metrics.forget(key)
	if t := p.opts.ColdStarts; t != nil {
		t.Forget(key)
	}
}

// syncRegistry keeps the counters of the apps of the served and the prepared routes, so that the
// counters an app's state points at stay the ones the admin port reports. O(apps). Callers hold p.mu.
func (p *Proxy) syncRegistry() {
	var keys []string
	for _, rt := range []*routes{p.routes.Load(), p.prepared.Load()} {
		if rt != nil {
			for k := range rt.byKey.All() {
				keys = append(keys, k)
			}
		}
	}
	p.opts.Registry.Sync(keys)
}

func (p *Proxy) newApp(e *routing.Entry, old *routes) *app {
	key := e.Key()
	a := &app{
		entry:          e,
		key:            key,
		counts:         p.opts.Registry.App(key),
		zoneAware:      p.opts.ZoneAware,
		readiness:      capped(orDefault(e.Timeouts.Readiness, p.opts.ReadinessTimeout), p.opts.MaxReadinessTimeout),
		request:        capped(orDefault(e.Timeouts.Request, p.opts.RequestTimeout), p.opts.MaxRequestTimeout),
		responseHeader: capped(orDefault(e.Timeouts.ResponseHeader, p.opts.ResponseHeaderTimeout), p.opts.MaxRequestTimeout),
		queueLimit:     int64(p.opts.QueueLimit),
	}
	a.metrics = p.opts.Metrics
	if e.ZoneAware != nil {
		a.zoneAware = *e.ZoneAware
	}
	if e.ColdStart.QueueLimit > 0 {
		a.queueLimit = int64(e.ColdStart.QueueLimit)
	}
	a.queueLimit = capped(a.queueLimit, int64(p.opts.MaxQueueLimit))
	var prev *app
	if old != nil {
		prev, _ = old.byKey.Get(key)
	}
	a.target = p.newBackend(e.Namespace, e.Target(), e.ViaService, prev, func(o *app) *backend { return o.target })
	if fb := e.ColdStart.Fallback; fb != nil {
		a.fallback = p.newBackend(e.Namespace, *fb, true, prev, func(o *app) *backend { return o.fallback })
	}
	if e.Session != nil {
		a.session = newSessionCookie(e)
	}
	if len(e.Rewrites) > 0 {
		a.prefixHeaders = prefixHeaders(e.Rewrites)
	}
	for i := range e.Static {
		if sr := &e.Static[i]; sr.Backend != nil {
			if a.static == nil {
				a.static = map[*routing.StaticRoute]*backend{}
			}
			// Forwarded to the Service's address: no endpoint state to carry over.
			a.static[sr] = p.newBackend(e.Namespace, *sr.Backend, true, nil, nil)
		}
	}
	return a
}

// newBackend returns the backend state of b, reusing the previous table's (round-robin position and
// endpoints marked bad) when it describes the same destination. direct says whether requests may
// be forwarded to the Service's address (backend.serviceAddr).
func (p *Proxy) newBackend(ns string, b routing.Backend, direct bool, prev *app, pick func(*app) *backend) *backend {
	nb := &backend{
		key:      endpoints.ServiceKey{Namespace: ns, Service: b.Service, PortName: b.PortName},
		protocol: b.Protocol,
	}
	if direct {
		nb.serviceAddr = b.Addr(ns, p.opts.ClusterDomain)
	}
	if prev != nil {
		if ob := pick(prev); ob != nil && ob.key == nb.key && ob.protocol == nb.protocol && ob.serviceAddr == nb.serviceAddr {
			return ob
		}
	}
	return nb
}

// series returns where the app's outcomes are counted, resolving it on the app's first request: an
// app that never receives a request costs nothing there. Cost after the first call: one atomic load.
func (a *app) series() *appMetrics {
	if m := a.m.Load(); m != nil {
		return m
	}
	// Concurrent first requests resolve the same counters (the Tally is allocated once, and
	// WithLabelValues is idempotent).
	// This table's hold-queue limit, exported with the app's counters (a new table makes new apps);
	// stored before forApp allocates the Tally, which makes the collector export it.
	a.counts.SetQueueLimit(a.queueLimit)
	m := a.metrics.forApp(a.key, a.counts)
	a.m.Store(m)
	return m
}

// capped returns v, or limit when limit is positive and v is above it or 0 (none): a cap bounds an
// app without a bound of its own too.
func capped[T int64 | time.Duration](v, limit T) T {
	if limit > 0 && (v > limit || v <= 0) {
		return limit
	}
	return v
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
