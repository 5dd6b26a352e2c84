package tenancy

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Claim is a HostClaim as the decision reads it.
type Claim struct {
	Host      string
	Namespace string
	Name      string // of the HostClaim, the tie-break between claims created in the same second
	Created   time.Time
}

// Claimant is an object that claims hosts (an HTTPScaledObject).
type Claimant struct {
	Namespace, Name string
	Created         time.Time
	Hosts           []string
}

// View is what a decision reads about the cluster. The operator's implementation reads its cache
// (CacheView); it need not be consistent across calls: whatever a stale read gets wrong, the
// HostClaim create decides (it fails for all but one namespace) and a later decision corrects.
type View interface {
	Cluster
	// Policy is the cluster's HTTPScalePolicies read together.
	Policy() *Policy
	// Claim returns the HostClaim of host.
	Claim(host string) (Claim, bool)
	// ClaimsUnder returns the claims of the hosts the wildcard *.d covers (*.d itself included).
	ClaimsUnder(d string) []Claim
	// Claimants returns the objects that may claim host first: those of the operator's fleet, not
	// being deleted, with host among their hosts.
	Claimants(host string) []Claimant
	// ClaimantsUnder returns such objects with a host the wildcard *.d covers.
	ClaimantsUnder(d string) []Claimant
}

// Decision is the verdict on one host an object claims.
type Decision struct {
	Host    string
	Granted bool
	// Claim: granted, and no HostClaim records it yet; the operator creates one before routing it.
	Claim bool
	// Reason (v1.HostsReasonClaimed or v1.HostsReasonNotAllowed) and Message say why a host is
	// refused. The message names hosts and policies, never another tenant's objects or namespace.
	Reason, Message string
}

// Decider decides which of an object's hosts its namespace may route.
type Decider struct {
	// ClusterDomain completes the cluster DNS names only their namespace may claim.
	ClusterDomain string
}

// Decide returns one decision per host of obj, in order. A host is granted to obj's namespace when
// all of these hold:
//
//   - it is not a name the cluster gives to another namespace (a Service's DNS name or cluster IP)
//     or to none (the cluster's own DNS zone); such a name of obj's own namespace is granted at once;
//   - the HTTPScalePolicies let the namespace claim it (without a policy: exact hosts only);
//   - no other namespace holds its HostClaim, and no other namespace holds an older claim that
//     overlaps it (a wildcard covering it, or, for a wildcard, a host below it), unless a policy
//     rule more specific than the wildcard decides the covered host (the platform delegated it);
//   - when it is not claimed yet: no older object of another namespace is about to claim it (or an
//     overlapping host) first. So the oldest object wins a new host, whichever is decided first.
func (d *Decider) Decide(v View, obj Claimant) []Decision {
	pol := v.Policy()
	nsLabels, _ := v.NamespaceLabels(obj.Namespace)
	out := make([]Decision, len(obj.Hosts))
	for i, h := range obj.Hosts {
		out[i] = d.decideHost(v, pol, obj, nsLabels, h, true)
	}
	return out
}

