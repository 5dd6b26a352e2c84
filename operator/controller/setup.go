package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/scheduler"
	"github.com/httpscale/httpscale/operator/tenancy"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/appkey"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Field indexes on HTTPScaledObjects.
const (
	indexServices = "httpscale.dev/services" // Services an object refers to
	indexTarget   = "httpscale.dev/target"   // "<group>/<Kind>/<name>" of the workload it scales
	indexServe    = "httpscale.dev/serve"    // "true" for objects in Serve mode
)

// watchedTargets are the workload kinds whose creation and deletion re-validate the objects that scale
// them at once; other kinds (custom resources) are checked again every invalidRecheck.
var watchedTargets = []client.Object{&appsv1.Deployment{}, &appsv1.StatefulSet{}}

// Options configure the operator's controllers.
type Options struct {
	// Namespace holds the routing table and the interceptor admin Service.
	Namespace string
	// WatchNamespaces limits the namespaces whose HTTPScaledObjects are reconciled; empty means all.
	WatchNamespaces []string
	// TableName is the routing table's head ConfigMap name.
	TableName string
	// ScalerAddress goes into every ScaledObject's external-push trigger.
	ScalerAddress string
	// ScalerTLSAuthentication, when set, is the ClusterTriggerAuthentication every generated
	// trigger uses to reach the scaler over mutual TLS (see withScalerTLS).
	ScalerTLSAuthentication string
	// InterceptorSelector selects the EndpointSlices of the interceptor admin Service.
	InterceptorSelector labels.Selector
	// InterceptorAdminPort names the admin port in those EndpointSlices.
	InterceptorAdminPort string
	ProbeInterval        time.Duration
	ProbeTimeout         time.Duration
	// ProbeTransport carries the propagation probes; nil means a clone of http.DefaultTransport. Tests
	// use it to reach fake interceptors on loopback behind EndpointSlice addresses (which may not be
	// loopback).
	ProbeTransport http.RoundTripper
	// TableDebounce and TableMaxDelay pace routing-table writes (see TableWriter).
	TableDebounce time.Duration
	TableMaxDelay time.Duration
	// MaxShardBytes bounds one compressed shard; 0 means routing.DefaultMaxShardBytes.
	MaxShardBytes int
	// MaxShardEntries bounds the entries of one shard; 0 means routing.DefaultMaxShardEntries.
	MaxShardEntries int
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// Schedules runs spec.schedules in every reconcile; nil disables scheduled scaling.
	Schedules *scheduler.Scheduler
	// ClusterDomain is the cluster's DNS domain, for the Service host names Serve mode routes.
	ClusterDomain string
	// ServePortMin and ServePortMax bound the Serve ports given to Serve-mode apps (serveports.go);
	// zero means DefaultServePortMin-DefaultServePortMax.
	ServePortMin, ServePortMax int32
	// InterceptorServiceAccount is the interceptor's ServiceAccount in Namespace, which SecretGrants
	// lets read the Secrets spec.tls names; empty grants nothing.
	InterceptorServiceAccount string
	// Fleet is the fleet this operator serves; "" means v1.DefaultFleet. Objects of other fleets are
	// left to their operators.
	Fleet string
	// Identity names this replica in its fleet's Lease (the pod's name); "" means the host name.
	Identity string
	// FleetLeaseInterval paces the fleet Lease's renewal and the list of every fleet's; zero means 15 s.
	FleetLeaseInterval time.Duration
	// HostClaimRetention is how long an unused HostClaim the operator created is kept; zero keeps it
	// for good.
	HostClaimRetention time.Duration
	// ClaimSweepInterval paces the ClaimKeeper; zero means a minute.
	ClaimSweepInterval time.Duration
	// MaxEntryBytes is the per-object budget of a routing entry's stored form; zero means
	// routing.DefaultMaxEntryBytes.
	MaxEntryBytes int
	// KEDACheckInterval paces the check for KEDA's CRDs while they are missing; zero means 20 s.
	KEDACheckInterval time.Duration
}

