package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Serve mode (spec.mode: Serve). While the app has no ready endpoint, its workload is scaled to zero,
// or KEDA has decided to scale it to zero (its ScaledObject turned inactive and counts down the
// cooldown), the operator adds one EndpointSlice to the app's Service (the redirect) that lists the
// ready interceptors on the scaleTargetRef port, so kube-proxy sends that port's traffic to them, at
// the app's own Serve port (serveports.go), where the interceptors route every request to this app
// alone whatever its Host, hold it and wake the app as in Proxy mode. No redirect while the app does
// not own its routes (a route conflict lost, a host refused) or has no Serve port. Once the app has ready
// endpoints, KEDA finds it active and no interceptor holds a request for it, the redirect is deleted
// and traffic goes straight to the pods. Other ports of the Service are never redirected.

// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;create;update;delete

const (
	// redirectSuffix names the redirect slice after its Service.
	redirectSuffix = "-httpscale-redirect"
	// labelRedirectOwner names the HTTPScaledObject (same namespace) a redirect slice belongs to.
	labelRedirectOwner = "httpscale.dev/redirect-for"
	// serveSwitchRecheck paces the checks while a switch waits (the app to become ready, interceptors
	// to release held requests): the app's own EndpointSlices are not watched.
	serveSwitchRecheck = time.Second
	// serveDirectRecheck is how often a Serve-mode app served directly is checked for having lost
	// every ready endpoint without its workload being scaled (crashes); a scale to zero is seen at
	// once through the workload watch.
	serveDirectRecheck = 10 * time.Second
)

// ServeOptions configure Serve mode.
type ServeOptions struct {
	// ClusterDomain completes the Service's host names (<svc>.<ns>.svc.<domain>).
	ClusterDomain string
}

func redirectName(service string) string { return service + redirectSuffix }

// serveOwner returns the name of the Serve-mode object that owns the redirect of hso's Service: the
// oldest (then first by name) live Serve-mode object in the namespace whose scaleTargetRef names the
// Service. Empty when there is none. Reads the cache.
func (r *Reconciler) serveOwner(ctx context.Context, hso *v1.HTTPScaledObject) (string, error) {
	service := hso.Spec.ScaleTargetRef.Service
	var list v1.HTTPScaledObjectList
	if err := r.Client.List(ctx, &list, client.InNamespace(hso.Namespace), client.MatchingFields{indexServices: service}); err != nil {
		return "", fmt.Errorf("listing HTTPScaledObjects of Service %s/%s: %w", hso.Namespace, service, err)
	}
	var best *v1.HTTPScaledObject
	for i := range list.Items {
		o := &list.Items[i]
		if !o.Spec.Serve() || o.Spec.ScaleTargetRef.Service != service || !o.DeletionTimestamp.IsZero() {
			continue
		}
		if best == nil || o.CreationTimestamp.Before(&best.CreationTimestamp) ||
			o.CreationTimestamp.Equal(&best.CreationTimestamp) && o.Name < best.Name {
			best = o
		}
	}
	if best == nil {
		return "", nil
	}
	return best.Name, nil
}

// serveUnsupported says why Serve mode cannot redirect svc ("" when it can).
func serveUnsupported(svc *corev1.Service) string {
	switch {
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		return fmt.Sprintf("Service %s is headless: its DNS name resolves to the pods themselves, so callers cannot be redirected while the app is at zero; use a ClusterIP Service (or mode Proxy)", svc.Name)
	case len(svc.Spec.Selector) == 0:
		return fmt.Sprintf("Service %s has no selector: its endpoints are not managed by Kubernetes; give it a selector matching the workload's pods (or use mode Proxy)", svc.Name)
	}
	return ""
}

// serveHosts adds the Service's in-cluster host names to entry when hso owns its Service's redirect.
func (r *Reconciler) serveHosts(ctx context.Context, hso *v1.HTTPScaledObject, svc *corev1.Service, entry *routing.Entry) error {
	if !hso.Spec.Serve() || serveUnsupported(svc) != "" {
		return nil
	}
	owner, err := r.serveOwner(ctx, hso)
	if err != nil {
		return err
	}
	if owner != hso.Name {
		return nil
	}
	for _, h := range routing.ServiceHosts(svc.Name, svc.Namespace, r.Serve.ClusterDomain, svc.Spec.ClusterIPs) {
		if !slices.Contains(entry.Hosts, h) {
			entry.Hosts = append(entry.Hosts, h)
		}
	}
	return nil
}

