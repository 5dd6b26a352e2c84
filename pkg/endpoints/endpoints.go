// Package endpoints learns the ready endpoints of the Services the routing table sends traffic to,
// from EndpointSlices, and lets the proxy wait for an app to get its first ready endpoint.
package endpoints

import (
	"context"
	"net"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
)

// RedirectManagedBy is the endpointslice.kubernetes.io/managed-by value of the EndpointSlices the
// operator adds to an app's Service in Serve mode while the app has no ready endpoint. They carry the
// interceptors' own addresses, so the cache never reads them as the app's endpoints (an interceptor
// would forward to itself in a loop); the Kubernetes EndpointSlice controller leaves slices of another
// manager alone, and kube-proxy merges every slice of a Service.
const RedirectManagedBy = "serve-redirect.httpscale.dev"

// ServiceKey identifies one port of one Service: the unit the proxy forwards to.
type ServiceKey struct {
	Namespace string
	Service   string
	// PortName is the Service port's name as it appears in the EndpointSlices' ports[].name; empty for
	// a Service with a single unnamed port.
	PortName string
}

// String returns "namespace/service:portName".
func (k ServiceKey) String() string { return k.Namespace + "/" + k.Service + ":" + k.PortName }

// Endpoint is one address of a Service port.
type Endpoint struct {
	// IP is the pod IP.
	IP string
	// Port is the target port on the pod (from the EndpointSlice).
	Port int32
	// Zone is the endpoint's zone (EndpointSlice endpoints[].zone); empty when unknown.
	Zone string
	// ForZones are the EndpointSlice topology hints (hints.forZones); empty when the slice has none.
	ForZones []string
	// Pod and PodUID name the pod behind the address: the endpoint's targetRef when it is a Pod of
	// the slice's own namespace, else empty. A cold-start probe goes to the address only once that
	// pod is read and holds it (pkg/coldstart).
	Pod    string
	PodUID types.UID
}

// Addr returns "ip:port" for dialling.
func (e Endpoint) Addr() string { return net.JoinHostPort(e.IP, strconv.Itoa(int(e.Port))) }

// Set is an immutable snapshot of one Service port's ready endpoints. Readers must not modify it.
type Set struct {
	Key       ServiceKey
	Endpoints []Endpoint
	// Probed is true when no endpoint is ready yet and these are the endpoints a cold-start probe
	// found answering (Cache.Answered), until the kubelet's readiness reaches the EndpointSlice.
	Probed bool
}

// Len returns the number of ready endpoints; a nil Set has none.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.Endpoints)
}

// Source is what the proxy needs from the endpoint cache. Implementations are safe for concurrent use;
// Ready never blocks and never allocates on the hot path.
type Source interface {
	// Ready returns the current ready endpoints of k (nil or empty when none).
	Ready(k ServiceKey) *Set
	// WaitReady blocks until k has at least one ready endpoint and returns them, or returns ctx's error.
	// Waiters of one key are woken together the moment the watch sees the first ready endpoint (a
	// per-key broadcast channel, not a poll loop); waiters of other keys are not woken.
	WaitReady(ctx context.Context, k ServiceKey) (*Set, error)
}