func (d *Decider) decideHost(v View, pol *Policy, obj Claimant, nsLabels labels.Set, host string, checkRivals bool) Decision {
	refuse := func(reason, format string, args ...any) Decision {
		return Decision{Host: host, Reason: reason, Message: fmt.Sprintf(format, args...)}
	}
	if owner, ok, why := reserved(host, d.ClusterDomain, v); ok {
		if owner != "" && owner == obj.Namespace {
			return Decision{Host: host, Granted: true}
		}
		return refuse(v1.HostsReasonNotAllowed, "%s", why)
	}
	if vd := pol.AllowHost(obj.Namespace, nsLabels, host); !vd.Allowed {
		return refuse(v1.HostsReasonNotAllowed, "host %s: %s", host, vd.Why)
	}
	claim, claimed := v.Claim(host)
	if claimed && claim.Namespace != obj.Namespace {
		return refuse(v1.HostsReasonClaimed, "host %s belongs to another namespace (the first to claim it)", host)
	}
	// An overlapping claim of another namespace blocks the host if it is older, unless the policy no
	// longer lets its namespace claim it (narrowed since): such a claim routes nothing and only waits
	// to expire.
	blocks := func(other Claim) bool {
		if other.Namespace == obj.Namespace || claimed && !olderClaim(other, claim) {
			return false
		}
		ol, _ := v.NamespaceLabels(other.Namespace)
		return pol.AllowHost(other.Namespace, ol, other.Host).Allowed
	}
	if host != "*" {
		for _, base := range routing.CoveringWildcards(host) {
			w := "*." + base
			if w == host {
				continue
			}
			if wc, ok := v.Claim(w); ok && blocks(wc) && !delegated(pol, w, host) {
				return refuse(v1.HostsReasonClaimed, "host %s lies below the wildcard host %s, which another namespace owns", host, w)
			}
		}
		if base, ok := strings.CutPrefix(host, "*."); ok {
			for _, g := range v.ClaimsUnder(base) {
				if g.Host != host && g.Host != "*" && blocks(g) && !delegated(pol, host, g.Host) {
					return refuse(v1.HostsReasonClaimed, "wildcard host %s covers host %s, which another namespace owns", host, g.Host)
				}
			}
		}
	}
	if claimed {
		return Decision{Host: host, Granted: true}
	}
	if checkRivals {
		for _, r := range d.rivals(v, pol, host) {
			if r.c.Namespace == obj.Namespace || !older(r.c, obj) {
				continue
			}
			rl, _ := v.NamespaceLabels(r.c.Namespace)
			if d.decideHost(v, pol, r.c, rl, r.host, false).Granted {
				return refuse(v1.HostsReasonClaimed, "host %s is claimed by an older object of another namespace", host)
			}
		}
	}
	return Decision{Host: host, Granted: true, Claim: true}
}

// rival is another object's claim of a host that overlaps the one being decided.
type rival struct {
	c    Claimant
	host string
}

// rivals returns the objects with a host that overlaps host: the same host, a wildcard covering it,
// or (for a wildcard) a host below it, leaving out overlaps a policy delegated. The catch-all * is
// the default route and overlaps nothing but itself.
func (d *Decider) rivals(v View, pol *Policy, host string) []rival {
	var out []rival
	for _, c := range v.Claimants(host) {
		out = append(out, rival{c, host})
	}
	if host == "*" {
		return out
	}
	for _, base := range routing.CoveringWildcards(host) {
		w := "*." + base
		if w == host || delegated(pol, w, host) {
			continue
		}
		for _, c := range v.Claimants(w) {
			out = append(out, rival{c, w})
		}
	}
	if base, ok := strings.CutPrefix(host, "*."); ok {
		for _, c := range v.ClaimantsUnder(base) {
			for _, h := range c.Hosts {
				if h != host && h != "*" && routing.HostCovers(host, h) && !delegated(pol, host, h) {
					out = append(out, rival{c, h})
				}
			}
		}
	}
	return out
}

// delegated reports whether the platform carved host out of the wildcard: the policy rule deciding
// host is more specific than the wildcard and lies inside it.
func delegated(pol *Policy, wildcard, host string) bool {
	p := pol.DecidingPattern(host)
	return p != "" && p != wildcard && routing.HostCovers(wildcard, p)
}

// older orders objects by creation, then namespace/name.
func older(a, b Claimant) bool {
	return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name)) < 0
}

// olderClaim orders claims by creation, then name.
func olderClaim(a, b Claim) bool {
	return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Name, b.Name)) < 0
}

// Refused returns the refused decisions of ds.
func Refused(ds []Decision) []Decision {
	var out []Decision
	for _, d := range ds {
		if !d.Granted {
			out = append(out, d)
		}
	}
	return out
}

// Summary is a condition message for refused decisions: each host and why, joined.
func Summary(refused []Decision) string {
	parts := make([]string, len(refused))
	for i, d := range refused {
		parts[i] = d.Message
	}
	return strings.Join(parts, "; ")
}