// syncServe keeps hso's redirect as its mode, its Service and its app's readiness require, sets the
// Serving condition and returns when to look again (0: only on a watch event).
func (r *Reconciler) syncServe(ctx context.Context, hso *v1.HTTPScaledObject, key string, valid bool) (time.Duration, error) {
	had := meta.FindStatusCondition(hso.Status.Conditions, v1.ConditionServing) != nil
	if !hso.Spec.Serve() || !valid {
		// Proxy mode (or nothing valid to serve): the Service is the user's, exactly as written. The
		// condition says a redirect may exist, so Proxy objects cost no API call.
		if had {
			if err := r.removeRedirects(ctx, hso, ""); err != nil {
				return 0, err
			}
			meta.RemoveStatusCondition(&hso.Status.Conditions, v1.ConditionServing)
		}
		return 0, nil
	}
	sw, blockedReason, blockedMsg, err := r.serveSwitch(ctx, hso)
	if err != nil {
		return 0, err
	}
	if blockedReason != "" {
		if err := r.removeRedirects(ctx, hso, ""); err != nil {
			return 0, err
		}
		r.setCondition(hso, v1.ConditionServing, metav1.ConditionFalse, blockedReason, blockedMsg)
		switch blockedReason {
		case ServingReasonNoServePort:
			return serveSwitchRecheck, nil // the table with its port is written within moments
		case ServingReasonRoutesNotOwned:
			return serveDirectRecheck, nil // a conflict or a refusal that ends is not watched here
		}
		return 0, nil
	}
	// A redirect of this object for another Service (scaleTargetRef.service was changed) goes first.
	if err := r.removeRedirects(ctx, hso, sw.svc.Name); err != nil {
		return 0, err
	}
	if sw.replicas == 0 || sw.ready == 0 || sw.goingToZero {
		return r.redirect(ctx, hso, sw, had)
	}
	return r.serveDirect(ctx, hso, key, sw)
}

// serveSwitch is what one Serve-mode decision reads: the Service and its port, the workload, the
// app's ready endpoints, the ready interceptors and the redirect slice as it is.
type serveSwitch struct {
	svc         *corev1.Service
	portName    string
	port        int32  // the app's Serve port on the interceptors
	portDesc    string // "port 80" or "port http (80)", for messages
	replicas    int32
	ready       int
	goingToZero bool
	ips         []string // the ready interceptors
	existing    *discoveryv1.EndpointSlice
	redirected  bool // existing is the redirect slice
}

