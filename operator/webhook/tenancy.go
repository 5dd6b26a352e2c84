package webhook

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/tenancy"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Tenancy is the admission side of what one tenant may not do to another: claim a host another
// namespace owns (or the policy keeps from it), send traffic through a Service a tenant could point
// anywhere, name cluster-wide KEDA credentials, or make one routing entry big enough to hurt the
// shared table. It reads the operator's cache (every replica serves the webhook), so a decision a
// cache that lags lets through is left to the elected operator, which refuses it with a condition on
// the object; the webhook turns most such objects away before they are stored.
type Tenancy struct {
	// Client reads the cache (HTTPScaledObjects, HostClaims and Services with tenancy's indexes,
	// HTTPScalePolicies, Namespace metadata).
	Client client.Reader
	// Decider and Policies are the decision the routing controller makes too.
	Decider  tenancy.Decider
	Policies *tenancy.PolicyCache
	// Fleet is the webhook's fleet: its objects are the older claimants a new object waits for.
	Fleet string
	// MaxEntryBytes is the per-object budget of a routing entry's stored form.
	MaxEntryBytes int
	// Now is the clock of a new object's age; nil means time.Now.
	Now func() time.Time
}

// check returns what the tenancy rules refuse in obj (old is the stored object of an update, nil on
// create). Hosts an update keeps are not decided again: the object still gets a condition if they are
// refused, but a policy narrowed after its creation does not block unrelated edits.
func (t *Tenancy) check(ctx context.Context, obj, old *v1.HTTPScaledObject) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	view := &tenancy.CacheView{Ctx: ctx, Client: t.Client, Policies: t.Policies, Serves: func(o *v1.HTTPScaledObject) bool {
		return o.Spec.FleetName() == t.Fleet && !(o.Namespace == obj.Namespace && o.Name == obj.Name)
	}}
	claimant := tenancy.ClaimantOf(obj)
	if claimant.Created.IsZero() {
		claimant.Created = t.now()
	}
	for i, d := range t.Decider.Decide(view, claimant) {
		if d.Granted || old != nil && slices.Contains(old.Spec.Hosts, v1.Host(d.Host)) {
			continue
		}
		errs = append(errs, field.Forbidden(spec.Child("hosts").Index(i), d.Message+
			"; objects of one namespace share a host by path and headers, other namespaces cannot route it (see docs/security.md)"))
	}
	errs = append(errs, t.checkBackends(ctx, obj)...)
	if sc := obj.Spec.Scaling; sc != nil {
		for i, tr := range sc.Triggers {
			if tr.AuthenticationRef == nil || tr.AuthenticationRef.Kind != "ClusterTriggerAuthentication" {
				continue
			}
			nsLabels, _ := view.NamespaceLabels(obj.Namespace)
			if !view.Policy().AllowClusterTriggerAuthentication(obj.Namespace, nsLabels) {
				errs = append(errs, field.Forbidden(spec.Child("scaling", "triggers").Index(i).Child("authenticationRef"),
					fmt.Sprintf("ClusterTriggerAuthentication %s holds credentials of the whole cluster, and no HTTPScalePolicy lets this namespace use one (spec.clusterTriggerAuthentication); use a TriggerAuthentication in this namespace", tr.AuthenticationRef.Name)))
			}
		}
	}
	if size := EntrySize(obj); t.MaxEntryBytes > 0 && size > t.MaxEntryBytes {
		errs = append(errs, field.Forbidden(spec, fmt.Sprintf("the object's routing entry would be %d bytes, over the per-object budget of %d bytes; shorten its placeholder, waiting page, static responses or header matches, or split it into several objects", size, t.MaxEntryBytes)))
	}
	return errs
}

// checkBackends refuses Services the interceptors would reach through a name the tenant chose: an
// ExternalName Service anywhere, a headless one where the interceptors dial the Service's address
// (static routes, the fallback, forwarding.viaService). A Service that does not exist yet is left to
// the operator (condition Valid).
func (t *Tenancy) checkBackends(ctx context.Context, obj *v1.HTTPScaledObject) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	check := func(name string, p *field.Path, addressed bool) {
		svc := &corev1.Service{}
		if err := t.Client.Get(ctx, client.ObjectKey{Namespace: obj.Namespace, Name: name}, svc); err != nil {
			return
		}
		switch {
		case svc.Spec.Type == corev1.ServiceTypeExternalName:
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("Service %s is of type ExternalName: the interceptors would dial a DNS name it chooses from their own network position; use a Service with a cluster IP", name)))
		case addressed && svc.Spec.ClusterIP == corev1.ClusterIPNone:
			errs = append(errs, field.Forbidden(p, fmt.Sprintf("Service %s is headless: the interceptors forward here to a Service's cluster IP and never resolve a name; give it a cluster IP", name)))
		}
	}
	ref := obj.Spec.ScaleTargetRef
	check(ref.Service, spec.Child("scaleTargetRef", "service"), obj.Spec.Forwarding != nil && obj.Spec.Forwarding.ViaService)
	if cs := obj.Spec.ColdStart; cs != nil && cs.Fallback != nil {
		check(cs.Fallback.Service, spec.Child("coldStart", "fallback", "service"), true)
	}
	for i, sr := range obj.Spec.StaticRoutes {
		if sr.Service != nil {
			check(sr.Service.Name, spec.Child("staticRoutes").Index(i).Child("service", "name"), true)
		}
	}
	return errs
}

func (t *Tenancy) now() time.Time {
	if t.Now != nil {
		return t.Now()
	}
	return time.Now()
}

// EntrySize is the size of the routing entry's stored form the spec makes, as the operator measures it
// against the per-object budget (the operator adds a few dozen bytes it resolves: ports, cluster IPs).
func EntrySize(obj *v1.HTTPScaledObject) int {
	ref := obj.Spec.ScaleTargetRef
	port := int32(1)
	if ref.Port != nil {
		port = *ref.Port
	}
	target := routing.Backend{Service: ref.Service, Port: port, Protocol: routing.ProtocolHTTP}
	if ref.PortName != nil {
		target.PortName = *ref.PortName
	}
	var fallback *routing.Backend
	if cs := obj.Spec.ColdStart; cs != nil && cs.Fallback != nil {
		fallback = &routing.Backend{Service: cs.Fallback.Service, Port: 1, Protocol: routing.ProtocolHTTP}
	}
	return routing.EncodedSize(routing.EntryFromSpec(obj, target, fallback))
}