// CacheOptions narrows the manager's cache to what the operator reads: HTTPScaledObjects and the
// objects they refer to in the watched namespaces, and the interceptor admin EndpointSlices in the
// install namespace only (so the operator needs no cluster-wide EndpointSlice access).
func CacheOptions(o Options) cache.Options {
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&discoveryv1.EndpointSlice{}: {
			Namespaces: map[string]cache.Config{o.Namespace: {}},
			Label:      o.InterceptorSelector,
		},
	},
		// Nothing here reads managedFields, and they were a fifth of the operator's heap at 50,000
		// objects (HTTPScaledObjects and ScaledObjects each carry several field managers). Objects
		// written back from the cache (Update, merge patches) carry none, which the API server reads
		// as "keep the stored ones".
		DefaultTransform: cache.TransformStripManagedFields(),
	}
	if len(o.WatchNamespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.WatchNamespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// Setup adds the table writer, the propagation prober and the HTTPScaledObject controller to mgr,
// whose cache should be built with CacheOptions(o). It returns the writer so that callers (tests,
// benchmarks) can observe writes.
func Setup(mgr manager.Manager, o Options, log logr.Logger) (*TableWriter, error) {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1.HTTPScaledObject{}, indexServices, func(obj client.Object) []string {
		hso := obj.(*v1.HTTPScaledObject)
		names := []string{hso.Spec.ScaleTargetRef.Service}
		if cs := hso.Spec.ColdStart; cs != nil && cs.Fallback != nil {
			names = append(names, cs.Fallback.Service)
		}
		for _, sr := range hso.Spec.StaticRoutes {
			if sr.Service != nil {
				names = append(names, sr.Service.Name)
			}
		}
		return names
	}); err != nil {
		return nil, fmt.Errorf("indexing HTTPScaledObjects by Service: %w", err)
	}
	if err := idx.IndexField(ctx, &v1.HTTPScaledObject{}, indexTarget, func(obj client.Object) []string {
		ref := obj.(*v1.HTTPScaledObject).Spec.ScaleTargetRef
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			return nil
		}
		return []string{targetIndexValue(gv.Group, ref.Kind, ref.Name)}
	}); err != nil {
		return nil, fmt.Errorf("indexing HTTPScaledObjects by scale target: %w", err)
	}
	if err := idx.IndexField(ctx, &v1.HTTPScaledObject{}, indexServe, func(obj client.Object) []string {
		if obj.(*v1.HTTPScaledObject).Spec.Serve() {
			return []string{"true"}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("indexing HTTPScaledObjects by mode: %w", err)
	}

	if err := idx.IndexField(ctx, &v1.HTTPScaledObject{}, indexTLSSecret, tlsSecretIndex); err != nil {
		return nil, fmt.Errorf("indexing HTTPScaledObjects by TLS Secret: %w", err)
	}
	if err := tenancy.IndexFields(ctx, idx); err != nil {
		return nil, err
	}

	disc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	keys := &keySource{}
	enqueueAll := func() {
		var list v1.HTTPScaledObjectList
		if err := mgr.GetClient().List(ctx, &list); err != nil {
			log.Error(err, "listing HTTPScaledObjects to refresh propagation status")
			return
		}
		all := make([]string, len(list.Items))
		for i := range list.Items {
			all[i] = appkey.New(list.Items[i].Namespace, list.Items[i].Name).String()
		}
		keys.Enqueue(all)
	}

	transport := o.ProbeTransport
	if transport == nil {
		transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	var writer *TableWriter // the prober's callback reads it; set below
	adminClient := admin.Client{HTTP: &http.Client{Timeout: o.ProbeTimeout, Transport: transport}}
	coldStarts, err := NewColdStarts(adminClient, keys.Enqueue, ctrlmetrics.Registry, log.WithName("coldstarts"))
	if err != nil {
		return nil, fmt.Errorf("registering cold-start metrics: %w", err)
	}
	prober := &Prober{
		Reader:     mgr.GetClient(),
		Namespace:  o.Namespace,
		Selector:   o.InterceptorSelector,
		PortName:   o.InterceptorAdminPort,
		Interval:   o.ProbeInterval,
		Timeout:    o.ProbeTimeout,
		Admin:      adminClient,
		ColdStarts: coldStarts,
		Log:        log.WithName("propagation"),
		// A probe answer changes after every table write; re-evaluate the objects whose count can
		// change, not all 10,000 (each a reconcile competing with the next change for the CPU).
		OnChange: func(prev, next *Fleet) {
			affected, all := Affected(prev, next, writer.Written())
			if all {
				enqueueAll()
				return
			}
			keys.Enqueue(affected)
		},
		Written: func() *Written { return writer.Written() },
	}
	maxShard := o.MaxShardBytes
	if maxShard <= 0 {
		maxShard = routing.DefaultMaxShardBytes
	}
	writer = &TableWriter{
		Client:          mgr.GetClient(),
		Reader:          mgr.GetAPIReader(),
		Namespace:       o.Namespace,
		WatchNamespaces: o.WatchNamespaces,
		Base:            o.TableName,
		Debounce:        o.TableDebounce,
		MaxDelay:        o.TableMaxDelay,
		StartupGrace:    30 * time.Second,
		MaxShardBytes:   maxShard,
		MaxShardEntries: o.MaxShardEntries,
		ServePortMin:    o.ServePortMin,
		ServePortMax:    o.ServePortMax,
		Log:             log.WithName("table"),
		Notify:          keys.Enqueue,
		AfterWrite:      prober.Kick,
	}
	keda := &KEDA{Discovery: disc, Interval: cmp.Or(o.KEDACheckInterval, 20*time.Second), Log: log.WithName("keda")}
	kedaInstalled, err := keda.Detect()
	if err != nil {
		return nil, err
	}
	if !kedaInstalled {
		log.Error(errNoKEDA, "KEDA is not installed: HTTPScaledObjects are routed, but not scaled until it is; install KEDA "+KEDAMinVersion+
			" or newer (each object reports ScaledObjectReady=False, reason "+reasonKEDANotInstalled+")")
	}
	targets := &TargetChecker{Client: mgr.GetClient(), Mapper: mgr.GetRESTMapper(), Discovery: disc, TTL: time.Minute, Now: time.Now,
		Watched: map[schema.GroupVersionKind]bool{}}
	fleetInterval := o.FleetLeaseInterval
	if fleetInterval <= 0 {
		fleetInterval = 15 * time.Second
	}
	identity := o.Identity
	if identity == "" {
		identity, _ = os.Hostname()
	}
	fleets := &FleetLeases{
		Client:    mgr.GetClient(),
		Reader:    mgr.GetAPIReader(),
		Namespace: o.Namespace,
		Fleet:     cmp.Or(o.Fleet, v1.DefaultFleet),
		Identity:  identity,
		Interval:  fleetInterval,
		Now:       time.Now,
		Log:       log.WithName("fleets"),
		// Objects of a fleet that appeared or went away get (or lose) their FleetNotServed status.
		OnChange: enqueueAll,
	}
	r := &Reconciler{
		Fleet:         fleets.Fleet,
		Fleets:        fleets,
		Client:        mgr.GetClient(),
		Live:          mgr.GetAPIReader(),
		Recorder:      mgr.GetEventRecorder("httpscale-operator"),
		Targets:       targets,
		Table:         writer,
		Prober:        prober,
		ScalerAddress: o.ScalerAddress,
		ScalerTLS:     o.ScalerTLSAuthentication,
		Schedules:     o.Schedules,
		APIReader:     mgr.GetAPIReader(),
		Serve:         ServeOptions{ClusterDomain: o.ClusterDomain},
		Secrets:       mgr.GetAPIReader(),
		KEDA:          keda,
		ColdStarts:    coldStarts,
		Log:           log,
		maxEntryBytes: cmp.Or(o.MaxEntryBytes, routing.DefaultMaxEntryBytes),
		requeue:       func(key string) { keys.Enqueue([]string{key}) },
	}
	r.own = newOwnership(mgr.GetClient(), mgr.GetAPIReader(), o.ClusterDomain, r.serves)
	r.own.policies.OnErrors = func(errs []error) {
		for _, err := range errs {
			log.Error(err, "HTTPScalePolicy rule ignored: it selects no namespace")
		}
	}
	writer.MaxEntryBytes = r.maxEntryBytes
	keeper := &ClaimKeeper{
		Client: mgr.GetClient(), Fleet: fleets.Fleet, Fleets: fleets, Retention: o.HostClaimRetention,
		Interval: cmp.Or(o.ClaimSweepInterval, time.Minute), Uses: r.own.usedBy,
		Ready: func() bool { return writer.Written().snap > 0 }, Now: time.Now, Log: log.WithName("claims"),
	}
	if err := mgr.Add(keeper); err != nil {
		return nil, fmt.Errorf("adding HostClaim keeper: %w", err)
	}
	if err := mgr.Add(writer); err != nil {
		return nil, fmt.Errorf("adding routing-table writer: %w", err)
	}
	if err := mgr.Add(prober); err != nil {
		return nil, fmt.Errorf("adding propagation prober: %w", err)
	}
	if err := mgr.Add(fleets); err != nil {
		return nil, fmt.Errorf("adding fleet Leases: %w", err)
	}

	// Creation and deletion of a workload re-validate the objects that scale it; updates never change
	// whether it exists or has /scale, and would cost a list per rollout.
	createDelete := builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})
	controllerFor := func(name string, objects predicate.Predicate, workers int) (*builder.TypedBuilder[reconcile.Request], error) {
		b := ctrl.NewControllerManagedBy(mgr).
			Named(name).
			For(&v1.HTTPScaledObject{}, builder.WithPredicates(objects)).
			Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(byIndex(mgr.GetClient(), indexServices, nil, nil))).
			WithOptions(controller.Options{
				MaxConcurrentReconciles: workers,
				// controller-runtime v0.24.1's priority queue can deadlock at shutdown when many keys are
				// queued (a worker leaving on shutdown does not give back its waiter slot, and the
				// dispatcher then blocks handing it an item while holding the queue lock), so the manager
				// never stops within its grace period. The classic queue drains; Reconcile returns at once
				// once the context is cancelled.
				UsePriorityQueue: ptr.To(false),
			})
		for _, kind := range watchedTargets {
			gvk, err := mgr.GetClient().GroupVersionKindFor(kind)
			if err != nil {
				return nil, fmt.Errorf("looking up kind of %T: %w", kind, err)
			}
			targets.Watched[gvk] = true
			value := func(name string) string { return targetIndexValue(gvk.Group, gvk.Kind, name) }
			b = b.WatchesMetadata(kind, handler.EnqueueRequestsFromMapFunc(byIndex(mgr.GetClient(), indexTarget, value, targets.Forget)), createDelete)
		}
		return b, nil
	}
	b, err := controllerFor("httpscaledobject", predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}, servingChanged),
		max(1, o.MaxConcurrentReconciles))
	if err != nil {
		return nil, err
	}
	b.WatchesRawSource(keys).
		// A TLS Secret created, changed or deleted re-evaluates TLSReady of the objects naming it;
		// only metadata is cached (the content is read when needed).
		WatchesMetadata(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(byIndex(mgr.GetClient(), indexTLSSecret, nil, nil)))
	ctl, err := b.Build(r)
	if err != nil {
		return nil, fmt.Errorf("building HTTPScaledObject controller: %w", err)
	}
	// The routing table's input: cached reads and a new object's finalizer patch; enough workers to
	// keep the API server's round trips of a burst's patches overlapping (see routeWorkers).
	rb, err := controllerFor("httpscaledobject-routing", routeInputChanged, routeWorkers)
	if err != nil {
		return nil, err
	}
	// Serve mode: only the owner of a Service's redirect (the oldest Serve-mode object on it) has the
	// Service's names in its routing entry, so a change of one Serve-mode object re-routes its peers.
	rb.Watches(&v1.HTTPScaledObject{}, handler.EnqueueRequestsFromMapFunc(servePeers(mgr.GetClient())))
	// Host ownership: a claim created, released or deleted, a policy changed, a namespace's labels
	// changed, or an object that claims an overlapping host changed its hosts or went away: the
	// objects whose hosts it can decide are decided again.
	hostChanged := builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}))
	rb = rb.Watches(&v1.HostClaim{}, handler.EnqueueRequestsFromMapFunc(byClaimHost(mgr.GetClient())),
		builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1.HTTPScaledObject{}, handler.EnqueueRequestsFromMapFunc(byOverlappingHosts(mgr.GetClient())), hostChanged).
		Watches(&v1.HTTPScalePolicy{}, handler.EnqueueRequestsFromMapFunc(allObjects(mgr.GetClient()))).
		WatchesMetadata(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(objectsInNamespace(mgr.GetClient())),
			builder.WithPredicates(predicate.LabelChangedPredicate{}))
	if err := rb.Complete(&routeReconciler{r: r}); err != nil {
		return nil, fmt.Errorf("building HTTPScaledObject routing controller: %w", err)
	}
	serveCtl, err := setupServe(mgr, r, keys.Enqueue)
	if err != nil {
		return nil, err
	}
	// KEDA's ScaledObjects are watched now, or once KEDA's CRDs appear (keda.go): a watch of a kind the
	// API server does not serve would keep the controllers from ever starting.
	watchScaledObjects := func(ctx context.Context) error {
		if err := ctl.Watch(ownedScaledObjects(mgr)); err != nil {
			return err
		}
		if err := serveCtl.Watch(serveScaledObjectSource(mgr)); err != nil {
			return err
		}
		// The cold starts' Scaled step: KEDA's Active turning true.
		soInformer, err := mgr.GetCache().GetInformer(ctx, &kedav1alpha1.ScaledObject{})
		if err != nil {
			return fmt.Errorf("watching ScaledObjects' activity: %w", err)
		}
		return coldStarts.watchScaledObjects(soInformer)
	}
	if kedaInstalled {
		if err := watchScaledObjects(ctx); err != nil {
			return nil, fmt.Errorf("watching KEDA ScaledObjects: %w", err)
		}
	} else {
		keda.OnInstalled = func(ctx context.Context) error {
			if err := watchScaledObjects(ctx); err != nil {
				return err
			}
			enqueueAll()
			return nil
		}
		if err := mgr.Add(keda); err != nil {
			return nil, fmt.Errorf("adding the KEDA check: %w", err)
		}
	}
	if o.InterceptorServiceAccount != "" {
		grants := &SecretGrants{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), ServiceAccount: o.InterceptorServiceAccount, ServiceAccountNamespace: o.Namespace,
			Fleet: cmp.Or(o.Fleet, v1.DefaultFleet)}
		err := ctrl.NewControllerManagedBy(mgr).Named("tls-secret-grants").
			Watches(&v1.HTTPScaledObject{}, handler.EnqueueRequestsFromMapFunc(byNamespace), builder.WithPredicates(tlsChanged)).
			WithOptions(controller.Options{UsePriorityQueue: ptr.To(false)}).
			Complete(grants)
		if err != nil {
			return nil, fmt.Errorf("building TLS Secret grant controller: %w", err)
		}
	}
	return writer, nil
}

