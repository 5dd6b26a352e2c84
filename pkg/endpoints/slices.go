package endpoints

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// buildSet returns the ready endpoints of k found in slices (all of k's Service), or nil when there
// are none. Endpoints listed by two slices (possible while the EndpointSlice controller moves them)
// appear once. The result is sorted by IP and port, so equal inputs give equal Sets.
func buildSet(k ServiceKey, slices []*discoveryv1.EndpointSlice) *Set {
	var eps []Endpoint
	for _, s := range slices {
		eps = appendReady(eps, s, k.PortName)
	}
	if len(eps) == 0 {
		return nil
	}
	sortEndpoints(eps)
	eps = dedupe(eps)
	return &Set{Key: k, Endpoints: eps}
}

// appendReady appends the ready, non-terminating endpoints of s on the port named portName.
func appendReady(dst []Endpoint, s *discoveryv1.EndpointSlice, portName string) []Endpoint {
	if s.AddressType == discoveryv1.AddressTypeFQDN {
		return dst // a pod IP is needed to dial
	}
	if s.Labels[discoveryv1.LabelManagedBy] == RedirectManagedBy {
		return dst // the interceptors themselves (the watch excludes these; other sources may not)
	}
	port, ok := slicePort(s.Ports, portName)
	if !ok {
		return dst
	}
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		if !isReady(e.Conditions) {
			continue
		}
		var zone string
		if e.Zone != nil {
			zone = *e.Zone
		}
		var forZones []string
		if e.Hints != nil && len(e.Hints.ForZones) > 0 {
			forZones = make([]string, len(e.Hints.ForZones))
			for j, z := range e.Hints.ForZones {
				forZones[j] = z.Name
			}
		}
		for _, ip := range e.Addresses {
			dst = append(dst, Endpoint{IP: ip, Port: port, Zone: zone, ForZones: forZones})
		}
	}
	return dst
}

// isReady follows the EndpointSlice API: a nil ready condition means ready; terminating endpoints
// are never used for new requests.
func isReady(c discoveryv1.EndpointConditions) bool {
	if c.Terminating != nil && *c.Terminating {
		return false
	}
	return c.Ready == nil || *c.Ready
}

// slicePort returns the TCP port named name. An empty name also accepts the only port of a slice
// with a single port, whatever its name: the Service had a single port when the route was built.
func slicePort(ports []discoveryv1.EndpointPort, name string) (int32, bool) {
	usable := func(p discoveryv1.EndpointPort) bool {
		return p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP)
	}
	for _, p := range ports {
		if usable(p) && ptr.Deref(p.Name, "") == name {
			return *p.Port, true
		}
	}
	if name == "" && len(ports) == 1 && usable(ports[0]) {
		return *ports[0].Port, true
	}
	return 0, false
}

func sortEndpoints(eps []Endpoint) {
	slices.SortFunc(eps, func(a, b Endpoint) int {
		return cmp.Or(cmp.Compare(a.IP, b.IP), cmp.Compare(a.Port, b.Port))
	})
}

// dedupe drops endpoints with the address of their predecessor in sorted eps.
func dedupe(eps []Endpoint) []Endpoint {
	return slices.CompactFunc(eps, func(a, b Endpoint) bool { return a.IP == b.IP && a.Port == b.Port })
}

// sameEndpoints reports whether a and b hold equal endpoints in the same order.
func sameEndpoints(a, b *Set) bool {
	if a.Len() != b.Len() {
		return false
	}
	if a.Len() == 0 {
		return true
	}
	return slices.EqualFunc(a.Endpoints, b.Endpoints, func(x, y Endpoint) bool {
		return x.IP == y.IP && x.Port == y.Port && x.Zone == y.Zone && slices.Equal(x.ForZones, y.ForZones)
	})
}

// trimSlice drops what the cache never reads before an informer stores a slice, which roughly halves
// the memory a slice takes.
func trimSlice(obj any) (any, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return obj, nil
	}
	s.ManagedFields = nil
	s.Annotations = nil
	s.OwnerReferences = nil
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		e.TargetRef = nil
		e.NodeName = nil
		e.Hostname = nil
		e.DeprecatedTopology = nil
	}
	return s, nil
}
