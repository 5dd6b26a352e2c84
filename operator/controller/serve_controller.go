package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
)

// serveReconciler is Serve mode's controller: for each Serve-mode object (and one leaving Serve mode)
// it keeps the redirect EndpointSlice of the app's Service and the object's Serving condition, and
// nothing else. It has its own work queue and watches (the workload's spec, KEDA's Active condition,
// the interceptors' admin EndpointSlices, the other Serve-mode objects on the Service), so the
// switches of a few Serve-mode apps never wait behind the main reconcile of thousands of objects,
// and Proxy-mode objects cost it nothing.
//
// The Serving condition is the only status it writes, locked on the resourceVersion it read, as the
// main reconcile locks its own status writes for objects that carry the condition: neither can put
// back a stale copy of what the other wrote. The main reconcile reads the condition for Ready; a
// change of it queues the object there (requeueMain).
type serveReconciler struct {
	r           *Reconciler // cached client, API reader, prober, events, resolve
	requeueMain func(keys []string)
}

// Reconcile implements reconcile.Reconciler.
func (s *serveReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if ctx.Err() != nil {
		return ctrl.Result{}, nil // shutting down, as in Reconciler.Reconcile
	}
	r := s.r
	key := appkey.New(req.Namespace, req.Name).String()
	hso := &v1.HTTPScaledObject{}
	if err := r.Client.Get(ctx, req.NamespacedName, hso); err != nil {
		// Gone: its redirects went before its finalizer (Reconciler.finalize), and what is left is
		// owned by it and collected.
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !r.serves(hso) || !hso.DeletionTimestamp.IsZero() {
		// Another fleet's object (Reconciler.foreign) or one being deleted (Reconciler.finalize):
		// the main reconcile restores the Service before it lets go of the object.
		return ctrl.Result{}, nil
	}
	if !hso.Spec.Serve() && meta.FindStatusCondition(hso.Status.Conditions, v1.ConditionServing) == nil {
		return ctrl.Result{}, nil // a Proxy-mode object that never had a redirect: the Service is the user's
	}
	if r.Fleets != nil && !r.Fleets.Announced() {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	_, err := r.resolve(ctx, hso)
	var inv *invalidError
	if err != nil && !errors.As(err, &inv) {
		return ctrl.Result{}, err
	}
	orig := hso.DeepCopy()
	recheck, err := r.syncServe(ctx, hso, key, inv == nil)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("serving %s: %w", key, err)
	}
	before := meta.FindStatusCondition(orig.Status.Conditions, v1.ConditionServing)
	after := meta.FindStatusCondition(hso.Status.Conditions, v1.ConditionServing)
	if !equality.Semantic.DeepEqual(before, after) {
		if err := r.Client.Status().Patch(ctx, hso, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				// The main reconcile wrote meanwhile: look again at what it wrote.
				return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
			}
			return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("writing the Serving condition of %s: %w", key, err))
		}
		if s.requeueMain != nil {
			s.requeueMain([]string{key}) // Ready follows the Serving condition
		}
	}
	return ctrl.Result{RequeueAfter: recheck}, nil
}

// serveRelevant passes the objects the Serve controller has work for: those in Serve mode, and those
// that carry a Serving condition (they were, and may still have a redirect to remove).
var serveRelevant = predicate.NewPredicateFuncs(func(obj client.Object) bool {
	hso, ok := obj.(*v1.HTTPScaledObject)
	return ok && (hso.Spec.Serve() || meta.FindStatusCondition(hso.Status.Conditions, v1.ConditionServing) != nil)
})

// serveInputChanged passes the updates of a Serve-relevant object that can change its redirect: its
// spec and annotations, and its deletion (the main reconcile restores the Service then, but a
// deletion that is called off — a finalizer of someone else's — brings it back here).
var serveInputChanged = predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
	predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld != nil && e.ObjectNew != nil &&
			e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
	}})

// servingChanged passes the updates that change the Serving condition, which the Serve controller
// writes and Ready follows. The main reconcile must read the object once its cache holds that write:
// queued at the moment of the write (before the cache saw it), it could compute Ready from the old
// condition, find nothing to change, and never look again.
var servingChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*v1.HTTPScaledObject)
	n, ok2 := e.ObjectNew.(*v1.HTTPScaledObject)
	return ok1 && ok2 && !equality.Semantic.DeepEqual(meta.FindStatusCondition(o.Status.Conditions, v1.ConditionServing),
		meta.FindStatusCondition(n.Status.Conditions, v1.ConditionServing))
}}
