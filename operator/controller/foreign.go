package controller

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// ReasonFleetNotServed is the reason of conditions Ready and RoutingPropagated of an object whose
// fleet no running operator serves.
const ReasonFleetNotServed = "FleetNotServed"

// fleet is the fleet this operator serves.
func (r *Reconciler) fleet() string {
	if r.Fleet == "" {
		return v1.DefaultFleet
	}
	return r.Fleet
}

func (r *Reconciler) finalizer() string { return FinalizerFor(r.fleet()) }

// serves reports whether the object belongs to this operator's fleet.
func (r *Reconciler) serves(hso *v1.HTTPScaledObject) bool { return hso.Spec.FleetName() == r.fleet() }

// foreign handles an object of another fleet. Its route, KEDA ScaledObject and status belong to that
// fleet's operator; this one only lets go of it: once its own table was written without the object
// (the routing controller took it out), it removes its own finalizer. If no running operator serves
// the object's fleet and this operator is the reporter (ServedFleets.Reporter), it says so in the
// object's status, since no one else will, and removes a Serve-mode redirect of the object.
func (r *Reconciler) foreign(ctx context.Context, hso *v1.HTTPScaledObject, key string) (ctrl.Result, error) {
	if controllerutil.ContainsFinalizer(hso, r.finalizer()) {
		// Version "" means no table was read or written yet, so whether it holds the object is unknown.
		if w := r.Table.Written(); w.Version == "" || w.Contains(key) {
			return ctrl.Result{RequeueAfter: time.Second}, nil // the write's Notify brings it back sooner
		}
		orig := hso.DeepCopy()
		controllerutil.RemoveFinalizer(hso, r.finalizer())
		if err := r.Client.Patch(ctx, hso, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsNotFound(err) {
				return ctrl.Result{}, nil
			}
			return ctrl.Result{}, fmt.Errorf("removing finalizer from %s: %w", key, err)
		}
	}
	if r.Fleets == nil || !hso.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	served := r.Fleets.Served()
	fleet := hso.Spec.FleetName()
	if !served.Reporter(r.fleet()) || served.Serves(fleet) {
		return ctrl.Result{}, nil
	}
	// The view may be up to an interval old: ask again before writing. A fleet's operator announces
	// itself before it writes any status, and the status patch below is locked on the resourceVersion
	// read before this question, so a status its operator wrote meanwhile is never overwritten.
	if now, err := r.Fleets.ServedNow(ctx, fleet); err != nil || now {
		return ctrl.Result{}, err
	}
	// Nothing routes the app now: a Serve-mode redirect would send its Service's traffic to
	// interceptors that no longer know it. Give the Service back as written.
	if err := r.removeRedirects(ctx, hso, ""); err != nil {
		return ctrl.Result{}, err
	}
	orig := hso.DeepCopy()
	msg := fmt.Sprintf("no running httpscale operator serves fleet %q (fleets served: %s): nothing routes or scales this object; "+
		"install the chart with fleet=%s, or set spec.fleet to a served fleet", fleet, strings.Join(served.Live, ", "), fleet)
	r.setCondition(hso, v1.ConditionRoutingPropagated, metav1.ConditionFalse, ReasonFleetNotServed, msg)
	r.setCondition(hso, v1.ConditionReady, metav1.ConditionFalse, ReasonFleetNotServed, msg)
	meta.RemoveStatusCondition(&hso.Status.Conditions, v1.ConditionServing)
	hso.Status.Routing = nil
	hso.Status.ObservedGeneration = hso.Generation
	if equality.Semantic.DeepEqual(orig.Status, hso.Status) {
		return ctrl.Result{}, nil
	}
	// Locked on resourceVersion: if the object's operator appeared and wrote its status meanwhile,
	// this write fails and the next reconcile finds the fleet served.
	if err := r.Client.Status().Patch(ctx, hso, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return ctrl.Result{}, fmt.Errorf("writing status of %s: %w", key, err)
	}
	return ctrl.Result{}, nil
}
