package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
)

// routeReconciler is the routing table's input: for every change of an HTTPScaledObject (and of the
// Services and workloads it names) it resolves the object's routing entry from the informer cache
// and hands it to the TableWriter. Its only write is the object's finalizer (once, before the object
// is first routed), so a new object is routed without waiting behind the ScaledObject writes, status
// patches and events of the main reconcile (Reconciler), which only reads the writer's outcome for
// the status. It is the
// table's only input, so its decisions for one key are serialised by its work queue; the finalizer
// waits for its decision that the object is being deleted (TableWriter.Released).
type routeReconciler struct {
	r *Reconciler // its cached client, target checker, resolve and addFinalizer
}

// Reconcile implements reconcile.Reconciler.
func (rr *routeReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if ctx.Err() != nil {
		return ctrl.Result{}, nil // shutting down, as in Reconciler.Reconcile
	}
	key := appkey.New(req.Namespace, req.Name).String()
	hso := &v1.HTTPScaledObject{}
	if err := rr.r.Client.Get(ctx, req.NamespacedName, hso); err != nil {
		if apierrors.IsNotFound(err) {
			rr.r.own.record(key, nil)
			rr.r.Table.Gone(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading HTTPScaledObject %s: %w", key, err)
	}
	if !hso.DeletionTimestamp.IsZero() {
		rr.r.own.record(key, nil)
		rr.r.Table.SetDeleting(key, hso.UID)
		return ctrl.Result{}, nil
	}
	if !rr.r.serves(hso) {
		rr.r.own.record(key, nil)
		rr.r.Table.Set(key, nil) // another fleet's (or moved there): out of this fleet's table
		return ctrl.Result{}, nil
	}
	// Hosts are decided (and new ones claimed) whether or not the rest of the object resolves: a
	// host belongs to the namespace that claims it first, as OpenShift's routes do, not to the first
	// one whose Service exists.
	verdict, changed, err := rr.r.own.admit(ctx, hso)
	if err != nil {
		return ctrl.Result{}, err
	}
	if changed {
		rr.r.requeue(key) // the main reconcile reports it (HostsAccepted)
	}
	entry, err := rr.r.resolve(ctx, hso)
	var inv *invalidError
	switch {
	case errors.As(err, &inv):
		rr.r.Table.Set(key, nil)
		return ctrl.Result{RequeueAfter: invalidRecheck}, nil
	case err != nil:
		return ctrl.Result{}, err
	case len(verdict.granted) == 0:
		rr.r.Table.Set(key, nil) // no host of its own: left out, its status says why
		return ctrl.Result{}, nil
	}
	entry.Hosts = grantedHosts(hso, entry.Hosts, verdict)
	if !controllerutil.ContainsFinalizer(hso, rr.r.finalizer()) {
		// The finalizer goes on before the object is routed, so that it cannot leave the API while an
		// interceptor still routes it. The operator's mutating webhook normally puts it on in the
		// create; when it did not (webhook unreachable or disabled, an object older than the webhook),
		// this controller adds it, and the new object costs one write before it is routed.
		uid, gen := hso.UID, hso.Generation
		gone, err := rr.r.addFinalizer(ctx, hso)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to %s: %w", key, err)
		}
		switch {
		case gone:
			rr.r.own.record(key, nil)
			rr.r.Table.Gone(key)
			return ctrl.Result{}, nil
		case !hso.DeletionTimestamp.IsZero():
			rr.r.Table.SetDeleting(key, hso.UID)
			return ctrl.Result{}, nil
		case hso.UID != uid || hso.Generation != gen:
			// The entry was resolved from an older spec (or another object of the same name); the
			// event that brought the newer one queues this key again.
			return ctrl.Result{}, nil
		}
	}
	// A Serve-mode app that owns its Service's redirect and all its hosts gets a Serve port.
	serve, err := rr.r.wantsServePort(ctx, hso)
	if err != nil {
		return ctrl.Result{}, err
	}
	serve = serve && len(verdict.refused) == 0
	rr.r.Table.Set(key, &candidate{entry: entry, created: hso.CreationTimestamp.Time, uid: hso.UID, serve: serve})
	return ctrl.Result{}, nil
}

// routeWorkers is the routing controller's concurrency. Its work is a cached read and, once per new
// object, one patch: in a burst the patches' round trips are what it waits on, and it must keep pace
// with the clients creating the objects, which share the API server with it (a burst's clients ran
// 16 creates at once in the benchmarks). Idle workers cost a parked goroutine each.
const routeWorkers = 32

// routeInputChanged passes the updates that can change an object's entry or take it out: its spec
// (generation), annotations, and the start of its deletion. Status and finalizer patches pass no
// event, so a burst of new objects costs the routing controller one reconcile each.
var routeInputChanged = predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
	predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld != nil && e.ObjectNew != nil &&
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}})

// addFinalizer adds the finalizer to hso (updated in place). The merge patch replaces the whole
// finalizer list, so it is locked on the resourceVersion read; when that copy was stale (another
// controller or a user changed the object since the cache saw it) the object is read again from the
// API server and the patch retried at once, instead of returning an error whose rate-limited retry
// (the work queue's 10/s after a burst of 100) would hold back a burst's routing by seconds. It
// reports gone when the object no longer exists; hso may come back terminating, with its finalizer
// list unchanged, when the object is being deleted.
func (r *Reconciler) addFinalizer(ctx context.Context, hso *v1.HTTPScaledObject) (gone bool, err error) {
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		orig := hso.DeepCopy()
		controllerutil.AddFinalizer(hso, r.finalizer())
		err := r.Client.Patch(ctx, hso, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if !apierrors.IsConflict(err) {
			return err
		}
		if err := r.Live.Get(ctx, client.ObjectKeyFromObject(hso), hso); err != nil {
			return err
		}
		if !hso.DeletionTimestamp.IsZero() || controllerutil.ContainsFinalizer(hso, r.finalizer()) {
			return nil // nothing to add: it is being deleted, or another writer added it
		}
		return err // the conflict: retried with the fresh copy
	})
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	return false, err
}
