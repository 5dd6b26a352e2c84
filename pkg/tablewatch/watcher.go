// Package tablewatch keeps an interceptor's routing table current: it watches the routing-table
// ConfigMaps of the install namespace, re-reads them from the API server on a timer, and never replaces
// a good table with a corrupt, partial or unreadable one.
package tablewatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/httpscale/httpscale/pkg/routing"
)

// Defaults for Options.
const (
	// DefaultResync is how often the whole table is re-read from the API server, so that a watch that
	// silently stopped delivering events cannot leave a replica on an old table for longer.
	DefaultResync = time.Minute
	// DefaultReadTimeout bounds one direct read of the ConfigMaps.
	DefaultReadTimeout = 30 * time.Second
)

// Options configure a Watcher.
type Options struct {
	// Namespace holds the routing-table ConfigMaps (the install namespace). Required.
	Namespace string
	// Base is the head ConfigMap's name and the value of the routing.LabelTable label on every piece;
	// empty means routing.DefaultBaseName.
	Base string
	// Resync is the period of the full re-read from the API server; zero means DefaultResync.
	Resync time.Duration
	// ReadTimeout bounds each direct read; zero means DefaultReadTimeout.
	ReadTimeout time.Duration
	// Log receives load results; the zero Logger discards them.
	Log logr.Logger
	// Registerer receives the Watcher's metrics; nil means controller-runtime's registry (served on
	// the manager's metrics endpoint). Two Watchers cannot share one Registerer.
	Registerer prometheus.Registerer

	// StaleAfter, when positive, makes Ready fail while the API server has held a newer table head
	// than the watch delivered for longer than it (see stale.go); zero turns the probe off.
	StaleAfter time.Duration
	// Probe is the client of the staleness probe: it should have a connection of its own
	// (ProbeClient). Nil: New builds one, NewForClient uses the watch's client.
	Probe kubernetes.Interface
}

// Status describes the table a Watcher serves and how the last load went.
type Status struct {
	// Version of the table served; empty before the first load.
	Version string
	// Entries in the table served.
	Entries int
	// LoadedAt is when the table served was loaded; zero before the first load.
	LoadedAt time.Time
	// LastError is the error of the last load attempt when it failed: the ConfigMaps hold a table that
	// could not be loaded and Version is older than what they describe. Nil when the last attempt
	// succeeded.
	LastError error
}

// Watcher is a controller-runtime Runnable that keeps the routing table of one namespace loaded. It
// caches only the ConfigMaps of that namespace labelled routing.LabelTable=<base>.
//
// Table, Version, Status and Ready are safe for concurrent use and never block; Table is one atomic
// load and is meant for the request path.
type Watcher struct {
	cs          kubernetes.Interface
	namespace   string
	base        string
	selector    string
	resync      time.Duration
	readTimeout time.Duration
	log         logr.Logger
	metrics     *metrics

	table   atomic.Pointer[routing.Table]
	status  atomic.Pointer[Status]
	started atomic.Bool
	kick    chan struct{}

	// mu serialises change callbacks with their registration, so every callback sees tables in order.
	mu        sync.Mutex
	callbacks []func(*routing.Table)

	// stale is nil unless Options.StaleAfter is set; probe asks the API server for it.
	stale      *staleness
	staleAfter time.Duration
	probe      kubernetes.Interface
	now        func() time.Time

	// Owned by the Start goroutine.
	goodHeadRV string
	// reader decodes only the shards that changed since the table served and shares the rest.
	reader routing.Reader
}

// New returns a Watcher reading through a client built from cfg. Add it to a manager (mgr.Add) or call
// Start yourself.
func New(cfg *rest.Config, opts Options) (*Watcher, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("building Kubernetes client for the routing table: %w", err)
	}
	if opts.StaleAfter > 0 && opts.Probe == nil {
		if opts.Probe, err = ProbeClient(cfg); err != nil {
			return nil, err
		}
	}
	return NewForClient(cs, opts)
}