// serveSwitch reads what the decision needs, or says why Serve mode cannot be applied to the Service
// (a reason and message for the Serving condition).
func (r *Reconciler) serveSwitch(ctx context.Context, hso *v1.HTTPScaledObject) (sw serveSwitch, reason, msg string, err error) {
	ref := hso.Spec.ScaleTargetRef
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: hso.Namespace, Name: ref.Service}, svc); err != nil {
		return sw, "", "", fmt.Errorf("reading Service %s/%s: %w", hso.Namespace, ref.Service, err)
	}
	backend, err := resolvePort(svc, ref.Port, ref.PortName, "scaleTargetRef")
	if err != nil {
		return sw, "", "", err // resolve accepted it a moment ago; the Service changed since and a watch event follows
	}
	owner, err := r.serveOwner(ctx, hso)
	if err != nil {
		return sw, "", "", err
	}
	if owner != hso.Name {
		return sw, v1.ServingReasonServiceClaimed, fmt.Sprintf(
			"Service %s is already served by HTTPScaledObject %s (the older object wins); this object is reached through the interceptor Service with its hosts only. Point it at another Service or use mode Proxy", svc.Name, owner), nil
	}
	if msg := serveUnsupported(svc); msg != "" {
		return sw, v1.ServingReasonUnsupportedService, msg, nil
	}
	port, reason, msg := r.servePort(hso)
	if reason != "" {
		return sw, reason, msg, nil
	}
	replicas, podLabels, err := r.workload(ctx, hso)
	if err != nil {
		return sw, "", "", err
	}
	if podLabels != nil && !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(podLabels)) {
		return sw, v1.ServingReasonSelectorMismatch, fmt.Sprintf(
			"the selector of Service %s (%s) does not select the pods of %s %s (labels %s): redirecting it could never end; fix the selector or the pod template labels",
			svc.Name, labels.SelectorFromSet(svc.Spec.Selector), ref.Kind, ref.Name, labels.Set(podLabels)), nil
	}
	sw = serveSwitch{svc: svc, portName: backend.PortName, port: port, portDesc: fmt.Sprintf("port %d", backend.Port), replicas: replicas}
	if backend.PortName != "" {
		sw.portDesc = fmt.Sprintf("port %s (%d)", backend.PortName, backend.Port)
	}
	if sw.ready, err = r.readyEndpoints(ctx, svc.Namespace, svc.Name, backend.PortName); err != nil {
		return sw, "", "", err
	}
	if sw.ips, err = r.interceptorIPs(ctx); err != nil {
		return sw, "", "", err
	}
	sw.existing = &discoveryv1.EndpointSlice{}
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: svc.Namespace, Name: redirectName(svc.Name)}, sw.existing)
	if err != nil && !apierrors.IsNotFound(err) {
		return sw, "", "", fmt.Errorf("reading redirect EndpointSlice %s/%s: %w", svc.Namespace, redirectName(svc.Name), err)
	}
	sw.redirected = err == nil
	if sw.redirected && sw.existing.Labels[discoveryv1.LabelManagedBy] != endpoints.RedirectManagedBy {
		return sw, v1.ServingReasonServiceClaimed, fmt.Sprintf(
			"an EndpointSlice named %s that this operator does not manage exists; delete or rename it", sw.existing.Name), nil
	}
	if sw.goingToZero, err = r.goingToZero(ctx, hso); err != nil {
		return sw, "", "", err
	}
	return sw, "", "", nil
}

// redirect puts (or keeps) the Service's redirect in place while the app is at zero, has no ready
// endpoint, or KEDA has decided to scale it to zero.
func (r *Reconciler) redirect(ctx context.Context, hso *v1.HTTPScaledObject, sw serveSwitch, had bool) (time.Duration, error) {
	ref := hso.Spec.ScaleTargetRef
	if !had && !sw.redirected {
		// The Serving condition is what tells a later reconcile that a redirect may exist (a Proxy
		// object without it costs no API call). It is stored before the slice is created, not with
		// the rest of the status at the end: an operator stopped in between, with the object then
		// switched to Proxy, would otherwise leave the Service redirected for good.
		// A copy is patched: the reply must not overwrite what this reconcile has set in hso.
		intent := hso.DeepCopy()
		meta.SetStatusCondition(&intent.Status.Conditions, metav1.Condition{
			Type: v1.ConditionServing, Status: metav1.ConditionFalse, Reason: v1.ServingReasonProxying, ObservedGeneration: hso.Generation,
			Message: fmt.Sprintf("Service %s %s is being redirected to the interceptors", sw.svc.Name, sw.portDesc),
		})
		if err := r.Client.Status().Patch(ctx, intent, client.MergeFrom(hso)); err != nil {
			return 0, fmt.Errorf("recording the coming redirect of Service %s in the status: %w", sw.svc.Name, err)
		}
	}
	if err := r.putRedirect(ctx, hso, sw.svc, sw.portName, sw.port, sw.ips, sw.existing, sw.redirected); err != nil {
		return 0, err
	}
	var why string
	switch {
	case sw.replicas == 0:
		why = fmt.Sprintf("%s %s is scaled to zero", ref.Kind, ref.Name)
	case sw.ready == 0:
		why = fmt.Sprintf("%s %s has no ready endpoint yet", ref.Kind, ref.Name)
	default:
		why = fmt.Sprintf("KEDA finds every trigger of %s %s idle and scales it to zero after the cooldown unless traffic returns; the redirect is in place while its %d endpoints still serve", ref.Kind, ref.Name, sw.ready)
	}
	r.setCondition(hso, v1.ConditionServing, metav1.ConditionFalse, v1.ServingReasonProxying, fmt.Sprintf(
		"%s: Service %s %s is redirected to %d ready interceptors, which hold requests and wake the app", why, sw.svc.Name, sw.portDesc, len(sw.ips)))
	if sw.replicas > 0 && sw.ready == 0 {
		return serveSwitchRecheck, nil
	}
	return serveDirectRecheck, nil
}

