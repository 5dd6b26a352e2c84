package controller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/scheduler"
	"github.com/httpscale/httpscale/pkg/appkey"
)

// Finalizer keeps an HTTPScaledObject until its entry has left the written routing table.
const Finalizer = "httpscale.dev/routing-table"

// invalidRecheck is how often an object whose references are missing is validated again when no
// watch event brings news (targets of kinds the operator does not watch).
const invalidRecheck = 30 * time.Second

// notRoutedRecheck is how often the main reconcile looks again at a valid object the routing
// controller has not routed yet, should no table write bring it back first.
const notRoutedRecheck = 5 * time.Second

// The operator writes HTTPScaledObjects only through merge patches (finalizers; status), and never
// their spec; /finalizers update lets it set owner references that block the owner's deletion (the
// ScaledObject, a redirect EndpointSlice).
// +kubebuilder:rbac:groups=httpscale.dev,resources=httpscaledobjects,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=httpscale.dev,resources=httpscaledobjects/status,verbs=patch
// +kubebuilder:rbac:groups=httpscale.dev,resources=httpscaledobjects/finalizers,verbs=update
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch
// +kubebuilder:rbac:groups=*,resources=*/scale,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups="",namespace=httpscale-system,resources=configmaps,verbs=get;list;create;update;delete
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=httpscale-system,resources=endpointslices,verbs=get;list;watch

// Reconciler reconciles one HTTPScaledObject: validates its references, keeps its KEDA ScaledObject in
// sync and reports status, including the routing outcome the TableWriter reports. The routing entry
// itself reaches the TableWriter through routeReconciler, which does not wait for any of this.
type Reconciler struct {
	Client client.Client
	// Live reads an object from the API server when a patch found the cached copy stale.
	Live          client.Reader
	Recorder      events.EventRecorder
	Targets       *TargetChecker
	Table         *TableWriter
	Prober        *Prober
	ScalerAddress string
	// ScalerTLS names the ClusterTriggerAuthentication for the scaler's mutual TLS ("": plain text).
	ScalerTLS string
	// Fleet is the fleet this operator serves ("" means v1.DefaultFleet); objects of other fleets are
	// only let go (fleet.go).
	Fleet string
	// Fleets tells which fleets running operators serve; nil reports no object of an unserved fleet.
	Fleets *FleetLeases
	// Schedules runs spec.schedules; nil disables scheduled scaling.
	Schedules *scheduler.Scheduler
	// APIReader reads what the cache does not hold: the app Services' EndpointSlices and the
	// workloads' pod templates, for Serve mode only.
	APIReader client.Reader
	Serve     ServeOptions
	// Secrets reads the Secrets spec.tls names, uncached (the API reader).
	Secrets client.Reader
	// KEDA tells whether KEDA's ScaledObjects are served; nil means they are.
	KEDA *KEDA
	// ColdStarts has the apps' latest cold starts for status.lastColdStart; nil shows none.
	ColdStarts *ColdStarts
	Log        logr.Logger
	// Now is the clock of the wait for routing (routingWait); nil means time.Now.
	Now func() time.Time

	// own decides which hosts each object's namespace may route (hosts.go).
	own *ownership
	// requeue asks for a reconcile of key ("namespace/name") by the main controller.
	requeue func(key string)
	// maxEntryBytes is the per-object budget of a routing entry's stored form.
	maxEntryBytes int
	// statusWrites tells a cached copy that predates this controller's last status write.
	statusWrites statusWrites
}

