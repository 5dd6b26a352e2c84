package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/tenancy"
	"github.com/httpscale/httpscale/pkg/appkey"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Host ownership between namespaces (operator/tenancy): the routing controller decides, for every
// object, which of its hosts its namespace may route, creates the HostClaim of a host its namespace
// is the first to claim before the host is routed, and hands the table only the granted hosts. An
// object keeps the hosts it is granted when others are refused. Only the elected operator runs the
// routing controller, and a HostClaim's create succeeds for one namespace only, so two namespaces
// can never both be granted one host, whatever the caches show.

// +kubebuilder:rbac:groups=httpscale.dev,resources=hostclaims,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=httpscale.dev,resources=hostclaims/status,verbs=update
// +kubebuilder:rbac:groups=httpscale.dev,resources=httpscalepolicies,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// ownership is the operator's side of host ownership: the decisions of the routing controller, kept
// for the status and the claim keeper. Safe for concurrent use.
type ownership struct {
	decider  tenancy.Decider
	policies *tenancy.PolicyCache
	client   client.Client // cached reads, claim creates
	live     client.Reader // reads a claim another writer created a moment ago
	serves   func(*v1.HTTPScaledObject) bool

	mu sync.Mutex
	// verdicts holds each object's last decision.
	verdicts map[string]hostVerdict
	// users maps a host to the objects ("namespace/name") it is granted to.
	users map[string]map[string]struct{}
}

// hostVerdict is the decision on one object's hosts.
type hostVerdict struct {
	uid        types.UID
	generation int64
	granted    []string
	refused    []tenancy.Decision
}

func newOwnership(c client.Client, live client.Reader, clusterDomain string, serves func(*v1.HTTPScaledObject) bool) *ownership {
	return &ownership{
		decider: tenancy.Decider{ClusterDomain: clusterDomain}, policies: &tenancy.PolicyCache{},
		client: c, live: live, serves: serves,
		verdicts: map[string]hostVerdict{}, users: map[string]map[string]struct{}{},
	}
}

// View returns the decision's view of the cluster through the cache.
func (o *ownership) view(ctx context.Context) *tenancy.CacheView {
	return &tenancy.CacheView{Ctx: ctx, Client: o.client, Policies: o.policies, Serves: o.serves}
}

// admit decides hso's hosts, creates the HostClaims of the hosts its namespace claims first, records
// the verdict and returns it. It reports changed when the verdict differs from the last one.
func (o *ownership) admit(ctx context.Context, hso *v1.HTTPScaledObject) (hostVerdict, bool, error) {
	ds := o.decider.Decide(o.view(ctx), tenancy.ClaimantOf(hso))
	for i, d := range ds {
		if !d.Claim {
			continue
		}
		owner, err := o.createClaim(ctx, d.Host, hso.Namespace)
		if err != nil {
			return hostVerdict{}, false, err
		}
		if owner != hso.Namespace {
			ds[i] = tenancy.Decision{Host: d.Host, Reason: v1.HostsReasonClaimed,
				Message: fmt.Sprintf("host %s belongs to another namespace (the first to claim it)", d.Host)}
		}
	}
	v := hostVerdict{uid: hso.UID, generation: hso.Generation, refused: tenancy.Refused(ds)}
	for _, d := range ds {
		if d.Granted {
			v.granted = append(v.granted, d.Host)
		}
	}
	return v, o.record(appkey.New(hso.Namespace, hso.Name).String(), &v), nil
}

// createClaim creates the HostClaim of host for namespace ns and returns the namespace that owns
// the host: ns, or the namespace of a claim another writer created first.
func (o *ownership) createClaim(ctx context.Context, host, ns string) (string, error) {
	hc := &v1.HostClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v1.HostClaimName(host), Labels: map[string]string{v1.LabelClaimManagedBy: v1.ClaimManagedByOperator}},
		Spec:       v1.HostClaimSpec{Host: v1.Host(host), Namespace: v1.NamespaceName(ns)},
	}
	err := o.client.Create(ctx, hc)
	if err == nil {
		return ns, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("claiming host %s for namespace %s: %w", host, ns, err)
	}
	existing := &v1.HostClaim{}
	if err := o.live.Get(ctx, client.ObjectKey{Name: hc.Name}, existing); err != nil {
		return "", fmt.Errorf("reading the HostClaim of host %s: %w", host, err)
	}
	if string(existing.Spec.Host) != host {
		return "", fmt.Errorf("HostClaim %s names host %s, not %s", hc.Name, existing.Spec.Host, host)
	}
	return string(existing.Spec.Namespace), nil
}

// record stores key's verdict (nil: the object is gone or no longer routed by this operator) and
// reports whether it changed.
func (o *ownership) record(key string, v *hostVerdict) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	old, had := o.verdicts[key]
	for _, h := range old.granted {
		if u := o.users[h]; u != nil {
			delete(u, key)
			if len(u) == 0 {
				delete(o.users, h)
			}
		}
	}
	if v == nil {
		delete(o.verdicts, key)
		return had
	}
	o.verdicts[key] = *v
	for _, h := range v.granted {
		if o.users[h] == nil {
			o.users[h] = map[string]struct{}{}
		}
		o.users[h][key] = struct{}{}
	}
	return !had || old.uid != v.uid || old.generation != v.generation || !slices.Equal(old.granted, v.granted) ||
		!slices.EqualFunc(old.refused, v.refused, func(a, b tenancy.Decision) bool { return a == b })
}