// errNoKEDA is logged once at start when KEDA's CRDs are missing.
var errNoKEDA = errors.New("the API server serves no keda.sh/v1alpha1 ScaledObjects")

// ownedScaledObjects is the main controller's watch of KEDA ScaledObjects: an update of the spec of
// its own brings the owner back to correct it.
func ownedScaledObjects(mgr manager.Manager) source.Source {
	owner := handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &v1.HTTPScaledObject{}, handler.OnlyControllerOwner())
	return source.Kind[client.Object](mgr.GetCache(), &kedav1alpha1.ScaledObject{}, owner, predicate.GenerationChangedPredicate{})
}

// serveWorkers is the Serve controller's concurrency: a switch costs a few API reads and, while it
// waits for held requests, a question to every interceptor; a handful of apps switching at once
// must not wait for each other.
const serveWorkers = 4

// setupServe builds Serve mode's controller (serve_controller.go) and its watches but the one of KEDA
// ScaledObjects (serveScaledObjectSource), which waits for KEDA's CRDs.
func setupServe(mgr ctrl.Manager, r *Reconciler, requeueMain func([]string)) (controller.Controller, error) {
	c := mgr.GetClient()
	b := ctrl.NewControllerManagedBy(mgr).
		Named("httpscaledobject-serve").
		For(&v1.HTTPScaledObject{}, builder.WithPredicates(serveRelevant, serveInputChanged)).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(byIndex(c, indexServices, nil, nil))).
		// A redirect's owner is the oldest Serve-mode object on its Service.
		Watches(&v1.HTTPScaledObject{}, handler.EnqueueRequestsFromMapFunc(servePeers(c))).
		// The interceptors' admin EndpointSlices (the only ones cached) change the redirect's
		// endpoints as replicas come and go.
		Watches(&discoveryv1.EndpointSlice{}, handler.EnqueueRequestsFromMapFunc(serveAll(c))).
		WithOptions(controller.Options{MaxConcurrentReconciles: serveWorkers, UsePriorityQueue: ptr.To(false)})
	// A workload's spec change (KEDA scaling it to zero) puts the redirect in place before its pods
	// are gone.
	for _, kind := range watchedTargets {
		gvk, err := c.GroupVersionKindFor(kind)
		if err != nil {
			return nil, fmt.Errorf("looking up kind of %T: %w", kind, err)
		}
		value := func(name string) string { return targetIndexValue(gvk.Group, gvk.Kind, name) }
		b = b.WatchesMetadata(kind, handler.EnqueueRequestsFromMapFunc(serveByTarget(c, value)),
			builder.WithPredicates(predicate.GenerationChangedPredicate{}))
	}
	ctl, err := b.Build(&serveReconciler{r: r, requeueMain: requeueMain})
	if err != nil {
		return nil, fmt.Errorf("building Serve-mode controller: %w", err)
	}
	return ctl, nil
}

