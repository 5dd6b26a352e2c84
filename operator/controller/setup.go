package controller

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/admin"
)

// Field indexes on HTTPScaledObjects.
const (
	indexServices   = "httpscale.dev/services"   // Services an object refers to
	indexDeployment = "httpscale.dev/deployment" // the Deployment it scales, if its target is one
)

// Options configure the operator's controllers.
type Options struct {
	// Namespace holds the routing table and the interceptor admin Service.
	Namespace string
	// TableName is the routing table's head ConfigMap name.
	TableName string
	// ScalerAddress goes into every ScaledObject's external-push trigger.
	ScalerAddress string
	// InterceptorSelector selects the EndpointSlices of the interceptor admin Service.
	InterceptorSelector labels.Selector
	// InterceptorAdminPort names the admin port in those EndpointSlices.
	InterceptorAdminPort string
	ProbeInterval        time.Duration
	ProbeTimeout         time.Duration
	TableDebounce        time.Duration
	MaxShardBytes        int
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
}

// Setup adds the table writer, the propagation prober and the HTTPScaledObject controller to mgr.
// It returns the writer so callers (tests, benchmarks) can observe writes.
func Setup(mgr manager.Manager, o Options, log logr.Logger) (*TableWriter, error) {
	ctx := context.Background()
	idx := mgr.GetFieldIndexer()
	if err := idx.IndexField(ctx, &v1.HTTPScaledObject{}, indexServices, func(obj client.Object) []string {
		hso := obj.(*v1.HTTPScaledObject)
		names := []string{hso.Spec.ScaleTargetRef.Service}
		if cs := hso.Spec.ColdStart; cs != nil && cs.Fallback != nil {
			names = append(names, cs.Fallback.Service)
		}
		return names
	}); err != nil {
		return nil, fmt.Errorf("indexing HTTPScaledObjects by Service: %w", err)
	}
	if err := idx.IndexField(ctx, &v1.HTTPScaledObject{}, indexDeployment, func(obj client.Object) []string {
		ref := obj.(*v1.HTTPScaledObject).Spec.ScaleTargetRef
		if ref.APIVersion == "apps/v1" && ref.Kind == "Deployment" {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("indexing HTTPScaledObjects by Deployment: %w", err)
	}

	disc, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, fmt.Errorf("creating discovery client: %w", err)
	}
	events := make(chan event.GenericEvent, 1024)
	enqueue := func(keys []string) {
		for _, k := range keys {
			ns, name, _ := strings.Cut(k, "/")
			obj := &v1.HTTPScaledObject{}
			obj.Namespace, obj.Name = ns, name
			events <- event.GenericEvent{Object: obj}
		}
	}
	enqueueAll := func() {
		var list v1.HTTPScaledObjectList
		if err := mgr.GetClient().List(ctx, &list); err != nil {
			log.Error(err, "listing HTTPScaledObjects to refresh propagation status")
			return
		}
		keys := make([]string, len(list.Items))
		for i := range list.Items {
			keys[i] = list.Items[i].Namespace + "/" + list.Items[i].Name
		}
		enqueue(keys)
	}

	prober := &Prober{
		Reader:    mgr.GetClient(),
		Namespace: o.Namespace,
		Selector:  o.InterceptorSelector,
		PortName:  o.InterceptorAdminPort,
		Interval:  o.ProbeInterval,
		Timeout:   o.ProbeTimeout,
		Admin:     admin.Client{HTTP: &http.Client{Timeout: o.ProbeTimeout}},
		Log:       log.WithName("propagation"),
		OnChange:  enqueueAll,
	}
	writer := &TableWriter{
		Client:        mgr.GetClient(),
		Reader:        mgr.GetAPIReader(),
		Namespace:     o.Namespace,
		Base:          o.TableName,
		Debounce:      o.TableDebounce,
		StartupGrace:  30 * time.Second,
		MaxShardBytes: o.MaxShardBytes,
		Log:           log.WithName("table"),
		Notify:        enqueue,
		AfterWrite:    prober.Kick,
	}
	targets := &TargetChecker{Client: mgr.GetClient(), Mapper: mgr.GetRESTMapper(), Discovery: disc, TTL: time.Minute, Now: time.Now}
	r := &Reconciler{
		Client:        mgr.GetClient(),
		Recorder:      mgr.GetEventRecorder("httpscale-operator"),
		Targets:       targets,
		Table:         writer,
		Prober:        prober,
		ScalerAddress: o.ScalerAddress,
		Log:           log,
	}
	if err := mgr.Add(writer); err != nil {
		return nil, err
	}
	if err := mgr.Add(prober); err != nil {
		return nil, err
	}

	err = ctrl.NewControllerManagedBy(mgr).
		Named("httpscaledobject").
		For(&v1.HTTPScaledObject{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&kedav1alpha1.ScaledObject{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(byIndex(mgr.GetClient(), indexServices, nil))).
		WatchesMetadata(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(byIndex(mgr.GetClient(), indexDeployment, targets.Forget)),
			builder.WithPredicates(predicate.Funcs{UpdateFunc: func(event.UpdateEvent) bool { return false }})).
		WatchesRawSource(source.Channel(events, &handler.EnqueueRequestForObject{})).
		WithOptions(controllerOptions(o)).
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("building HTTPScaledObject controller: %w", err)
	}
	return writer, nil
}

// byIndex maps a watched object to the HTTPScaledObjects in its namespace that refer to it by name.
func byIndex(c client.Client, index string, forget func(string)) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		var list v1.HTTPScaledObjectList
		if err := c.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{index: obj.GetName()}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			key := types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}
			if forget != nil {
				forget(key.String())
			}
			reqs[i] = reconcile.Request{NamespacedName: key}
		}
		return reqs
	}
}

func controllerOptions(o Options) controller.Options {
	return controller.Options{MaxConcurrentReconciles: max(1, o.MaxConcurrentReconciles)}
}
