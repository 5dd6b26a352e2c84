package tenancy

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
)

// fakeView is a View over plain slices.
type fakeView struct {
	policies   []v1.HTTPScalePolicy
	claims     []Claim
	objects    []Claimant
	namespaces map[string]map[string]string
	serviceIPs map[string]string
}

func (f *fakeView) Policy() *Policy { return NewPolicy(f.policies) }
func (f *fakeView) NamespaceLabels(ns string) (map[string]string, bool) {
	l, ok := f.namespaces[ns]
	return l, ok
}
func (f *fakeView) ServiceIPNamespace(ip string) (string, bool) {
	ns, ok := f.serviceIPs[ip]
	return ns, ok
}
func (f *fakeView) Claim(host string) (Claim, bool) {
	for _, c := range f.claims {
		if c.Host == host {
			return c, true
		}
	}
	return Claim{}, false
}
func (f *fakeView) ClaimsUnder(d string) []Claim {
	var out []Claim
	for _, c := range f.claims {
		if routing.HostCovers("*."+d, c.Host) {
			out = append(out, c)
		}
	}
	return out
}
func (f *fakeView) Claimants(host string) []Claimant {
	var out []Claimant
	for _, o := range f.objects {
		for _, h := range o.Hosts {
			if h == host {
				out = append(out, o)
				break
			}
		}
	}
	return out
}
func (f *fakeView) ClaimantsUnder(d string) []Claimant {
	var out []Claimant
	for _, o := range f.objects {
		for _, h := range o.Hosts {
			if routing.HostCovers("*."+d, h) {
				out = append(out, o)
				break
			}
		}
	}
	return out
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

func obj(ns, name string, created int, hosts ...string) Claimant {
	return Claimant{Namespace: ns, Name: name, Created: at(created), Hosts: hosts}
}

func claim(host, ns string, created int) Claim {
	return Claim{Host: host, Namespace: ns, Name: v1.HostClaimName(host), Created: at(created)}
}

func hostRule(pattern string, wildcards bool, names ...string) v1.HostRule {
	r := v1.HostRule{Pattern: v1.Host(pattern), Wildcards: wildcards}
	for _, n := range names {
		r.Namespaces.Names = append(r.Namespaces.Names, v1.NamespaceName(n))
	}
	return r
}

func policy(name string, rules ...v1.HostRule) v1.HTTPScalePolicy {
	return v1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.HTTPScalePolicySpec{Hosts: rules}}
}