// serveDirect takes the redirect out once the app has ready endpoints, KEDA finds it active and no
// interceptor holds a request for it, and reports the Service as served directly.
func (r *Reconciler) serveDirect(ctx context.Context, hso *v1.HTTPScaledObject, key string, sw serveSwitch) (time.Duration, error) {
	if sw.redirected {
		held, err := r.heldByInterceptors(ctx, key)
		if err != nil || held > 0 {
			// Keep the interceptors in the Service until they have handed every held request over;
			// keep the list current meanwhile.
			if err := r.putRedirect(ctx, hso, sw.svc, sw.portName, sw.port, sw.ips, sw.existing, true); err != nil {
				return 0, err
			}
			msg := fmt.Sprintf("%d endpoints are ready; the redirect of Service %s %s stays until the interceptors hold no request for the app (%d held)", sw.ready, sw.svc.Name, sw.portDesc, held)
			if err != nil {
				msg = fmt.Sprintf("%d endpoints are ready; the redirect of Service %s %s stays until every interceptor confirms it holds no request for the app: %v", sw.ready, sw.svc.Name, sw.portDesc, err)
			}
			r.setCondition(hso, v1.ConditionServing, metav1.ConditionFalse, v1.ServingReasonProxying, msg)
			return serveSwitchRecheck, nil
		}
		existing := sw.existing
		if err := r.Client.Delete(ctx, existing, client.Preconditions{ResourceVersion: &existing.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("deleting redirect EndpointSlice %s/%s: %w", existing.Namespace, existing.Name, err)
		}
		r.event(hso, corev1.EventTypeNormal, "RedirectRemoved", fmt.Sprintf(
			"%d endpoints are ready and no interceptor holds a request: Service %s %s goes straight to the pods", sw.ready, sw.svc.Name, sw.portDesc))
	}
	r.setCondition(hso, v1.ConditionServing, metav1.ConditionTrue, v1.ServingReasonDirect, fmt.Sprintf(
		"Service %s %s sends traffic straight to %d ready endpoints; the interceptors are out of the path", sw.svc.Name, sw.portDesc, sw.ready))
	return serveDirectRecheck, nil
}

// goingToZero reports whether KEDA has decided to take hso's app to zero: the app's ScaledObject
// (generated or the user's, same name) reports no active trigger (condition Active=False) and its
// minReplicaCount is 0, so KEDA sets the workload to zero replicas once the cooldown has passed
// since the last active poll, unless traffic returns first. The redirect goes in place at that
// decision rather than at the scale-down itself, so kube-proxy lists the interceptors as ready
// endpoints long before the last pod stops serving (see docs/configuration.md#serve-mode-switch-timings).
func (r *Reconciler) goingToZero(ctx context.Context, hso *v1.HTTPScaledObject) (bool, error) {
	if !r.kedaInstalled() {
		return false, nil // nothing scales the app
	}
	so := &kedav1alpha1.ScaledObject{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(hso), so); err != nil {
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return false, fmt.Errorf("reading ScaledObject %s/%s: %w", hso.Namespace, hso.Name, err)
	}
	return ptr.Deref(so.Spec.MinReplicaCount, 0) == 0 && kedaActive(so) == metav1.ConditionFalse, nil
}

// kedaActive is the status of the ScaledObject's Active condition ("" when KEDA has not set it).
func kedaActive(so *kedav1alpha1.ScaledObject) metav1.ConditionStatus {
	for _, c := range so.Status.Conditions {
		if c.Type == kedav1alpha1.ConditionActive {
			return c.Status
		}
	}
	return ""
}

// putRedirect creates or updates the redirect slice of svc so that it lists ips on portName, at the
// app's Serve port on the interceptors.
func (r *Reconciler) putRedirect(ctx context.Context, hso *v1.HTTPScaledObject, svc *corev1.Service, portName string, port int32, ips []string, existing *discoveryv1.EndpointSlice, found bool) error {
	desired := redirectSlice(hso.Name, svc, portName, port, ips)
	if err := controllerutil.SetControllerReference(hso, desired, r.Client.Scheme()); err != nil {
		return fmt.Errorf("owning redirect EndpointSlice: %w", err)
	}
	w := r.Client
	if !found {
		if err := w.Create(ctx, desired); err != nil {
			return fmt.Errorf("creating redirect EndpointSlice %s/%s: %w", desired.Namespace, desired.Name, err)
		}
		r.event(hso, corev1.EventTypeNormal, "RedirectCreated", fmt.Sprintf(
			"Service %s is redirected to %d interceptors while the app has no ready endpoint", svc.Name, len(ips)))
		return nil
	}
	if equality.Semantic.DeepEqual(existing.Endpoints, desired.Endpoints) && equality.Semantic.DeepEqual(existing.Ports, desired.Ports) &&
		existing.AddressType == desired.AddressType && equality.Semantic.DeepEqual(existing.Labels, desired.Labels) &&
		equality.Semantic.DeepEqual(existing.OwnerReferences, desired.OwnerReferences) {
		return nil
	}
	if existing.AddressType != desired.AddressType {
		// addressType is immutable: replace the slice.
		if err := w.Delete(ctx, existing); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("replacing redirect EndpointSlice %s/%s: %w", existing.Namespace, existing.Name, err)
		}
		if err := w.Create(ctx, desired); err != nil {
			return fmt.Errorf("creating redirect EndpointSlice %s/%s: %w", desired.Namespace, desired.Name, err)
		}
		return nil
	}
	existing.Labels, existing.OwnerReferences = desired.Labels, desired.OwnerReferences
	existing.Endpoints, existing.Ports = desired.Endpoints, desired.Ports
	if err := w.Update(ctx, existing); err != nil {
		return fmt.Errorf("updating redirect EndpointSlice %s/%s: %w", existing.Namespace, existing.Name, err)
	}
	return nil
}