// NewForClient returns a Watcher reading through cs.
func NewForClient(cs kubernetes.Interface, opts Options) (*Watcher, error) {
	if opts.Namespace == "" {
		return nil, errors.New("routing table watcher: namespace is required")
	}
	if opts.Base == "" {
		opts.Base = routing.DefaultBaseName
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.Registerer == nil {
		opts.Registerer = ctrlmetrics.Registry
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	w := &Watcher{
		cs:          cs,
		namespace:   opts.Namespace,
		base:        opts.Base,
		selector:    routing.LabelTable + "=" + opts.Base,
		resync:      opts.Resync,
		readTimeout: opts.ReadTimeout,
		log:         opts.Log,
		metrics:     m,
		kick:        make(chan struct{}, 1),
		now:         time.Now,
	}
	if opts.StaleAfter > 0 {
		w.stale, w.staleAfter, w.probe = &staleness{bound: opts.StaleAfter}, opts.StaleAfter, opts.Probe
		if w.probe == nil {
			w.probe = cs
		}
	}
	w.status.Store(&Status{})
	return w, nil
}

// Table returns the routing table served, or nil before the first successful load. The table is
// immutable and shared. Cost: one atomic load.
func (w *Watcher) Table() *routing.Table { return w.table.Load() }

// Version returns the version of the table served; empty before the first successful load.
func (w *Watcher) Version() string { return w.table.Load().Version() }

// Status returns what the Watcher serves and the outcome of its last load attempt.
func (w *Watcher) Status() Status { return *w.status.Load() }

// Ready returns nil once a table has been loaded, else an error saying why not; with StaleAfter, it
// also fails while the table is stale (see stale.go). It suits a readiness check: a replica without
// a routing table cannot route anything, and one whose watch stopped routes with an old one.
func (w *Watcher) Ready() error {
	if w.table.Load() != nil {
		if w.stale != nil {
			return w.stale.err(w.now())
		}
		return nil
	}
	if err := w.status.Load().LastError; err != nil {
		return fmt.Errorf("no routing table loaded yet: %w", err)
	}
	return errors.New("no routing table loaded yet")
}

// ReadyCheck is Ready as a controller-runtime health check: mgr.AddReadyzCheck("routing-table",
// w.ReadyCheck).
func (w *Watcher) ReadyCheck(*http.Request) error { return w.Ready() }

// OnChange registers fn to be called with every newly loaded table whose version differs from the one
// served before, and at once with the current table if one is loaded. Calls are serialised and in load
// order. A new table is handed to the callbacks before Table returns it, so a callback can prepare for
// routes (for example, start watching their endpoints) before requests are routed by them. fn must be
// quick and must not call OnChange.
func (w *Watcher) OnChange(fn func(*routing.Table)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.callbacks = append(w.callbacks, fn)
	if t := w.table.Load(); t != nil {
		fn(t)
	}
}

// NeedLeaderElection reports false: every interceptor replica routes.
func (w *Watcher) NeedLeaderElection() bool { return false }

// Start loads the table, then keeps it current until ctx ends: reloads from the informer's cache
// after every change to the labelled ConfigMaps, and from a direct API read every Resync. It returns
// nil when ctx ends. A Watcher can be started once.
func (w *Watcher) Start(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("routing table watcher already started")
	}
	log := w.log.WithValues("namespace", w.namespace, "base", w.base)
	inf := coreinformers.NewFilteredConfigMapInformer(w.cs, w.namespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = w.selector })
	if err := inf.SetTransform(stripManagedFields); err != nil {
		return fmt.Errorf("configuring routing table informer: %w", err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.poke() },
		UpdateFunc: func(any, any) { w.poke() },
		DeleteFunc: func(any) { w.poke() },
	}); err != nil {
		return fmt.Errorf("configuring routing table informer: %w", err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wg.Go(func() { inf.RunWithContext(ctx) })
	if w.stale != nil {
		wg.Go(func() { w.probeLoop(ctx, log) })
	}
	wg.Go(func() {
		// Events handled before the cache is complete are ignored (the cache may lack shards), so load
		// once more as soon as it is.
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			w.poke()
		}
	})

	// The first load reads the API server directly: it does not wait for the informer, and it works
	// even when the watch does not.
	w.readAPI(ctx, log)
	ticker := time.NewTicker(w.resync)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.kick:
			if inf.HasSynced() {
				w.loadFromCache(inf.GetStore(), log)
			}
		case <-ticker.C:
			w.readAPI(ctx, log)
		}
	}
}

// poke asks the Start loop to reload from the cache; bursts of events coalesce into one reload.
func (w *Watcher) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *Watcher) loadFromCache(store cache.Store, log logr.Logger) {
	var head *corev1.ConfigMap
	objs := store.List()
	cms := make([]*corev1.ConfigMap, 0, len(objs))
	for _, o := range objs {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			continue
		}
		cms = append(cms, cm)
		if cm.Name == w.base {
			head = cm
		}
	}
	w.load("watch", head, cms, log)
}