// routingWait bounds how long a new object that already carries its finalizer (from the mutating
// webhook) waits for its first routed table before its status and ScaledObject are written anyway:
// when table writes keep failing, the status must still say so (RoutingPropagated) rather than stay
// empty. It matches the table writer's start-up hold.
const routingWait = 30 * time.Second

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	if ctx.Err() != nil {
		// Shutting down: the work queue still hands out every queued key (thousands after a burst);
		// skip them instead of failing each against a cancelled context, so the manager stops within
		// its grace period and releases the leader lease.
		return ctrl.Result{}, nil
	}
	key := appkey.New(req.Namespace, req.Name).String()
	hso := &v1.HTTPScaledObject{}
	if err := r.Client.Get(ctx, req.NamespacedName, hso); err != nil {
		if apierrors.IsNotFound(err) {
			r.statusWrites.forget(key)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, fmt.Errorf("reading HTTPScaledObject %s: %w", key, err)
	}

	if !r.serves(hso) {
		return r.foreign(ctx, hso, key)
	}
	if r.Fleets != nil && !r.Fleets.Announced() {
		return ctrl.Result{RequeueAfter: time.Second}, nil // see FleetLeases.Announced
	}
	if !hso.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, hso, key)
	}
	entry, err := r.resolve(ctx, hso)
	var inv *invalidError
	refusedAll := false
	if v, ok := r.own.verdict(key, hso.UID, hso.Generation); ok && len(v.granted) == 0 {
		refusedAll = true // left out of the table for good: nothing to wait for
	}
	if written := r.Table.Written(); !errors.As(err, &inv) && err == nil && !written.Contains(key) && !written.Lost(key) && !refusedAll &&
		(!controllerutil.ContainsFinalizer(hso, r.finalizer()) || r.now().Sub(hso.CreationTimestamp.Time) < routingWait) {
		// Not settled in a written table yet: neither routed nor reported as the loser of a route
		// conflict. The table writer's Notify brings the object back here once it is; until then this
		// reconcile's writes (ScaledObject, events, status) would only compete for the API server with
		// the routing table's writes (and a burst's creates and finalizer patches), and race the
		// routing controller's finalizer patch. That holds whether the finalizer came with the create
		// (the mutating webhook) or comes from the routing controller; with the finalizer, for at most
		// routingWait. The requeue is a safety net.
		return ctrl.Result{RequeueAfter: notRoutedRecheck}, nil
	}
	if !errors.As(err, &inv) && err == nil && !controllerutil.ContainsFinalizer(hso, r.finalizer()) {
		// Routed without the finalizer (someone removed it, or this cache has not seen the routing
		// controller's patch yet): put it back, so that the object cannot leave the API while
		// interceptors still route it.
		gone, err := r.addFinalizer(ctx, hso)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer to %s: %w", key, err)
		}
		if gone || !hso.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, nil // its deletion brings it back (finalize)
		}
	}

	orig := hso.DeepCopy()
	result := ctrl.Result{}
	switch {
	case errors.As(err, &inv):
		r.setCondition(hso, v1.ConditionValid, metav1.ConditionFalse, inv.Reason, inv.Message)
		hso.Status.TargetService = ""
		result.RequeueAfter = invalidRecheck
	case err != nil:
		return ctrl.Result{}, err
	default:
		r.setCondition(hso, v1.ConditionValid, metav1.ConditionTrue, "Resolved",
			fmt.Sprintf("Service %s port %d and %s %s resolve", entry.Service, entry.Port, hso.Spec.ScaleTargetRef.Kind, hso.Spec.ScaleTargetRef.Name))
		hso.Status.TargetService = fmt.Sprintf("%s:%d", entry.Service, entry.Port)
	}
	hso.Status.TargetWorkload = hso.Spec.ScaleTargetRef.Kind + "/" + hso.Spec.ScaleTargetRef.Name

	var sched scheduler.Outcome
	if r.Schedules != nil {
		if sched, err = r.Schedules.Reconcile(ctx, hso); err != nil {
			return ctrl.Result{}, fmt.Errorf("running schedules of %s: %w", key, err)
		}
		if sched.RequeueAfter > 0 && (result.RequeueAfter == 0 || sched.RequeueAfter < result.RequeueAfter) {
			// Woken exactly at the next execution time, not by polling.
			result.RequeueAfter = sched.RequeueAfter
		}
	}
	if err := r.syncScaledObject(ctx, hso, inv == nil, sched); err != nil {
		return ctrl.Result{}, err
	}
	// The Serving condition (and the redirect it describes) is the Serve controller's
	// (serve_controller.go); Ready reads it below.
	r.setHostsStatus(hso, key)
	r.setRoutingStatus(hso, key, inv == nil, refusedAll)
	if err := r.setTLSStatus(ctx, hso); err != nil {
		return ctrl.Result{}, err
	}
	r.setReady(hso)
	r.setColdStartStatus(hso, key)
	hso.Status.ObservedGeneration = hso.Generation

	if err := r.statusWrites.patch(ctx, r.Client, key, orig, hso); err != nil {
		if apierrors.IsConflict(err) {
			return ctrl.Result{RequeueAfter: 50 * time.Millisecond}, nil
		}
		return ctrl.Result{}, fmt.Errorf("writing status of %s: %w", key, err)
	}
	return result, nil
}

