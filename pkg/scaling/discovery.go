package scaling

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// CacheByObject restricts a manager's cache to what EndpointSliceDiscovery reads: the EndpointSlices
// matching selector in namespace. With it the scaler needs get/list/watch on EndpointSlices in that
// namespace only, and holds nothing else in memory.
func CacheByObject(namespace string, selector labels.Selector) map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&discoveryv1.EndpointSlice{}: {Namespaces: map[string]cache.Config{namespace: {}}, Label: selector},
	}
}

// Replica is one interceptor replica to poll.
type Replica struct {
	// Key identifies the replica across polls: its Pod's namespace/name when the EndpointSlice names
	// it, otherwise its address.
	Key string
	// URL is the base URL of its admin port (http://host:port).
	URL string
}

// Discoverer lists the interceptor replicas to poll. Replicas is called once per poll cycle and must
// be cheap (read a cache, not the API server).
type Discoverer interface {
	Replicas(ctx context.Context) ([]Replica, error)
}

// DiscoverFunc adapts a function to Discoverer.
type DiscoverFunc func(ctx context.Context) ([]Replica, error)

// Replicas calls f.
func (f DiscoverFunc) Replicas(ctx context.Context) ([]Replica, error) { return f(ctx) }

// EndpointSliceDiscovery finds interceptor replicas in the EndpointSlices of the interceptor admin
// Service. Every endpoint with an address is a replica, ready or not, terminating or not: a replica
// that fails its readiness probe (hung, or draining with requests still in flight) still holds
// requests, and its last counts must age out through the staleness grace period rather than vanish.
// Only an endpoint that leaves the slices is dropped at once.
type EndpointSliceDiscovery struct {
	// Reader lists EndpointSlices, normally the manager's cache.
	Reader client.Reader
	// Namespace holds the admin Service.
	Namespace string
	// Selector selects its EndpointSlices (kubernetes.io/service-name=<service>).
	Selector labels.Selector
	// PortName names the admin port; empty takes each slice's first port.
	PortName string
	// Address maps an endpoint address and the admin port to the host:port to dial. Nil means
	// net.JoinHostPort(ip, port). Tests point it at loopback listeners, because EndpointSlice
	// validation rejects loopback addresses.
	Address func(ip string, port int32) string
}

// Replicas lists the replicas, sorted by Key. A Pod listed in several slices (dual-stack) is
// returned once.
func (d *EndpointSliceDiscovery) Replicas(ctx context.Context) ([]Replica, error) {
	var list discoveryv1.EndpointSliceList
	if err := d.Reader.List(ctx, &list, client.InNamespace(d.Namespace), client.MatchingLabelsSelector{Selector: d.Selector}); err != nil {
		return nil, fmt.Errorf("listing interceptor admin EndpointSlices in %s: %w", d.Namespace, err)
	}
	slices := list.Items
	sort.Slice(slices, func(i, j int) bool { return slices[i].Name < slices[j].Name })
	addr := d.Address
	if addr == nil {
		addr = func(ip string, port int32) string { return net.JoinHostPort(ip, strconv.Itoa(int(port))) }
	}
	seen := map[string]bool{}
	var out []Replica
	for i := range slices {
		port, ok := slicePort(&slices[i], d.PortName)
		if !ok {
			continue
		}
		for _, ep := range slices[i].Endpoints {
			if len(ep.Addresses) == 0 {
				continue
			}
			url := "http://" + addr(ep.Addresses[0], port)
			key := url
			if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" && ref.Name != "" {
				key = ref.Namespace + "/" + ref.Name
			}
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, Replica{Key: key, URL: url})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func slicePort(s *discoveryv1.EndpointSlice, name string) (int32, bool) {
	for _, p := range s.Ports {
		if p.Port == nil {
			continue
		}
		if name == "" || (p.Name != nil && *p.Name == name) {
			return *p.Port, true
		}
	}
	return 0, false
}
