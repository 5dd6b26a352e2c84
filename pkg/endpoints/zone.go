package endpoints

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nodeReadTimeout bounds the one read of this replica's Node.
const nodeReadTimeout = 10 * time.Second

// ResolveZone returns the zone this replica runs in: configured when it is set, else the
// topology.kubernetes.io/zone label of the Node named nodeName (in a pod, the NODE_NAME environment
// variable from the downward API's spec.nodeName), else "" — an unknown zone, with which Candidates
// never filters. It reads the Node once (RBAC: get nodes).
func ResolveZone(ctx context.Context, cs kubernetes.Interface, configured, nodeName string) (string, error) {
	if configured != "" || nodeName == "" {
		return configured, nil
	}
	return NodeZone(ctx, cs, nodeName)
}

// NodeZone returns the topology.kubernetes.io/zone label of the Node named nodeName, "" when the Node
// has none.
func NodeZone(ctx context.Context, cs kubernetes.Interface, nodeName string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, nodeReadTimeout)
	defer cancel()
	node, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading the zone of node %s: %w", nodeName, err)
	}
	return node.Labels[corev1.LabelTopologyZone], nil
}

// Candidates chooses the endpoints of set a request from zone should go to.
//
// With zoneAware false or zone unknown (""), every endpoint is a candidate. Otherwise, in order of
// preference: the endpoints whose topology hints (hints.forZones) name zone, when every endpoint
// carries hints (as kube-proxy, a Service partly without hints is treated as having none); the
// endpoints in zone; every endpoint. crossZone is true when the last choice was taken for want of an
// endpoint in zone, which is when a forward leaves the zone.
//
// Cost: no allocation when every endpoint qualifies or none is in zone; otherwise one slice of the
// chosen endpoints. The result may share memory with set and must not be modified.
func Candidates(set *Set, zone string, zoneAware bool) (eps []Endpoint, crossZone bool) {
	if set.Len() == 0 {
		return nil, false
	}
	all := set.Endpoints
	if !zoneAware || zone == "" {
		return all, false
	}
	if allHinted(all) {
		if eps := filter(all, func(e *Endpoint) bool { return slices.Contains(e.ForZones, zone) }); len(eps) > 0 {
			return eps, false
		}
	}
	if eps := filter(all, func(e *Endpoint) bool { return e.Zone == zone }); len(eps) > 0 {
		return eps, false
	}
	return all, true
}

func allHinted(eps []Endpoint) bool {
	for i := range eps {
		if len(eps[i].ForZones) == 0 {
			return false
		}
	}
	return true
}

// filter returns the endpoints keep accepts: eps itself when it accepts all of them.
func filter(eps []Endpoint, keep func(*Endpoint) bool) []Endpoint {
	n := 0
	for i := range eps {
		if keep(&eps[i]) {
			n++
		}
	}
	switch n {
	case 0:
		return nil
	case len(eps):
		return eps
	}
	out := make([]Endpoint, 0, n)
	for i := range eps {
		if keep(&eps[i]) {
			out = append(out, eps[i])
		}
	}
	return out
}