// verdict returns the decision recorded for the object at its generation.
func (o *ownership) verdict(key string, uid types.UID, generation int64) (hostVerdict, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.verdicts[key]
	return v, ok && v.uid == uid && v.generation == generation
}

// usedBy reports whether an object of namespace ns is granted host.
func (o *ownership) usedBy(host, ns string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key := range o.users[host] {
		if k, err := appkey.Parse(key); err == nil && k.Namespace == ns {
			return true
		}
	}
	return false
}

// grantedHosts filters the entry's hosts to those the verdict grants; hosts the operator adds itself
// (a Serve-mode Service's names, which only its own namespace may claim) are not in spec.hosts and
// stay.
func grantedHosts(hso *v1.HTTPScaledObject, hosts []string, v hostVerdict) []string {
	out := hosts[:0:0]
	for _, h := range hosts {
		if slices.Contains(v.granted, h) || !slices.Contains(hso.Spec.Hosts, v1.Host(h)) {
			out = append(out, h)
		}
	}
	return out
}

// ReasonHostsRefused is the reason of RoutingPropagated when none of the object's hosts is its
// namespace's.
const ReasonHostsRefused = "HostsRefused"

// setHostsStatus reports HostsAccepted from the routing controller's verdict; it reports whether
// the verdict for this generation is known and refuses every host.
func (r *Reconciler) setHostsStatus(hso *v1.HTTPScaledObject, key string) (allRefused bool) {
	v, ok := r.own.verdict(key, hso.UID, hso.Generation)
	switch {
	case !ok:
		// Not decided for this generation yet: the routing controller requeues the object when it
		// is; until then the last verdict stands.
		if meta.FindStatusCondition(hso.Status.Conditions, v1.ConditionHostsAccepted) == nil {
			r.setCondition(hso, v1.ConditionHostsAccepted, metav1.ConditionUnknown, "Pending", "the hosts are not decided yet")
		}
		return false
	case len(v.refused) == 0:
		r.setCondition(hso, v1.ConditionHostsAccepted, metav1.ConditionTrue, v1.HostsReasonAccepted,
			"every host is this namespace's to route")
		return false
	}
	reason := v1.HostsReasonNotAllowed
	for _, d := range v.refused {
		if d.Reason == v1.HostsReasonClaimed {
			reason = v1.HostsReasonClaimed
		}
	}
	msg := tenancy.Summary(v.refused)
	if len(v.granted) > 0 {
		msg = fmt.Sprintf("routed on %v only; %s", v.granted, msg)
	} else {
		msg = "no host is routed: " + msg
	}
	r.setCondition(hso, v1.ConditionHostsAccepted, metav1.ConditionFalse, reason, msg)
	return len(v.granted) == 0
}

// objectsOverlapping returns the objects with a host that overlaps host: the same host, a wildcard
// covering it, or (for a wildcard) a host below it.
func objectsOverlapping(ctx context.Context, c client.Reader, host string) []reconcile.Request {
	lists := []client.ListOption{client.MatchingFields{tenancy.IndexHost: host}}
	for _, base := range routing.CoveringWildcards(host) {
		if w := "*." + base; w != host {
			lists = append(lists, client.MatchingFields{tenancy.IndexHost: w})
		}
	}
	if base, ok := strings.CutPrefix(host, "*."); ok {
		lists = append(lists, client.MatchingFields{tenancy.IndexUnder: base})
	}
	seen := map[types.NamespacedName]bool{}
	var reqs []reconcile.Request
	for _, opt := range lists {
		var list v1.HTTPScaledObjectList
		if err := c.List(ctx, &list, opt, client.UnsafeDisableDeepCopy); err != nil {
			continue
		}
		for i := range list.Items {
			k := client.ObjectKeyFromObject(&list.Items[i])
			if !seen[k] {
				seen[k] = true
				reqs = append(reqs, reconcile.Request{NamespacedName: k})
			}
		}
	}
	return reqs
}

// byClaimHost maps a HostClaim to the objects its host can decide.
func byClaimHost(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		hc, ok := obj.(*v1.HostClaim)
		if !ok {
			return nil
		}
		return objectsOverlapping(ctx, c, string(hc.Spec.Host))
	}
}

// byOverlappingHosts maps an object to the other objects with hosts overlapping its own: an older
// object about to claim a host holds younger ones of other namespaces back until it has.
func byOverlappingHosts(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, obj client.Object) []reconcile.Request {
		hso, ok := obj.(*v1.HTTPScaledObject)
		if !ok {
			return nil
		}
		var reqs []reconcile.Request
		for _, h := range hso.Spec.Hosts {
			for _, r := range objectsOverlapping(ctx, c, string(h)) {
				if r.NamespacedName != client.ObjectKeyFromObject(hso) {
					reqs = append(reqs, r)
				}
			}
		}
		return reqs
	}
}

// allObjects maps any change (a policy's) to every HTTPScaledObject.
func allObjects(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, _ client.Object) []reconcile.Request {
		var list v1.HTTPScaledObjectList
		if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		}
		return reqs
	}
}

// objectsInNamespace maps a namespace to its HTTPScaledObjects (its labels can select it in a policy).
func objectsInNamespace(c client.Reader) handler.MapFunc {
	return func(ctx context.Context, ns client.Object) []reconcile.Request {
		var list v1.HTTPScaledObjectList
		if err := c.List(ctx, &list, client.InNamespace(ns.GetName()), client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, len(list.Items))
		for i := range list.Items {
			reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		}
		return reqs
	}
}