// redirectSlice is the slice that sends svc's port portName to the interceptors at ips on the app's
// Serve port (servePort), where they route every request to this app alone.
// Its port is named exactly as the Service port, which is how kube-proxy pairs them; the other ports
// of the Service get no endpoint from it. IPv4 addresses are used when there are any (IPv6 otherwise).
func redirectSlice(owner string, svc *corev1.Service, portName string, servePort int32, ips []string) *discoveryv1.EndpointSlice {
	var v4, v6 []string
	for _, ip := range ips {
		if strings.Contains(ip, ":") {
			v6 = append(v6, ip)
		} else {
			v4 = append(v4, ip)
		}
	}
	addrType, addrs := discoveryv1.AddressTypeIPv4, v4
	if len(v4) == 0 && len(v6) > 0 {
		addrType, addrs = discoveryv1.AddressTypeIPv6, v6
	}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      redirectName(svc.Name),
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   endpoints.RedirectManagedBy,
				LabelManagedBy:               managedByValue,
				labelRedirectOwner:           owner,
			},
		},
		AddressType: addrType,
		Ports: []discoveryv1.EndpointPort{{
			Name: ptr.To(portName), Port: ptr.To(servePort), Protocol: ptr.To(corev1.ProtocolTCP),
		}},
		Endpoints: []discoveryv1.Endpoint{},
	}
	for _, ip := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
		})
	}
	return s
}

