package tenancy

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Field indexes the cache view reads; IndexFields registers them.
const (
	// IndexHost indexes HTTPScaledObjects by each host, HostClaims by theirs.
	IndexHost = "tenancy.httpscale.dev/host"
	// IndexUnder indexes HTTPScaledObjects and HostClaims by the base d of every wildcard *.d that
	// covers one of their hosts (routing.CoveringWildcards).
	IndexUnder = "tenancy.httpscale.dev/under"
	// IndexClusterIP indexes Services by their cluster IPs.
	IndexClusterIP = "tenancy.httpscale.dev/cluster-ip"
)

// indexed remembers the field indexers IndexFields registered with: the webhook and the routing
// controller both need the indexes, and an index registered twice is an error.
var indexed sync.Map

// IndexFields registers the indexes CacheView reads with the manager's field indexer, once per
// indexer.
func IndexFields(ctx context.Context, idx client.FieldIndexer) error {
	if _, done := indexed.LoadOrStore(idx, true); done {
		return nil
	}
	for _, f := range []struct {
		obj     client.Object
		name    string
		extract client.IndexerFunc
	}{
		{&v1.HTTPScaledObject{}, IndexHost, func(o client.Object) []string { return objectHosts(o.(*v1.HTTPScaledObject)) }},
		{&v1.HTTPScaledObject{}, IndexUnder, func(o client.Object) []string { return under(objectHosts(o.(*v1.HTTPScaledObject))) }},
		{&v1.HostClaim{}, IndexHost, func(o client.Object) []string { return []string{string(o.(*v1.HostClaim).Spec.Host)} }},
		{&v1.HostClaim{}, IndexUnder, func(o client.Object) []string { return under([]string{string(o.(*v1.HostClaim).Spec.Host)}) }},
		{&corev1.Service{}, IndexClusterIP, func(o client.Object) []string {
			var ips []string
			for _, ip := range o.(*corev1.Service).Spec.ClusterIPs {
				if ip != "" && ip != corev1.ClusterIPNone {
					ips = append(ips, ip)
				}
			}
			return ips
		}},
	} {
		if err := idx.IndexField(ctx, f.obj, f.name, f.extract); err != nil {
			return fmt.Errorf("indexing %T by %s: %w", f.obj, f.name, err)
		}
	}
	return nil
}

func objectHosts(o *v1.HTTPScaledObject) []string {
	out := make([]string, len(o.Spec.Hosts))
	for i, h := range o.Spec.Hosts {
		out[i] = string(h)
	}
	return out
}

// under returns the index values of IndexUnder for hosts.
func under(hosts []string) []string {
	var out []string
	for _, h := range hosts {
		out = append(out, routing.CoveringWildcards(h)...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// CacheView is the View over the operator's cache (client reads served by informers with the
// indexes of IndexFields). Claimants are the objects Serves accepts.
type CacheView struct {
	Ctx    context.Context
	Client client.Reader
	// Policies compiles the cluster's HTTPScalePolicies.
	Policies *PolicyCache
	// Serves reports whether the operator routes the object (its fleet, not being deleted).
	Serves func(*v1.HTTPScaledObject) bool
}

var _ View = (*CacheView)(nil)

// Policy implements View.
func (c *CacheView) Policy() *Policy { return c.Policies.Get(c.Ctx, c.Client) }

// NamespaceLabels implements Cluster (from the cache's Namespace metadata).
func (c *CacheView) NamespaceLabels(ns string) (map[string]string, bool) {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	if err := c.Client.Get(c.Ctx, client.ObjectKey{Name: ns}, m); err != nil {
		return nil, false
	}
	return m.Labels, true
}

// ServiceIPNamespace implements Cluster.
func (c *CacheView) ServiceIPNamespace(ip string) (string, bool) {
	var list corev1.ServiceList
	if err := c.Client.List(c.Ctx, &list, client.MatchingFields{IndexClusterIP: ip}, client.UnsafeDisableDeepCopy); err != nil || len(list.Items) == 0 {
		return "", false
	}
	return list.Items[0].Namespace, true
}

// Claim implements View.
func (c *CacheView) Claim(host string) (Claim, bool) {
	cs := c.claims(IndexHost, host)
	if len(cs) == 0 {
		return Claim{}, false
	}
	// Two claims of one host exist only when an admin created one under another name: the older wins.
	slices.SortFunc(cs, func(a, b Claim) int {
		if olderClaim(a, b) {
			return -1
		}
		return 1
	})
	return cs[0], true
}

// ClaimsUnder implements View.
func (c *CacheView) ClaimsUnder(d string) []Claim { return c.claims(IndexUnder, d) }

func (c *CacheView) claims(index, value string) []Claim {
	var list v1.HostClaimList
	if err := c.Client.List(c.Ctx, &list, client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	out := make([]Claim, 0, len(list.Items))
	for i := range list.Items {
		hc := &list.Items[i]
		if !hc.DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, Claim{Host: string(hc.Spec.Host), Namespace: string(hc.Spec.Namespace), Name: hc.Name, Created: hc.CreationTimestamp.Time})
	}
	return out
}

// Claimants implements View.
func (c *CacheView) Claimants(host string) []Claimant { return c.claimants(IndexHost, host) }

// ClaimantsUnder implements View.
func (c *CacheView) ClaimantsUnder(d string) []Claimant { return c.claimants(IndexUnder, d) }

func (c *CacheView) claimants(index, value string) []Claimant {
	var list v1.HTTPScaledObjectList
	if err := c.Client.List(c.Ctx, &list, client.MatchingFields{index: value}, client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []Claimant
	for i := range list.Items {
		o := &list.Items[i]
		if !o.DeletionTimestamp.IsZero() || c.Serves != nil && !c.Serves(o) {
			continue
		}
		out = append(out, ClaimantOf(o))
	}
	return out
}

// ClaimantOf returns the object's claim on its hosts.
func ClaimantOf(o *v1.HTTPScaledObject) Claimant {
	return Claimant{Namespace: o.Namespace, Name: o.Name, Created: o.CreationTimestamp.Time, Hosts: objectHosts(o)}
}

// PolicyCache compiles the HTTPScalePolicies once per change of the list. Safe for concurrent use.
type PolicyCache struct {
	mu   sync.Mutex
	key  string
	last *Policy
	// OnErrors, when set, is called with the errors of a newly compiled policy.
	OnErrors func([]error)
}

// Get returns the compiled policies the reader lists now (the default policy when it cannot list).
func (p *PolicyCache) Get(ctx context.Context, r client.Reader) *Policy {
	var list v1.HTTPScalePolicyList
	if err := r.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return NewPolicy(nil)
	}
	slices.SortFunc(list.Items, func(a, b v1.HTTPScalePolicy) int { return strings.Compare(a.Name, b.Name) })
	var key strings.Builder
	for i := range list.Items {
		key.WriteString(list.Items[i].Name + "@" + list.Items[i].ResourceVersion + ",")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last != nil && p.key == key.String() {
		return p.last
	}
	p.last, p.key = NewPolicy(list.Items), key.String()
	if len(p.last.Errors) > 0 && p.OnErrors != nil {
		p.OnErrors(p.last.Errors)
	}
	return p.last
}
