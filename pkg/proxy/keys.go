package proxy

import (
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
)

// ServiceKeys returns every Service port the proxy may forward to for t: each entry's target and its
// fallback, without duplicates. The endpoint cache watches exactly these. Not for the hot path.
func ServiceKeys(t *routing.Table) []endpoints.ServiceKey {
	seen := map[endpoints.ServiceKey]struct{}{}
	var out []endpoints.ServiceKey
	add := func(ns string, b routing.Backend) {
		k := endpoints.ServiceKey{Namespace: ns, Service: b.Service, PortName: b.PortName}
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	for _, e := range t.Entries() {
		add(e.Namespace, e.Target())
		if fb := e.ColdStart.Fallback; fb != nil {
			add(e.Namespace, *fb)
		}
	}
	return out
}