// removeRedirects deletes the redirect slices that belong to hso, except the one of Service keep.
func (r *Reconciler) removeRedirects(ctx context.Context, hso *v1.HTTPScaledObject, keep string) error {
	var list discoveryv1.EndpointSliceList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(hso.Namespace), client.MatchingLabels{
		discoveryv1.LabelManagedBy: endpoints.RedirectManagedBy, labelRedirectOwner: hso.Name,
	}); err != nil {
		return fmt.Errorf("listing redirect EndpointSlices of %s/%s: %w", hso.Namespace, hso.Name, err)
	}
	for i := range list.Items {
		s := &list.Items[i]
		if keep != "" && s.Name == redirectName(keep) {
			continue
		}
		if err := r.Client.Delete(ctx, s, client.Preconditions{ResourceVersion: &s.ResourceVersion}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting redirect EndpointSlice %s/%s: %w", s.Namespace, s.Name, err)
		}
		r.event(hso, corev1.EventTypeNormal, "RedirectRemoved", fmt.Sprintf(
			"Service %s is restored: its traffic goes to its own endpoints only", s.Labels[discoveryv1.LabelServiceName]))
	}
	return nil
}

// readyEndpoints counts the ready endpoints of Service service on portName in the slices the
// Kubernetes controllers (or the user) keep, never our redirect.
func (r *Reconciler) readyEndpoints(ctx context.Context, namespace, service, portName string) (int, error) {
	notOurs, err := labels.NewRequirement(discoveryv1.LabelManagedBy, selection.NotEquals, []string{endpoints.RedirectManagedBy})
	if err != nil {
		return 0, err
	}
	ofService, err := labels.NewRequirement(discoveryv1.LabelServiceName, selection.Equals, []string{service})
	if err != nil {
		return 0, fmt.Errorf("selecting EndpointSlices of Service %s: %w", service, err)
	}
	var list discoveryv1.EndpointSliceList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(namespace),
		client.MatchingLabelsSelector{Selector: labels.NewSelector().Add(*ofService, *notOurs)}); err != nil {
		return 0, fmt.Errorf("listing EndpointSlices of Service %s/%s: %w", namespace, service, err)
	}
	seen := map[string]bool{}
	for _, s := range list.Items {
		if !slices.ContainsFunc(s.Ports, func(p discoveryv1.EndpointPort) bool { return ptr.Deref(p.Name, "") == portName }) {
			continue
		}
		for _, e := range s.Endpoints {
			if ptr.Deref(e.Conditions.Ready, true) && !ptr.Deref(e.Conditions.Terminating, false) && len(e.Addresses) > 0 {
				seen[e.Addresses[0]] = true
			}
		}
	}
	return len(seen), nil
}

// workload reads the scale target's desired replicas (its /scale subresource) and, for kinds with a
// pod template (Deployment, StatefulSet, Argo Rollout...), the template's labels (nil otherwise).
func (r *Reconciler) workload(ctx context.Context, hso *v1.HTTPScaledObject) (int32, map[string]string, error) {
	ref := hso.Spec.ScaleTargetRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return 0, nil, fmt.Errorf("scaleTargetRef.apiVersion %q: %w", ref.APIVersion, err)
	}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gv.WithKind(ref.Kind))
	obj.SetNamespace(hso.Namespace)
	obj.SetName(ref.Name)
	// The operator may read Deployments and StatefulSets; of other kinds only /scale, so their pod
	// labels are not checked.
	var podLabels map[string]string
	err = r.APIReader.Get(ctx, client.ObjectKey{Namespace: hso.Namespace, Name: ref.Name}, obj)
	switch {
	case err == nil:
		if l, found, err := unstructured.NestedStringMap(obj.Object, "spec", "template", "metadata", "labels"); err == nil && found {
			podLabels = l
		}
	case !apierrors.IsForbidden(err):
		return 0, nil, fmt.Errorf("reading %s %s/%s: %w", ref.Kind, hso.Namespace, ref.Name, err)
	}
	scale := &unstructured.Unstructured{}
	scale.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
	if err := r.Client.SubResource("scale").Get(ctx, obj, scale); err != nil {
		return 0, nil, fmt.Errorf("reading scale of %s %s/%s: %w", ref.Kind, hso.Namespace, ref.Name, err)
	}
	replicas, _, err := unstructured.NestedInt64(scale.Object, "spec", "replicas")
	if err != nil {
		return 0, nil, fmt.Errorf("reading scale of %s %s/%s: %w", ref.Kind, hso.Namespace, ref.Name, err)
	}
	return int32(replicas), podLabels, nil
}