// Each case is an attack or a use the ownership rules must answer: who asks (obj), what exists
// (view), and the verdict on the object's single host.
func TestDecide(t *testing.T) {
	namespaces := map[string]map[string]string{"a": {"team": "a"}, "b": {"team": "b"}, "shop": {}, "edge": {"tier": "edge"}}
	for _, tc := range []struct {
		name    string
		view    fakeView
		obj     Claimant
		granted bool
		claim   bool
		reason  string
		message string // a substring of the refusal
	}{
		{name: "a new exact host goes to the first namespace that claims it",
			obj: obj("a", "x", 10, "shop.example.com"), granted: true, claim: true},
		{name: "objects of the owning namespace share its host",
			view: fakeView{claims: []Claim{claim("shop.example.com", "b", 1)}},
			obj:  obj("b", "login", 10, "shop.example.com"), granted: true},
		{name: "header or path hijack: another namespace's host is refused",
			view: fakeView{claims: []Claim{claim("shop.example.com", "b", 1)}},
			obj:  obj("a", "hijack", 10, "shop.example.com"), reason: v1.HostsReasonClaimed, message: "belongs to another namespace"},
		{name: "squatting survives the owner: a retained claim without objects still refuses",
			view: fakeView{claims: []Claim{claim("shop.example.com", "b", 1)}, objects: nil},
			obj:  obj("a", "squat", 0, "shop.example.com"), reason: v1.HostsReasonClaimed},
		{name: "an older object of another namespace not yet claimed wins the new host",
			view: fakeView{objects: []Claimant{obj("b", "owner", 5, "shop.example.com")}},
			obj:  obj("a", "later", 6, "shop.example.com"), reason: v1.HostsReasonClaimed, message: "older object"},
		{name: "a younger object of another namespace does not hold the older back",
			view: fakeView{objects: []Claimant{obj("b", "shop", 7, "shop.example.com")}},
			obj:  obj("a", "first", 6, "shop.example.com"), granted: true, claim: true},
		{name: "an older object the policy refuses does not hold a new host",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("shop.example.com", false, "a"))},
				objects: []Claimant{obj("b", "shop", 5, "shop.example.com")}},
			obj: obj("a", "later", 6, "shop.example.com"), granted: true, claim: true},
		{name: "a wildcard needs a policy grant",
			obj: obj("a", "w", 1, "*.example.com"), reason: v1.HostsReasonNotAllowed, message: "wildcard host"},
		{name: "the catch-all needs a policy grant",
			obj: obj("a", "all", 1, "*"), reason: v1.HostsReasonNotAllowed, message: "catch-all"},
		{name: "a policy grants a namespace wildcards under a domain",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "a"))}},
			obj:  obj("a", "w", 1, "*.apps.example.com"), granted: true, claim: true},
		{name: "a policy grant without wildcards allows exact hosts only",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", false, "a"))}},
			obj:  obj("a", "w", 1, "*.apps.example.com"), reason: v1.HostsReasonNotAllowed, message: "not wildcard hosts"},
		{name: "a policy reserves a domain for a namespace",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("shop", hostRule("*.shop.example.com", false, "shop"))}},
			obj:  obj("a", "x", 1, "login.shop.example.com"), reason: v1.HostsReasonNotAllowed, message: "HTTPScalePolicy shop reserves"},
		{name: "a policy selects namespaces by label",
			view: fakeView{policies: []v1.HTTPScalePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: v1.HTTPScalePolicySpec{Hosts: []v1.HostRule{{
				Pattern: "*.edge.example.com", Wildcards: true,
				Namespaces: v1.NamespaceSelection{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "edge"}}}}}}}}},
			obj: obj("edge", "x", 1, "*.edge.example.com"), granted: true, claim: true},
		{name: "narrowing: a * rule selecting nobody closes every host not granted elsewhere",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("closed", hostRule("*", false))}},
			obj:  obj("a", "x", 1, "anything.example.org"), reason: v1.HostsReasonNotAllowed},
		{name: "a more specific rule wins over a less specific one",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("closed", hostRule("*", false)), policy("a", hostRule("*.a.example.com", false, "a"))}},
			obj:  obj("a", "x", 1, "api.a.example.com"), granted: true, claim: true},
		{name: "a wildcard is refused when another namespace owns a host below it",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "a", "b"))},
				claims: []Claim{claim("shop.example.com", "b", 1)}},
			obj: obj("a", "w", 10, "*.example.com"), reason: v1.HostsReasonClaimed, message: "covers host shop.example.com"},
		{name: "an exact host is refused below another namespace's wildcard",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "a", "b"))},
				claims: []Claim{claim("*.example.com", "a", 1)}},
			obj: obj("b", "x", 10, "shop.example.com"), reason: v1.HostsReasonClaimed, message: "lies below the wildcard host *.example.com"},
		{name: "a deeper wildcard is refused below another namespace's wildcard",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "a", "b"))},
				claims: []Claim{claim("*.example.com", "a", 1)}},
			obj: obj("b", "x", 10, "*.eu.example.com"), reason: v1.HostsReasonClaimed},
		{name: "a host the policy delegates out of a wildcard is not refused by it",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "a"), hostRule("shop.example.com", false, "b"))},
				claims: []Claim{claim("*.example.com", "a", 1)}},
			obj: obj("b", "x", 10, "shop.example.com"), granted: true, claim: true},
		{name: "a wildcard over a delegated host is not refused by it",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "a"), hostRule("shop.example.com", false, "b"))},
				claims: []Claim{claim("shop.example.com", "b", 1)}},
			obj: obj("a", "w", 10, "*.example.com"), granted: true, claim: true},
		{name: "of two overlapping claims the older wins",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "a", "b"))},
				claims: []Claim{claim("*.example.com", "a", 5), claim("shop.example.com", "b", 1)}},
			obj: obj("a", "w", 10, "*.example.com"), reason: v1.HostsReasonClaimed},
		{name: "an older wildcard object not yet claimed holds a host below it",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "a", "b"))},
				objects: []Claimant{obj("a", "w", 1, "*.example.com")}},
			obj: obj("b", "x", 10, "shop.example.com"), reason: v1.HostsReasonClaimed, message: "older object"},
		{name: "the catch-all granted by policy overlaps no exact host",
			view: fakeView{policies: []v1.HTTPScalePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
				Spec: v1.HTTPScalePolicySpec{CatchAll: &v1.NamespaceSelection{Names: []v1.NamespaceName{"a"}}}}},
				claims: []Claim{claim("*", "a", 1)}},
			obj: obj("b", "x", 10, "shop.example.com"), granted: true, claim: true},
		{name: "the catch-all goes to a namespace the policy grants it",
			view: fakeView{policies: []v1.HTTPScalePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "p"},
				Spec: v1.HTTPScalePolicySpec{CatchAll: &v1.NamespaceSelection{Names: []v1.NamespaceName{"a"}}}}}},
			obj: obj("a", "x", 10, "*"), granted: true, claim: true},
		{name: "a * host rule with wildcards does not grant the catch-all",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*", true, "a"))}},
			obj:  obj("a", "x", 10, "*"), reason: v1.HostsReasonNotAllowed, message: "spec.catchAll"},
		{name: "a * host rule with wildcards restores wildcards anywhere",
			view: fakeView{policies: []v1.HTTPScalePolicy{{ObjectMeta: metav1.ObjectMeta{Name: "open"}, Spec: v1.HTTPScalePolicySpec{Hosts: []v1.HostRule{{
				Pattern: "*", Wildcards: true, Namespaces: v1.NamespaceSelection{Selector: &metav1.LabelSelector{}}}}}}}},
			obj: obj("b", "x", 10, "*.b.example.org"), granted: true, claim: true},
		{name: "a Service's cluster DNS name is its namespace's",
			obj: obj("b", "x", 1, "shop.b.svc.cluster.local"), granted: true},
		{name: "another namespace's Service DNS name is refused",
			obj: obj("a", "x", 1, "shop.b.svc.cluster.local"), reason: v1.HostsReasonNotAllowed, message: "another namespace's Services"},
		{name: "another namespace's short Service name is refused",
			obj: obj("a", "x", 1, "shop.b"), reason: v1.HostsReasonNotAllowed},
		{name: "a two-label name of no namespace is a normal host",
			obj: obj("a", "x", 1, "example.com"), granted: true, claim: true},
		{name: "the cluster's DNS zone is nobody's",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*", true, "a"))}},
			obj:  obj("a", "x", 1, "*.cluster.local"), reason: v1.HostsReasonNotAllowed, message: "cluster's own DNS names"},
		{name: "a wildcard covering the cluster's DNS zone is nobody's",
			view: fakeView{policies: []v1.HTTPScalePolicy{policy("p", hostRule("*", true, "a"))}},
			obj:  obj("a", "x", 1, "*.local"), reason: v1.HostsReasonNotAllowed},
		{name: "another namespace's Service cluster IP is refused",
			view: fakeView{serviceIPs: map[string]string{"10.96.0.15": "b"}},
			obj:  obj("a", "x", 1, "10.96.0.15"), reason: v1.HostsReasonNotAllowed, message: "cluster IP"},
		{name: "a namespace's own cluster IP is granted without a claim",
			view: fakeView{serviceIPs: map[string]string{"10.96.0.15": "b"}},
			obj:  obj("b", "x", 1, "10.96.0.15"), granted: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.view
			v.namespaces = namespaces
			ds := (&Decider{ClusterDomain: "cluster.local"}).Decide(&v, tc.obj)
			if len(ds) != 1 {
				t.Fatalf("got %d decisions", len(ds))
			}
			d := ds[0]
			if d.Granted != tc.granted || d.Claim != tc.claim || d.Reason != tc.reason {
				t.Fatalf("got granted=%v claim=%v reason=%q (%s), want granted=%v claim=%v reason=%q",
					d.Granted, d.Claim, d.Reason, d.Message, tc.granted, tc.claim, tc.reason)
			}
			if !strings.Contains(d.Message, tc.message) {
				t.Fatalf("message %q does not say %q", d.Message, tc.message)
			}
			for _, o := range tc.view.objects {
				if o.Name != tc.obj.Name && strings.Contains(d.Message, o.Name) {
					t.Fatalf("message %q names another tenant's object %s", d.Message, o.Name)
				}
			}
		})
	}
}