// patchStatus writes hso's status where it differs from orig, the copy it was computed from, and
// only if orig is still the stored object (a Conflict otherwise).
//
// A merge patch holds only the fields that differ from orig. Computed from a cached copy older than
// the last write (the cache lags the API server under load), it would keep a field that write
// changed and this one sets back as it was: interceptorsTotal stayed 1 beside interceptorsReady 2
// after a replica came back, and status-only changes trigger no reconcile that would mend it. (The
// Serve controller's Serving condition was lost the same way.) The optimistic lock refuses such a
// patch; the object is read again and the status computed anew.
func patchStatus(ctx context.Context, c client.Client, orig, hso *v1.HTTPScaledObject) error {
	if equality.Semantic.DeepEqual(orig.Status, hso.Status) {
		return nil
	}
	return c.Status().Patch(ctx, hso, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// finalize releases the object once the routing controller decided to take it out of the routing table
// and a table without it was written (TableWriter.Released); the TableWriter's Notify brings the object
// back here after that write.
func (r *Reconciler) finalize(ctx context.Context, hso *v1.HTTPScaledObject, key string) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(hso, r.finalizer()) {
		return ctrl.Result{}, nil
	}
	// The app's Service is restored first, whatever happened while the operator was away.
	if err := r.removeRedirects(ctx, hso, ""); err != nil {
		return ctrl.Result{}, err
	}
	if !r.Table.Released(key, hso.UID) {
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}
	if r.ColdStarts != nil {
		r.ColdStarts.Forget(key)
	}
	orig := hso.DeepCopy()
	controllerutil.RemoveFinalizer(hso, r.finalizer())
	if err := r.Client.Patch(ctx, hso, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, fmt.Errorf("removing finalizer from %s: %w", key, err)
	}
	return ctrl.Result{}, nil
}

// syncScaledObject creates or updates the KEDA ScaledObject, or removes ours when the user owns it.
// While the object is invalid its ScaledObject is neither created nor changed: a typo in a Service
// name must not hand a running app to an autoscaler that sees no traffic for it.
func (r *Reconciler) syncScaledObject(ctx context.Context, hso *v1.HTTPScaledObject, valid bool, sched scheduler.Outcome) error {
	if !r.kedaInstalled() {
		// Routing goes on (the routing controller never reads ScaledObjects); only scaling waits.
		r.setCondition(hso, v1.ConditionScaledObjectReady, metav1.ConditionFalse, reasonKEDANotInstalled, notInstalledMessage())
		return nil
	}
	existing := &kedav1alpha1.ScaledObject{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(hso), existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading ScaledObject %s/%s: %w", hso.Namespace, hso.Name, err)
	}
	found := err == nil
	owned := found && metav1.IsControlledBy(existing, hso)

	if hso.Annotations[v1.AnnotationSkipScaledObject] == "true" {
		if owned {
			if err := r.Client.Delete(ctx, existing); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting ScaledObject %s/%s: %w", hso.Namespace, hso.Name, err)
			}
			r.event(hso, corev1.EventTypeNormal, "ScaledObjectDeleted", "deleted the ScaledObject this operator created: the skip-scaledobject annotation says you own it")
		}
		r.setCondition(hso, v1.ConditionScaledObjectReady, metav1.ConditionTrue, "UserOwned",
			"annotation "+v1.AnnotationSkipScaledObject+" is true: you manage the KEDA ScaledObject")
		return nil
	}

	if !valid {
		r.setCondition(hso, v1.ConditionScaledObjectReady, metav1.ConditionFalse, "NotValid",
			"the KEDA ScaledObject is not created or changed while the object is invalid (see condition Valid)")
		return nil
	}
	desired := buildScaledObject(hso, r.ScalerAddress, sched.Active)
	withScalerTLS(desired, r.ScalerTLS)
	if err := controllerutil.SetControllerReference(hso, desired, r.Client.Scheme()); err != nil {
		return fmt.Errorf("owning ScaledObject: %w", err)
	}
	switch {
	case !found:
		if err := r.Client.Create(ctx, desired); err != nil {
			return fmt.Errorf("creating ScaledObject %s/%s: %w", hso.Namespace, hso.Name, err)
		}
		r.event(hso, corev1.EventTypeNormal, "ScaledObjectCreated", "created KEDA ScaledObject "+hso.Name)
	case !owned:
		r.setCondition(hso, v1.ConditionScaledObjectReady, metav1.ConditionFalse, "ScaledObjectExists",
			fmt.Sprintf("a ScaledObject named %s exists and is not owned by this HTTPScaledObject; delete it, or set annotation %s=true to manage it yourself", hso.Name, v1.AnnotationSkipScaledObject))
		return nil
	case !equality.Semantic.DeepEqual(existing.Spec, desired.Spec) || !reflect.DeepEqual(existing.Labels[LabelManagedBy], managedByValue):
		existing.Spec = desired.Spec
		if existing.Labels == nil {
			existing.Labels = map[string]string{}
		}
		existing.Labels[LabelManagedBy] = managedByValue
		if err := r.Client.Update(ctx, existing); err != nil {
			return fmt.Errorf("updating ScaledObject %s/%s: %w", hso.Namespace, hso.Name, err)
		}
	}
	r.setCondition(hso, v1.ConditionScaledObjectReady, metav1.ConditionTrue, "InSync", "KEDA ScaledObject "+hso.Name+" matches the spec")
	return nil
}