// serveScaledObjectSource is the Serve controller's watch of KEDA ScaledObjects: KEDA's Active
// condition turning False is the decision to scale to zero, which puts the redirect in place while the
// pods still serve.
func serveScaledObjectSource(mgr manager.Manager) source.Source {
	return source.Kind[client.Object](mgr.GetCache(), &kedav1alpha1.ScaledObject{},
		handler.EnqueueRequestsFromMapFunc(serveByScaledObject(mgr.GetClient())), kedaActiveChanged)
}

func targetIndexValue(group, kind, name string) string { return group + "/" + kind + "/" + name }

// byIndex maps a watched object to the HTTPScaledObjects in its namespace whose index value is
// value(name) (the name itself when value is nil).
func byIndex(c client.Client, index string, value func(string) string, forget func(string)) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		v := obj.GetName()
		if value != nil {
			v = value(v)
		}
		var list v1.HTTPScaledObjectList
		if err := c.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{index: v}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			key := types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}
			if forget != nil {
				forget(appkey.New(key.Namespace, key.Name).String())
			}
			reqs[i] = reconcile.Request{NamespacedName: key}
		}
		return reqs
	}
}

// keySource is a controller source that the table writer and the prober feed with "namespace/name"
// keys. Enqueue never blocks (keys go straight into the controller's deduplicating work queue), so a
// writer holding thousands of changed keys cannot stall, and nothing hangs at shutdown. Keys enqueued
// before the controller started are kept and handed over when it starts.
type keySource struct {
	mu      sync.Mutex
	queue   workqueue.TypedRateLimitingInterface[reconcile.Request]
	pending []string
}

// Start implements source.Source.
func (s *keySource) Start(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = q
	for _, k := range s.pending {
		if r, ok := request(k); ok {
			q.Add(r)
		}
	}
	s.pending = nil
	return nil
}

// Enqueue asks for a reconcile of each key. Safe for concurrent use.
func (s *keySource) Enqueue(keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queue == nil {
		s.pending = append(s.pending, keys...)
		return
	}
	for _, k := range keys {
		if r, ok := request(k); ok {
			s.queue.Add(r)
		}
	}
}

func (s *keySource) String() string { return "routing-table and propagation changes" }

// request turns an app key into a reconcile request. Every key comes from appkey.Key.String of an
// object's namespace and name, so it parses; one that does not would name no object and is dropped.
func request(key string) (reconcile.Request, bool) {
	k, err := appkey.Parse(key)
	if err != nil {
		return reconcile.Request{}, false
	}
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: k.Namespace, Name: k.Name}}, true
}
