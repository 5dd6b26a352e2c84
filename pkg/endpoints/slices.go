package endpoints

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// buildSet returns the ready endpoints of k found in slices (all of k's Service), or nil when there
// are none. Endpoints listed by two slices (possible while the EndpointSlice controller moves them)
// appear once. The result is sorted by IP and port, so equal inputs give equal Sets.
func buildSet(k ServiceKey, ss []*discoveryv1.EndpointSlice) *Set {
	ready, _ := listEndpoints(k, ss)
	return ready
}

// listEndpoints returns the ready endpoints of k found in slices (nil when none), and the listed ones
// that are neither ready nor terminating (pods that are starting), each sorted and without duplicates;
// an address that is ready in one slice is not also pending.
func listEndpoints(k ServiceKey, ss []*discoveryv1.EndpointSlice) (*Set, []Endpoint) {
	var eps, pending []Endpoint
	for _, s := range ss {
		eps, pending = appendListed(eps, pending, s, k.PortName)
	}
	if len(pending) > 0 {
		sortEndpoints(pending)
		pending = dedupe(pending)
		if len(eps) > 0 {
			pending = slices.DeleteFunc(pending, func(p Endpoint) bool {
				return slices.ContainsFunc(eps, func(e Endpoint) bool { return e.IP == p.IP && e.Port == p.Port })
			})
		}
		if len(pending) == 0 {
			pending = nil
		}
	}
	if len(eps) == 0 {
		return nil, pending
	}
	sortEndpoints(eps)
	eps = dedupe(eps)
	return &Set{Key: k, Endpoints: eps}, pending
}

// appendListed appends the ready, non-terminating endpoints of s on the port named portName to dst,
// and those listed not ready (and not terminating) to pending.
func appendListed(dst, pending []Endpoint, s *discoveryv1.EndpointSlice, portName string) ([]Endpoint, []Endpoint) {
	if s.AddressType == discoveryv1.AddressTypeFQDN {
		return dst, pending // a pod IP is needed to dial
	}
	if s.Labels[discoveryv1.LabelManagedBy] == RedirectManagedBy {
		return dst, pending // the interceptors themselves (the watch excludes these; other sources may not)
	}
	port, ok := slicePort(s.Ports, portName)
	if !ok {
		return dst, pending
	}
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		isPending := false
		if !isReady(e.Conditions) {
			if ptr.Deref(e.Conditions.Terminating, false) {
				continue // never a terminating endpoint, ready or not
			}
			isPending = true
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
		pod, uid := podOf(e.TargetRef, s.Namespace)
		for _, ip := range e.Addresses {
			ep := Endpoint{IP: ip, Port: port, Zone: zone, ForZones: forZones, Pod: pod, PodUID: uid}
			if isPending {
				pending = append(pending, ep)
			} else {
				dst = append(dst, ep)
			}
		}
	}
	return dst, pending
}

// podOf returns the pod a targetRef names when it is a Pod of namespace (a targetRef may name any
// namespace; only the slice's own is believed).
func podOf(ref *corev1.ObjectReference, namespace string) (string, types.UID) {
	if ref == nil || ref.Kind != "Pod" || ref.Name == "" || (ref.Namespace != "" && ref.Namespace != namespace) {
		return "", ""
	}
	return ref.Name, ref.UID
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
	return slices.EqualFunc(a.Endpoints, b.Endpoints, sameEndpoint)
}

// sameEndpoint reports whether a and b are equal.
func sameEndpoint(a, b Endpoint) bool {
	return a.IP == b.IP && a.Port == b.Port && a.Zone == b.Zone && slices.Equal(a.ForZones, b.ForZones) &&
		a.Pod == b.Pod && a.PodUID == b.PodUID
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
		if r := e.TargetRef; r != nil {
			if r.Kind == "Pod" {
				// Kept for cold-start probes and breakdowns: which pod the address belongs to.
				e.TargetRef = &corev1.ObjectReference{Kind: r.Kind, Namespace: r.Namespace, Name: r.Name, UID: r.UID}
			} else {
				e.TargetRef = nil
			}
		}
		e.NodeName = nil
		e.Hostname = nil
		e.DeprecatedTopology = nil
	}
	return s, nil
}
