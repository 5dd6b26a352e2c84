package endpoints

import (
	"cmp"
	"slices"
	"sync"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"
)

// sliceEntry is what the cache keeps of one EndpointSlice: what listEndpoints reads, converted when
// the slice arrives. The decoded slice (its object meta, labels, conditions, pointers) is dropped,
// and nothing indexes an entry but its Service's list in sliceStore: a slice of one endpoint and one
// port took 1,397 bytes of heap trimmed in a client-go Indexer with a Service index, and takes 333
// as an entry. It is never modified once built.
type sliceEntry struct {
	name string
	// ports are the slice's TCP ports with a number (the usable ones, see slicePort).
	ports []namedPort
	// eps are the endpoints listed ready, then (from ready on) those listed neither ready nor
	// terminating, one per address; listEndpoints sets the Service port's port on them (a slice
	// with one usable port has it set already). Terminating endpoints are never used and not kept.
	// A slice of FQDN addresses or of the operator's Serve-mode redirect has none.
	eps   []Endpoint
	ready int
	// single is true when the slice lists exactly one port, usable or not.
	single bool
	// canonical is true when the slice has one usable port and eps[:ready] and eps[ready:] are each
	// sorted and without duplicates, with no address in both: as listEndpoints returns them, so that
	// a Service of this one slice shares them.
	canonical bool
}

// namedPort is a usable port of a slice.
type namedPort struct {
	name string
	port int32
}

// port returns the port named name: as slicePort on the slice's ports.
func (e *sliceEntry) port(name string) (int32, bool) {
	for _, p := range e.ports {
		if p.name == name {
			return p.port, true
		}
	}
	if name == "" && e.single && len(e.ports) == 1 {
		return e.ports[0].port, true
	}
	return 0, false
}

// newSliceEntry converts s. Zone names are interned: a cluster has a handful.
func newSliceEntry(s *discoveryv1.EndpointSlice) sliceEntry {
	e := sliceEntry{name: s.Name, single: len(s.Ports) == 1}
	if s.AddressType == discoveryv1.AddressTypeFQDN {
		return e // a pod IP is needed to dial
	}
	if s.Labels[discoveryv1.LabelManagedBy] == RedirectManagedBy {
		return e // the interceptors themselves (the watch excludes these; other sources may not)
	}
	for _, p := range s.Ports {
		if p.Port != nil && (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) {
			var name string
			if p.Name != nil {
				name = *p.Name
			}
			e.ports = append(e.ports, namedPort{name: name, port: *p.Port})
		}
	}
	if len(e.ports) == 0 {
		return e // no endpoint of it can be dialled
	}
	var ready, pending []Endpoint
	for i := range s.Endpoints {
		se := &s.Endpoints[i]
		if se.Conditions.Terminating != nil && *se.Conditions.Terminating {
			continue // never a terminating endpoint, ready or not
		}
		var zone string
		if se.Zone != nil {
			zone = intern(*se.Zone)
		}
		var forZones []string
		if se.Hints != nil && len(se.Hints.ForZones) > 0 {
			forZones = make([]string, len(se.Hints.ForZones))
			for j, z := range se.Hints.ForZones {
				forZones[j] = intern(z.Name)
			}
		}
		pod, uid := podOf(se.TargetRef, s.Namespace)
		isReady := se.Conditions.Ready == nil || *se.Conditions.Ready
		for _, ip := range se.Addresses {
			ep := Endpoint{IP: ip, Zone: zone, ForZones: forZones, Pod: pod, PodUID: uid}
			if isReady {
				ready = append(ready, ep)
			} else {
				pending = append(pending, ep)
			}
		}
	}
	if len(ready)+len(pending) > 0 {
		e.eps = make([]Endpoint, 0, len(ready)+len(pending))
		e.eps = append(append(e.eps, ready...), pending...)
		e.ready = len(ready)
	}
	if len(e.ports) == 1 {
		for i := range e.eps {
			e.eps[i].Port = e.ports[0].port
		}
		e.canonical = canonical(e.eps[:e.ready]) && canonical(e.eps[e.ready:]) &&
			!slices.ContainsFunc(e.eps[e.ready:], func(p Endpoint) bool {
				return slices.ContainsFunc(e.eps[:e.ready], func(r Endpoint) bool { return r.IP == p.IP })
			})
	}
	return e
}

