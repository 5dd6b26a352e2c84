package endpoints

import (
	"context"
	"hash/fnv"
	"math/bits"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// servicesPerWatch is the target number of Services per watch: a namespace with n tracked Services
// gets the smallest power of two of watches not below n/servicesPerWatch, and a Service goes to
// watch FNV-1a(name) mod that. Adding or removing a Service then re-lists one watch's slices, and the
// label selector stays far below URL length limits.
const servicesPerWatch = 64

// watchKey names one watch: a namespace and a bucket of its Services.
type watchKey struct {
	namespace string
	bucket    uint32
}

// sliceWatch is a watch on the EndpointSlices of some Services of one namespace: a Reflector that
// lists and watches them into store. It is not a SharedIndexInformer: an informer adds a DeltaFIFO, a
// processor with a 16 KiB ring buffer per handler and six more goroutines to the Reflector, which
// this cache needs none of (it has one handler and reads the store under its own lock). With
// hundreds of watches (one per 64 routed Services of a namespace) that was most of the interceptor's
// memory per app.
type sliceWatch struct {
	key      watchKey
	services []string // sorted; the label selector's values
	store    *sliceStore
	cancel   context.CancelFunc
}

func (w *sliceWatch) covers(service string) bool {
	_, ok := slices.BinarySearch(w.services, service)
	return ok
}

// bucketsFor returns the number of watches for n Services.
func bucketsFor(n int) uint32 {
	want := (n + servicesPerWatch - 1) / servicesPerWatch
	if want <= 1 {
		return 1
	}
	return 1 << bits.Len(uint(want-1))
}

func bucketOf(service string, buckets uint32) uint32 {
	h := fnv.New32a()
	h.Write([]byte(service))
	return h.Sum32() % buckets
}

// reconcileWatches starts a watch for every bucket whose Services changed and stops the watches no
// longer needed, in namespaces (nil: every namespace). A changed watch replaces the old one only once
// it has listed its slices (promote). c.mu held.
func (c *Cache) reconcileWatches(namespaces map[string]struct{}) {
	in := func(ns string) bool {
		_, ok := namespaces[ns]
		return namespaces == nil || ok
	}
	perNS := map[string]int{}
	for sn := range c.ports {
		if in(sn.namespace) {
			perNS[sn.namespace]++
		}
	}
	if namespaces == nil {
		clear(c.nsBucket)
	}
	for ns := range namespaces {
		delete(c.nsBucket, ns)
	}
	for ns, n := range perNS {
		c.nsBucket[ns] = bucketsFor(n)
	}
	want := map[watchKey][]string{}
	for sn := range c.ports {
		if in(sn.namespace) {
			wk := watchKey{sn.namespace, bucketOf(sn.name, c.nsBucket[sn.namespace])}
			want[wk] = append(want[wk], sn.name)
		}
	}
	for _, ws := range []map[watchKey]*sliceWatch{c.pending, c.active} {
		for wk, w := range ws {
			if _, ok := want[wk]; !ok && in(wk.namespace) {
				w.cancel()
				delete(ws, wk)
			}
		}
	}
	for wk, services := range want {
		slices.Sort(services)
		p := c.pending[wk]
		if p != nil && slices.Equal(p.services, services) {
			continue // already being listed
		}
		if p != nil {
			p.cancel()
			delete(c.pending, wk)
		}
		if a := c.active[wk]; a != nil && slices.Equal(a.services, services) {
			continue // back to what the watch in use covers
		}
		if w := c.startWatch(wk, services); w != nil {
			c.pending[wk] = w
		}
	}
}

// startWatch starts a watch on the slices of services in wk's namespace; it takes over once it has
// listed them (onList). c.mu held.
func (c *Cache) startWatch(wk watchKey, services []string) *sliceWatch {
	req, err := labels.NewRequirement(discoveryv1.LabelServiceName, selection.In, services)
	if err != nil {
		// Service names come from validated routing entries; this cannot happen.
		c.log.Error(err, "cannot watch EndpointSlices", "namespace", wk.namespace, "services", services)
		return nil
	}
	// Never the operator's Serve-mode redirect slices: they list the interceptors themselves.
	notRedirect, err := labels.NewRequirement(discoveryv1.LabelManagedBy, selection.NotEquals, []string{RedirectManagedBy})
	if err != nil {
		c.log.Error(err, "cannot watch EndpointSlices", "namespace", wk.namespace)
		return nil
	}
	selector := labels.NewSelector().Add(*req, *notRedirect).String()
	ctx, cancel := context.WithCancel(c.ctx)
	api := c.cs.DiscoveryV1().EndpointSlices(wk.namespace)
	// As client-go's informers do: a client that cannot stream the initial list (a fake) is
	// listed, the others stream it.
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return api.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return api.Watch(ctx, o)
		},
	}, c.cs)
	w := &sliceWatch{key: wk, services: services, cancel: cancel}
	w.store = newSliceStore(func(services []string) { c.onSlice(w, services) }, func() { c.onList(w) })
	r := cache.NewReflectorWithOptions(lw, &discoveryv1.EndpointSlice{}, w.store,
		cache.ReflectorOptions{Name: "EndpointSlices " + wk.namespace + " " + strconv.FormatUint(uint64(wk.bucket), 10)})
	c.log.V(1).Info("watching EndpointSlices", "namespace", wk.namespace, "bucket", wk.bucket, "services", len(services))
	c.wg.Go(func() { r.RunWithContext(ctx) })
	return w
}

