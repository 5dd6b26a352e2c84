package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
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
	r *Reconciler // its cached client, target checker and resolve
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
			rr.r.Table.Gone(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading HTTPScaledObject %s: %w", key, err)
	}
	if !hso.DeletionTimestamp.IsZero() {
		rr.r.Table.SetDeleting(key, hso.UID)
		return ctrl.Result{}, nil
	}
	if !rr.r.serves(hso) {
		rr.r.Table.Set(key, nil) // another fleet's (or moved there): out of this fleet's table
		return ctrl.Result{}, nil
	}
	entry, err := rr.r.resolve(ctx, hso)
	var inv *invalidError
	switch {
	case errors.As(err, &inv):
		rr.r.Table.Set(key, nil)
		return ctrl.Result{RequeueAfter: invalidRecheck}, nil
	case err != nil:
		return ctrl.Result{}, err
	}
	if !controllerutil.ContainsFinalizer(hso, rr.r.finalizer()) {
		// The finalizer goes on before the object is routed, so that it cannot leave the API while an
		// interceptor still routes it. The main reconcile adds it too; whichever is first wins.
		orig := hso.DeepCopy()
		controllerutil.AddFinalizer(hso, rr.r.finalizer())
		if err := rr.r.Client.Patch(ctx, hso, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to %s: %w", key, err)
		}
	}
	rr.r.Table.Set(key, &candidate{entry: entry, created: hso.CreationTimestamp.Time, uid: hso.UID})
	return ctrl.Result{}, nil
}

// routeInputChanged passes the updates that can change an object's entry or take it out: its spec
// (generation), annotations, and the start of its deletion. Status and finalizer patches pass no
// event, so a burst of new objects costs the routing controller one reconcile each.
var routeInputChanged = predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
	predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld != nil && e.ObjectNew != nil &&
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}})