func TestHostCovers(t *testing.T) {
	for _, tc := range []struct {
		pattern, host string
		want          bool
	}{
		{"*", "*", true}, {"*", "a.b", true}, {"*", "*.b", true},
		{"*.b", "*", false}, {"*.b", "a.b", true}, {"*.b", "x.a.b", true}, {"*.b", "b", false},
		{"*.b", "*.b", true}, {"*.b", "*.a.b", true}, {"*.a.b", "*.b", false}, {"*.b", "ab", false},
		{"a.b", "a.b", true}, {"a.b", "x.a.b", false}, {"a.b", "*.b", false},
	} {
		if got := routing.HostCovers(tc.pattern, tc.host); got != tc.want {
			t.Errorf("HostCovers(%q, %q) = %v, want %v", tc.pattern, tc.host, got, tc.want)
		}
	}
}

func TestDecideIgnoresClaimsThePolicyNoLongerAllows(t *testing.T) {
	v := &fakeView{
		policies:   []v1.HTTPScalePolicy{policy("p", hostRule("*.example.com", true, "b"))},
		claims:     []Claim{claim("*.example.com", "a", 1)},
		namespaces: map[string]map[string]string{"a": {}, "b": {}},
	}
	d := (&Decider{}).Decide(v, obj("b", "x", 10, "shop.example.com"))[0]
	if !d.Granted || !d.Claim {
		t.Fatalf("a wildcard claim of a namespace the policy narrowed out still blocks: %+v", d)
	}
	d = (&Decider{}).Decide(v, obj("a", "w", 10, "*.example.com"))[0]
	if d.Granted || d.Reason != v1.HostsReasonNotAllowed {
		t.Fatalf("the policy must beat the claim it no longer allows: %+v", d)
	}
}
