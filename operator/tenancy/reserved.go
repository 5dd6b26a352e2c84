package tenancy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Cluster answers what the reserved-name rules need to know about the cluster.
type Cluster interface {
	// NamespaceLabels returns the labels of namespace ns and whether it exists.
	NamespaceLabels(ns string) (labels map[string]string, exists bool)
	// ServiceIPNamespace returns the namespace of the Service whose cluster IP is ip.
	ServiceIPNamespace(ip string) (ns string, ok bool)
}

// reserved says whether host is a name the cluster gives to something of one namespace, which only
// that namespace may claim. owner is that namespace ("" when no namespace may claim it, as the
// cluster's own DNS zone); why explains a refusal.
//
// The names: <svc>.<ns>.svc and <svc>.<ns>.svc.<domain> (and names and wildcards below them), the
// two-label <svc>.<ns> and *.<ns> while namespace <ns> exists, and a Service's cluster IP. Every other
// name in the cluster domain, or a wildcard covering it (*.svc, *.cluster.local, *.local), belongs to
// no namespace.
func reserved(host, clusterDomain string, c Cluster) (owner string, isReserved bool, why string) {
	if host == "*" {
		return "", false, ""
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ns, ok := c.ServiceIPNamespace(ip.String()); ok {
			return ns, true, fmt.Sprintf("host %s is the cluster IP of a Service in another namespace", host)
		}
		return "", false, ""
	}
	wild := strings.HasPrefix(host, "*.")
	base := strings.TrimPrefix(host, "*.")
	for _, zone := range []string{"svc." + clusterDomain, "svc"} {
		if clusterDomain == "" && zone != "svc" {
			continue
		}
		rel, in := strings.CutSuffix(base, "."+zone)
		if !in && base != zone && !(wild && strings.HasSuffix(zone, "."+base)) {
			continue
		}
		// <svc>.<ns>.svc[.domain] (also <pod>.<svc>.<ns>... of a headless Service) and
		// *.<ns>.svc[.domain] are the namespace's.
		labels := strings.Split(rel, ".")
		if in && (wild || len(labels) >= 2) {
			return labels[len(labels)-1], true, fmt.Sprintf("host %s is (or covers) the cluster DNS names of another namespace's Services", host)
		}
		return "", true, fmt.Sprintf("host %s is (or covers) the cluster's own DNS names, which no namespace may claim", host)
	}
	if clusterDomain != "" && (base == clusterDomain || strings.HasSuffix(base, "."+clusterDomain) ||
		wild && strings.HasSuffix(clusterDomain, "."+base)) {
		return "", true, fmt.Sprintf("host %s is (or covers) the cluster's own DNS names, which no namespace may claim", host)
	}
	// <svc>.<ns> (and *.<ns>): how a pod of another namespace reaches a Service by its short name.
	if labels := strings.Split(base, "."); wild && len(labels) == 1 || !wild && len(labels) == 2 {
		ns := labels[len(labels)-1]
		if _, ok := c.NamespaceLabels(ns); ok {
			return ns, true, fmt.Sprintf("host %s is the short cluster DNS name of a Service in namespace %s", host, ns)
		}
	}
	return "", false, ""
}
