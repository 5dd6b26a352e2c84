// Package tenancy decides which namespace may route which host on the shared fleets: the admin
// policy (HTTPScalePolicy), the names the cluster itself gives Services, and first-come ownership
// recorded in HostClaims. The operator's webhook and its routing controller ask the same Decider,
// so what admission refuses and what the routing table leaves out agree.
package tenancy

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Policy is every HTTPScalePolicy of the cluster read together. It is immutable once built and safe
// for concurrent use.
type Policy struct {
	exact    map[string][]rule // by pattern
	wildcard map[string][]rule // by base d of "*.d"
	any      []rule            // pattern "*"
	catchAll []selection
	cta      []selection // clusterTriggerAuthentication
	// Errors lists the parts of the policies that could not be read (an invalid label selector);
	// such a selection selects no namespace.
	Errors []error
}

type rule struct {
	pattern   string
	ns        selection
	wildcards bool
	policy    string // the HTTPScalePolicy's name
}

type selection struct {
	names map[string]bool
	sel   labels.Selector // nil: none
}

func (s selection) selects(ns string, nsLabels labels.Set) bool {
	return s.names[ns] || s.sel != nil && nsLabels != nil && s.sel.Matches(nsLabels)
}

// NewPolicy reads policies. A nil or empty list is the default policy.
func NewPolicy(policies []v1.HTTPScalePolicy) *Policy {
	p := &Policy{exact: map[string][]rule{}, wildcard: map[string][]rule{}}
	for i := range policies {
		pol := &policies[i]
		for j, hr := range pol.Spec.Hosts {
			sel, err := newSelection(hr.Namespaces)
			if err != nil {
				p.Errors = append(p.Errors, fmt.Errorf("HTTPScalePolicy %s spec.hosts[%d].namespaces.selector: %w", pol.Name, j, err))
			}
			r := rule{pattern: string(hr.Pattern), ns: sel, wildcards: hr.Wildcards, policy: pol.Name}
			switch {
			case r.pattern == "*":
				p.any = append(p.any, r)
			case strings.HasPrefix(r.pattern, "*."):
				p.wildcard[r.pattern[2:]] = append(p.wildcard[r.pattern[2:]], r)
			default:
				p.exact[r.pattern] = append(p.exact[r.pattern], r)
			}
		}
		if c := pol.Spec.CatchAll; c != nil {
			sel, err := newSelection(*c)
			if err != nil {
				p.Errors = append(p.Errors, fmt.Errorf("HTTPScalePolicy %s spec.catchAll.selector: %w", pol.Name, err))
			}
			p.catchAll = append(p.catchAll, sel)
		}
		if c := pol.Spec.ClusterTriggerAuthentication; c != nil {
			sel, err := newSelection(*c)
			if err != nil {
				p.Errors = append(p.Errors, fmt.Errorf("HTTPScalePolicy %s spec.clusterTriggerAuthentication.selector: %w", pol.Name, err))
			}
			p.cta = append(p.cta, sel)
		}
	}
	return p
}

// newSelection compiles a NamespaceSelection; an invalid selector selects nothing (and is an error).
func newSelection(ns v1.NamespaceSelection) (selection, error) {
	s := selection{names: map[string]bool{}}
	for _, n := range ns.Names {
		s.names[string(n)] = true
	}
	if ns.Selector == nil {
		return s, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ns.Selector)
	if err != nil {
		return s, err
	}
	s.sel = sel
	return s, nil
}

// deciding returns the rules that decide host: those whose pattern covers it and is the most
// specific among those that do (every such rule has the same pattern). None: the default applies.
func (p *Policy) deciding(host string) []rule {
	if p == nil || host == "*" {
		return nil // the catch-all is catchAll's
	}
	if host != "*" && !strings.HasPrefix(host, "*.") {
		if rs := p.exact[host]; len(rs) > 0 {
			return rs
		}
	}
	for _, d := range routing.CoveringWildcards(host) {
		if rs := p.wildcard[d]; len(rs) > 0 {
			return rs
		}
	}
	return p.any
}

// DecidingPattern returns the pattern of the rules that decide host, "" when no rule covers it.
func (p *Policy) DecidingPattern(host string) string {
	if rs := p.deciding(host); len(rs) > 0 {
		return rs[0].pattern
	}
	return ""
}

// Verdict is the policy's answer for one host and namespace.
type Verdict struct {
	Allowed bool
	// Why says, when not allowed, what the namespace may not do (for a condition or an admission
	// message); it names policies, never other tenants.
	Why string
}

// AllowHost reports whether namespace ns (with its labels) may claim host under the policy.
func (p *Policy) AllowHost(ns string, nsLabels labels.Set, host string) Verdict {
	if host == "*" {
		if p != nil && selectsAny(p.catchAll, ns, nsLabels) {
			return Verdict{Allowed: true}
		}
		return Verdict{Why: "the catch-all host * receives every request no other object routes, so only a namespace an HTTPScalePolicy grants it (spec.catchAll) may claim it"}
	}
	rs := p.deciding(host)
	wild := routing.IsWildcardHost(host)
	if len(rs) == 0 {
		switch {
		case wild:
			return Verdict{Why: fmt.Sprintf("a wildcard host covers names other namespaces may own, so only a namespace an HTTPScalePolicy grants it (a rule whose pattern covers %s, with wildcards: true) may claim it", host)}
		}
		return Verdict{Allowed: true}
	}
	selected, wildOK := false, false
	for _, r := range rs {
		if r.ns.selects(ns, nsLabels) {
			selected = true
			wildOK = wildOK || r.wildcards
		}
	}
	names := policyNames(rs)
	switch {
	case !selected:
		return Verdict{Why: fmt.Sprintf("HTTPScalePolicy %s reserves the hosts of pattern %s for other namespaces", names, rs[0].pattern)}
	case wild && !wildOK:
		return Verdict{Why: fmt.Sprintf("HTTPScalePolicy %s lets this namespace claim exact hosts of pattern %s, not wildcard hosts (wildcards: true)", names, rs[0].pattern)}
	}
	return Verdict{Allowed: true}
}

// AllowClusterTriggerAuthentication reports whether namespace ns may name a KEDA
// ClusterTriggerAuthentication.
func (p *Policy) AllowClusterTriggerAuthentication(ns string, nsLabels labels.Set) bool {
	return p != nil && selectsAny(p.cta, ns, nsLabels)
}

func selectsAny(sels []selection, ns string, nsLabels labels.Set) bool {
	for _, s := range sels {
		if s.selects(ns, nsLabels) {
			return true
		}
	}
	return false
}

func policyNames(rs []rule) string {
	var names []string
	for _, r := range rs {
		names = append(names, r.policy)
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ", ")
}