// setRoutingStatus reports conflicts and which interceptors route this generation.
func (r *Reconciler) setRoutingStatus(hso *v1.HTTPScaledObject, key string, valid, refusedAll bool) {
	// The fleet first: every version it reports was known to the writer before it could be served
	// (TableWriter.announce), so the view read after it knows them all. Read the other way round, a
	// view older than the fleet counts a replica on a newer table as serving nothing.
	fleet := r.Prober.Fleet()
	w := r.Table.Written()
	c, lost := w.Conflicts[key]
	if lost && valid {
		headers := ""
		if len(c.Headers) > 0 {
			headers = fmt.Sprintf(" with the same %d header matches", len(c.Headers))
		}
		r.setCondition(hso, v1.ConditionConflict, metav1.ConditionTrue, "RouteClaimed",
			fmt.Sprintf("host %q path prefix %q%s is already routed to %s (the older object wins); this object is left out of the routing table until that changes", c.Host, c.PathPrefix, headers, c.Winner))
	} else {
		r.setCondition(hso, v1.ConditionConflict, metav1.ConditionFalse, "NoConflict", "no other object claims the same host, path and headers")
	}

	version, seq, routed := w.Introduced(key, hso.Generation)
	routed = routed && valid
	var ready int32
	total := int32(len(fleet.Replicas))
	if routed {
		ready, total = fleet.Propagation(w, seq)
	} else {
		version = ""
	}
	hso.Status.Routing = &v1.RoutingStatus{TableVersion: version, InterceptorsReady: ready, InterceptorsTotal: total}
	switch {
	case !valid:
		r.setCondition(hso, v1.ConditionRoutingPropagated, metav1.ConditionFalse, "Invalid",
			"the object is not valid (see condition Valid), so it is left out of the routing table")
	case lost:
		r.setCondition(hso, v1.ConditionRoutingPropagated, metav1.ConditionFalse, "Conflict",
			"another object holds this route (see condition Conflict), so this one is left out of the routing table")
	case refusedAll:
		r.setCondition(hso, v1.ConditionRoutingPropagated, metav1.ConditionFalse, ReasonHostsRefused,
			"none of the object's hosts is its namespace's to route (see condition HostsAccepted), so it is left out of the routing table")
	case !routed:
		r.setCondition(hso, v1.ConditionRoutingPropagated, metav1.ConditionFalse, "Pending",
			"the routing table holding this generation is not written yet")
	case total == 0:
		r.setCondition(hso, v1.ConditionRoutingPropagated, metav1.ConditionFalse, "NoInterceptors",
			"no ready interceptor replica was found to serve the routing table")
	case ready < total:
		r.setCondition(hso, v1.ConditionRoutingPropagated, metav1.ConditionFalse, "Propagating",
			fmt.Sprintf("%d of %d ready interceptors serve routing table %s or later", ready, total, version))
	default:
		r.setCondition(hso, v1.ConditionRoutingPropagated, metav1.ConditionTrue, "AllInterceptors",
			fmt.Sprintf("all %d ready interceptors serve routing table %s or later", total, version))
	}
}