// readAPI reloads from a direct read: the head alone when it is the one served (a small GET, the
// usual case), every labelled ConfigMap otherwise.
func (w *Watcher) readAPI(parent context.Context, log logr.Logger) {
	ctx, cancel := context.WithTimeout(parent, w.readTimeout)
	defer cancel()
	if w.goodHeadRV != "" {
		head, err := w.cs.CoreV1().ConfigMaps(w.namespace).Get(ctx, w.base, metav1.GetOptions{})
		if err == nil && head.ResourceVersion == w.goodHeadRV && head.Labels[routing.LabelTable] == w.base {
			w.succeed()
			return
		}
	}
	list, err := w.cs.CoreV1().ConfigMaps(w.namespace).List(ctx, metav1.ListOptions{LabelSelector: w.selector})
	if err != nil {
		if parent.Err() != nil {
			return // shutting down
		}
		w.fail(reasonRead, fmt.Errorf("listing ConfigMaps %s in %s: %w", w.selector, w.namespace, err), log)
		return
	}
	var head *corev1.ConfigMap
	cms := make([]*corev1.ConfigMap, len(list.Items))
	for i := range list.Items {
		cms[i] = &list.Items[i]
		if cms[i].Name == w.base {
			head = cms[i]
		}
	}
	w.load("read", head, cms, log)
}

// load decodes the table head describes and serves it, unless it is the table already served, older
// than it, or broken. Only the shards whose content changed since the table served are decoded; the
// new table shares everything else with it (routing.Reader).
func (w *Watcher) load(source string, head *corev1.ConfigMap, cms []*corev1.ConfigMap, log logr.Logger) {
	if head != nil && w.stale != nil {
		w.reportStaleness(w.stale.headDelivered(head.ResourceVersion, w.now()), log)
	}
	if head != nil && w.goodHeadRV != "" {
		if head.ResourceVersion == w.goodHeadRV {
			w.succeed()
			return
		}
		if olderResourceVersion(head.ResourceVersion, w.goodHeadRV) {
			// The informer's cache lags behind an earlier direct read; it will catch up.
			log.V(1).Info("ignoring an older routing table head", "source", source,
				"resourceVersion", head.ResourceVersion, "servedResourceVersion", w.goodHeadRV)
			return
		}
	}
	if head == nil && w.table.Load() == nil {
		w.waitForFirstTable(log)
		return
	}
	t, err := w.reader.FromConfigMaps(head, cms)
	if err != nil {
		w.fail(reasonOf(err), err, log)
		return
	}
	w.goodHeadRV = head.ResourceVersion
	w.publish(t, source, log)
}

func (w *Watcher) publish(t *routing.Table, source string, log logr.Logger) {
	old := w.table.Load()
	w.status.Store(&Status{Version: t.Version(), Entries: t.Len(), LoadedAt: time.Now()})
	w.metrics.loaded(old.Version(), t.Version(), t.Len())
	if old != nil && old.Version() == t.Version() {
		return
	}
	w.mu.Lock()
	for _, fn := range w.callbacks {
		fn(t)
	}
	w.table.Store(t)
	w.mu.Unlock()
	log.Info("routing table loaded", "source", source, "version", t.Version(), "entries", t.Len(),
		"previousVersion", old.Version())
}

// succeed records that the stored table is the one served.
func (w *Watcher) succeed() {
	s := *w.status.Load()
	if s.LastError == nil {
		return
	}
	s.LastError = nil
	w.status.Store(&s)
	w.metrics.failing.Set(0)
}

// waitForFirstTable records that no table was ever written: the normal state of a fresh install
// until the operator writes its first one. It is not a load error (nothing is broken, nothing to
// act on), so it is logged once at info level and counts no error; Ready reports it.
func (w *Watcher) waitForFirstTable(log logr.Logger) {
	s := *w.status.Load()
	if errors.Is(s.LastError, errNoTableYet) {
		return
	}
	s.LastError = fmt.Errorf("%w: no ConfigMap %s/%s", errNoTableYet, w.namespace, w.base)
	w.status.Store(&s)
	log.Info("waiting for the operator to write the first routing table")
}

// errNoTableYet is the state before the operator wrote the first routing table.
var errNoTableYet = errors.New("the operator has not written a routing table yet")

func (w *Watcher) fail(reason string, err error, log logr.Logger) {
	w.metrics.loadErrors.WithLabelValues(reason).Inc()
	w.metrics.failing.Set(1)
	s := *w.status.Load()
	prev := s.LastError
	s.LastError = err
	w.status.Store(&s)
	// Log a failure once, and its repetitions at debug level: a broken table is reported on every
	// event until it is fixed.
	msg := err.Error()
	if prev != nil && prev.Error() == msg {
		log.V(1).Info("routing table still not loadable", "reason", reason, "servedVersion", s.Version, "error", msg)
		return
	}
	log.Error(err, "routing table not loaded; keeping the table served", "reason", reason, "servedVersion", s.Version)
}

// stripManagedFields drops metadata the Watcher never reads before the informer stores an object.
func stripManagedFields(obj any) (any, error) {
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		cm.ManagedFields = nil
	}
	return obj, nil
}