// interceptorIPs returns the pod IPs of the ready interceptors (from their admin Service's slices).
func (r *Reconciler) interceptorIPs(ctx context.Context) ([]string, error) {
	addrs, err := r.Prober.readyAddresses(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing interceptor EndpointSlices: %w", err)
	}
	ips := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if host, _, err := net.SplitHostPort(a); err == nil {
			ips = append(ips, host)
		}
	}
	slices.Sort(ips)
	return slices.Compact(ips), nil
}

// heldByInterceptors asks every ready interceptor how many requests it holds for app key (waiting
// for a ready endpoint). Requests in flight to the app's ready pods are not waited for: removing the
// redirect changes where new connections go, not the interceptor that forwards them.
func (r *Reconciler) heldByInterceptors(ctx context.Context, key string) (int64, error) {
	addrs, err := r.Prober.readyAddresses(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing interceptor EndpointSlices: %w", err)
	}
	var (
		mu   sync.Mutex
		held int64
		errs []error
		wg   sync.WaitGroup
	)
	for _, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, r.Prober.Timeout)
			defer cancel()
			counts, err := r.Prober.Admin.Counts(cctx, "http://"+addr, 0, "")
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("interceptor %s: %w", addr, err))
				return
			}
			i, found := slices.BinarySearchFunc(counts.Apps, key, func(a admin.AppCount, k string) int { return strings.Compare(a.Key, k) })
			if found {
				held += counts.Apps[i].Held
			}
		}()
	}
	wg.Wait()
	return held, errors.Join(errs...)
}

// servePeers maps an HTTPScaledObject in (or leaving) Serve mode to the other Serve-mode objects on
// the same Service, whose ownership of the Service's redirect may change with it.
func servePeers(c client.Client) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		hso, ok := obj.(*v1.HTTPScaledObject)
		if !ok || !hso.Spec.Serve() && meta.FindStatusCondition(hso.Status.Conditions, v1.ConditionServing) == nil {
			return nil
		}
		var list v1.HTTPScaledObjectList
		if err := c.List(ctx, &list, client.InNamespace(hso.Namespace), client.MatchingFields{indexServices: hso.Spec.ScaleTargetRef.Service}); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			o := &list.Items[i]
			if o.Name != hso.Name && o.Spec.Serve() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
			}
		}
		return reqs
	}
}

// serveByTarget maps a workload whose spec changed (a scale to zero among others) to the Serve-mode
// objects that scale it, so the redirect goes in place as the pods start to go.
func serveByTarget(c client.Client, value func(string) string) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		var list v1.HTTPScaledObjectList
		if err := c.List(ctx, &list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{indexTarget: value(obj.GetName())}); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range list.Items {
			if list.Items[i].Spec.Serve() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
			}
		}
		return reqs
	}
}

// serveByScaledObject maps a ScaledObject whose Active condition changed to the Serve-mode object of
// the same name: KEDA's decision to scale the app to zero puts the redirect in place, activity takes
// it out again.
func serveByScaledObject(c client.Client) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		hso := &v1.HTTPScaledObject{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), hso); err != nil || !hso.Spec.Serve() {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(obj)}}
	}
}

// kedaActiveChanged passes ScaledObject updates that flip the Active condition.
var kedaActiveChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*kedav1alpha1.ScaledObject)
		n, ok2 := e.ObjectNew.(*kedav1alpha1.ScaledObject)
		return ok1 && ok2 && kedaActive(o) != kedaActive(n)
	},
}

// serveAll maps a change of the interceptors' admin EndpointSlices (a replica ready, draining or
// gone) to every Serve-mode object, so redirects list the ready interceptors within one reconcile,
// not at the next probe round: a draining interceptor leaves them during its drain delay.
func serveAll(c client.Client) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list v1.HTTPScaledObjectList
		if err := c.List(ctx, &list, client.MatchingFields{indexServe: "true"}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		}
		return reqs
	}
}