// setReady summarises: Ready only when valid, not in conflict, ScaledObject in sync and propagated.
func (r *Reconciler) setReady(hso *v1.HTTPScaledObject) {
	if reason, msg, blocked := readyBlocker(hso.Status.Conditions); blocked {
		r.setCondition(hso, v1.ConditionReady, metav1.ConditionFalse, reason, msg)
		return
	}
	r.setCondition(hso, v1.ConditionReady, metav1.ConditionTrue, "Ready", "routed by every interceptor and scaled by KEDA")
}

// readyBlocker returns the reason and message of the first condition that keeps an object from
// Ready. What the user must fix comes first; RoutingPropagated last, since it only waits for the
// interceptors and would otherwise hide a Serve-mode problem for as long as they lag behind.
func readyBlocker(conds []metav1.Condition) (reason, msg string, blocked bool) {
	unlessIs := func(typ string, want metav1.ConditionStatus) (string, string, bool) {
		cond := meta.FindStatusCondition(conds, typ)
		switch {
		case cond == nil:
			return "Unknown", typ + " is not known yet", true
		case cond.Status != want:
			return cond.Reason, typ + ": " + cond.Message, true
		}
		return "", "", false
	}
	for _, c := range []struct {
		typ  string
		want metav1.ConditionStatus
	}{
		{v1.ConditionValid, metav1.ConditionTrue},
		{v1.ConditionHostsAccepted, metav1.ConditionTrue},
		{v1.ConditionConflict, metav1.ConditionFalse},
		{v1.ConditionScaledObjectReady, metav1.ConditionTrue},
	} {
		if reason, msg, blocked := unlessIs(c.typ, c.want); blocked {
			return reason, msg, true
		}
	}
	if c := meta.FindStatusCondition(conds, v1.ConditionServing); c != nil && c.Status == metav1.ConditionFalse && c.Reason != v1.ServingReasonProxying {
		// Serve mode cannot be applied to the Service: the user must act.
		return c.Reason, v1.ConditionServing + ": " + c.Message, true
	}
	return unlessIs(v1.ConditionRoutingPropagated, metav1.ConditionTrue)
}

// setCondition sets a condition and emits an event when its status changes.
func (r *Reconciler) setCondition(hso *v1.HTTPScaledObject, typ string, status metav1.ConditionStatus, reason, message string) {
	// Copy: SetStatusCondition changes the existing condition in place.
	var prev *metav1.Condition
	if c := meta.FindStatusCondition(hso.Status.Conditions, typ); c != nil {
		prev = c.DeepCopy()
	}
	meta.SetStatusCondition(&hso.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: message, ObservedGeneration: hso.Generation,
	})
	if prev != nil && prev.Status == status {
		return
	}
	// Warnings are problems the user must fix; everything else is progress.
	warning := typ == v1.ConditionConflict && status == metav1.ConditionTrue ||
		typ == v1.ConditionValid && status == metav1.ConditionFalse ||
		typ == v1.ConditionHostsAccepted && status == metav1.ConditionFalse ||
		typ == v1.ConditionTLSReady && status == metav1.ConditionFalse ||
		typ == v1.ConditionScaledObjectReady && status == metav1.ConditionFalse && reason != "NotValid" ||
		typ == v1.ConditionServing && status == metav1.ConditionFalse && reason != v1.ServingReasonProxying
	if prev == nil && !warning {
		return // the first progress conditions of a new object are not news
	}
	kind := corev1.EventTypeNormal
	if warning {
		kind = corev1.EventTypeWarning
	}
	r.event(hso, kind, typ+string(status), message)
}

func (r *Reconciler) kedaInstalled() bool { return r.KEDA == nil || r.KEDA.Installed() }

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *Reconciler) event(hso *v1.HTTPScaledObject, kind, reason, message string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(hso, nil, kind, reason, "Reconcile", "%s", message)
	}
}