// canonical reports whether eps is sorted as sortEndpoints sorts and has no two of one address.
func canonical(eps []Endpoint) bool {
	for i := 1; i < len(eps); i++ {
		if c := cmp.Or(cmp.Compare(eps[i-1].IP, eps[i].IP), cmp.Compare(eps[i-1].Port, eps[i].Port)); c >= 0 {
			return false
		}
	}
	return true
}

func intern(s string) string { return unique.Make(s).Value() }

// sliceStore is a watch's store: the Reflector writes the slices it lists and watches into it, each
// converted to a sliceEntry and filed under its Service (label kubernetes.io/service-name), and the
// Cache hears of every change after it is stored. It is safe for concurrent use.
type sliceStore struct {
	mu sync.Mutex
	// byService are the entries of each Service's slices; a slice without the label (the watch's
	// selector excludes them) is filed under "". Replaced, never modified, on every change.
	byService map[string][]sliceEntry
	n         int // slices held

	onChange func(services []string) // after a slice was added, updated or deleted: its Services before and after
	onList   func()                  // after a complete list replaced the contents
}

var _ cache.ReflectorStore = (*sliceStore)(nil)

func newSliceStore(onChange func([]string), onList func()) *sliceStore {
	return &sliceStore{byService: map[string][]sliceEntry{}, onChange: onChange, onList: onList}
}

func (s *sliceStore) Add(obj any) error    { s.put(obj); return nil }
func (s *sliceStore) Update(obj any) error { s.put(obj); return nil }

func (s *sliceStore) Delete(obj any) error {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil
	}
	s.mu.Lock()
	svc, found := s.remove(es.Name, es.Labels[discoveryv1.LabelServiceName])
	s.mu.Unlock()
	if found {
		s.onChange([]string{svc})
	}
	return nil
}

// put stores obj, an added or updated slice, in place of the slice of its name.
func (s *sliceStore) put(obj any) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return
	}
	svc := es.Labels[discoveryv1.LabelServiceName]
	e := newSliceEntry(es)
	s.mu.Lock()
	old, found := s.remove(e.name, svc)
	s.byService[svc] = append(s.byService[svc][:len(s.byService[svc]):len(s.byService[svc])], e)
	s.n++
	s.mu.Unlock()
	if found && old != svc {
		s.onChange([]string{old, svc}) // its label changed: the Service it left loses its endpoints
		return
	}
	s.onChange([]string{svc})
}

// remove drops the slice named name, looked for under service first (the one its label names now),
// and returns the Service it was filed under. s.mu held.
func (s *sliceStore) remove(name, service string) (string, bool) {
	if s.removeFrom(name, service) {
		return service, true
	}
	for svc := range s.byService {
		if svc != service && s.removeFrom(name, svc) {
			return svc, true
		}
	}
	return "", false
}

// removeFrom drops the slice named name from service's entries, if it is there. s.mu held.
func (s *sliceStore) removeFrom(name, service string) bool {
	es := s.byService[service]
	for i := range es {
		if es[i].name != name {
			continue
		}
		if len(es) == 1 {
			delete(s.byService, service)
		} else {
			rest := make([]sliceEntry, 0, len(es)-1)
			s.byService[service] = append(append(rest, es[:i]...), es[i+1:]...)
		}
		s.n--
		return true
	}
	return false
}

// Replace replaces the contents with list, a complete list of the watch's slices (each once).
func (s *sliceStore) Replace(list []any, _ string) error {
	byService := map[string][]sliceEntry{}
	n := 0
	for _, obj := range list {
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok {
			svc := es.Labels[discoveryv1.LabelServiceName]
			byService[svc] = append(byService[svc], newSliceEntry(es))
			n++
		}
	}
	s.mu.Lock()
	s.byService, s.n = byService, n
	s.mu.Unlock()
	s.onList()
	return nil
}

// Resync does nothing: there is no queue to resync.
func (s *sliceStore) Resync() error { return nil }

// list returns the endpoints of k (a port of one of this watch's Services) its slices list: as
// listEndpoints.
func (s *sliceStore) list(k ServiceKey) (*Set, []Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return listEndpoints(k, s.byService[k.Service])
}

// len returns the number of slices held.
func (s *sliceStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}