// onList handles a complete list of w's slices (the first, or a re-list after the watch expired): the
// first makes w the watch in use; a later one recomputes every Service it covers, since slices may
// have gone while it was not watching.
func (c *Cache) onList(w *sliceWatch) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active[w.key] != w {
		c.promoteLocked(w)
		return
	}
	for _, svc := range w.services {
		c.recompute(w, w.key.namespace, svc)
	}
}

// promoteLocked makes a watch that has listed its slices the one in use, stops the watch it replaces
// and recomputes the endpoints of every Service it covers. c.mu held.
func (c *Cache) promoteLocked(w *sliceWatch) {
	if c.pending[w.key] != w {
		return // replaced or stopped while listing
	}
	delete(c.pending, w.key)
	if old := c.active[w.key]; old != nil {
		old.cancel()
	}
	c.active[w.key] = w
	for _, svc := range w.services {
		c.recompute(w, w.key.namespace, svc)
	}
	c.checkSynced()
}

// onSlice recomputes the endpoints of the Services of a changed slice (before and after the
// change), if the watch that saw the change is in use.
func (c *Cache) onSlice(w *sliceWatch, services []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.active[w.key] != w {
		return
	}
	for _, svc := range services {
		c.recompute(w, w.key.namespace, svc)
	}
}

// recompute publishes the ready endpoints of every tracked port of a Service from w's store. c.mu held.
func (c *Cache) recompute(w *sliceWatch, namespace, service string) {
	ports := c.ports[serviceName{namespace, service}]
	if len(ports) == 0 {
		return
	}
	keys := c.keys.Load()
	for _, p := range ports {
		k := ServiceKey{Namespace: namespace, Service: service, PortName: p}
		if ks, _ := keys.Get(k); ks != nil {
			ready, pending := w.store.list(k)
			c.update(ks, ready, pending)
		}
	}
}

// watchOf returns the watch in use that covers a Service, or nil. c.mu held.
func (c *Cache) watchOf(namespace, service string) *sliceWatch {
	n, ok := c.nsBucket[namespace]
	if !ok {
		return nil
	}
	if w := c.active[watchKey{namespace, bucketOf(service, n)}]; w != nil && w.covers(service) {
		return w
	}
	return nil
}

// checkSynced latches synced once every watch has listed its slices after the first Track. c.mu held.
func (c *Cache) checkSynced() {
	if !c.synced && c.tracked && c.ctx != nil && len(c.pending) == 0 {
		c.synced = true
	}
}
