package endpoints

import (
	"cmp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// listEndpoints returns the ready endpoints of k found in the entries of its Service's slices (nil
// when none), and the listed ones that are neither ready nor terminating (pods that are starting),
// each sorted by IP and port and without duplicates (an endpoint listed by two slices, possible
// while the EndpointSlice controller moves it, appears once); an address that is ready in one slice
// is not also pending. Equal inputs give equal Sets.
func listEndpoints(k ServiceKey, entries []sliceEntry) (*Set, []Endpoint) {
	if len(entries) == 1 && entries[0].canonical {
		// The Service's only slice, already as listed: share its endpoints.
		e := &entries[0]
		if _, ok := e.port(k.PortName); !ok {
			return nil, nil
		}
		var set *Set
		var pending []Endpoint
		if e.ready > 0 {
			set = &Set{Key: k, Endpoints: e.eps[:e.ready:e.ready]}
		}
		if e.ready < len(e.eps) {
			pending = e.eps[e.ready:len(e.eps):len(e.eps)]
		}
		return set, pending
	}
	var eps, pending []Endpoint
	for i := range entries {
		e := &entries[i]
		port, ok := e.port(k.PortName)
		if !ok {
			continue
		}
		for j, ep := range e.eps {
			ep.Port = port
			if j < e.ready {
				eps = append(eps, ep)
			} else {
				pending = append(pending, ep)
			}
		}
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

// podOf returns the pod a targetRef names when it is a Pod of namespace (a targetRef may name any
// namespace; only the slice's own is believed).
func podOf(ref *corev1.ObjectReference, namespace string) (string, types.UID) {
	if ref == nil || ref.Kind != "Pod" || ref.Name == "" || (ref.Namespace != "" && ref.Namespace != namespace) {
		return "", ""
	}
	return ref.Name, ref.UID
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
