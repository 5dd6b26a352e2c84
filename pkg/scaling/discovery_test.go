package scaling

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// TestEndpointSliceDiscoveryEdgeCases covers what envtest makes awkward (dual-stack slices, port
// selection); the envtest suite proves the main path against a real API server.
func TestEndpointSliceDiscoveryEdgeCases(t *testing.T) {
	v4 := slice(installNS, "admin-v4", "httpscale-interceptor-admin",
		endpoint("198.18.0.1", "interceptor-a", true, false),
		discoveryv1.Endpoint{Addresses: []string{"198.18.0.9"}}, // no targetRef: keyed by address
		discoveryv1.Endpoint{},                                  // no address: skipped
	)
	v6 := slice(installNS, "admin-v6", "httpscale-interceptor-admin", endpoint("fd00::1", "interceptor-a", true, false))
	v6.AddressType = discoveryv1.AddressTypeIPv6
	noPort := slice(installNS, "admin-noport", "httpscale-interceptor-admin", endpoint("198.18.0.2", "interceptor-b", true, false))
	noPort.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("metrics"), Port: ptr.To[int32](9999)}}
	c := fake.NewClientBuilder().WithObjects(v4, v6, noPort).Build()

	for _, tc := range []struct {
		name     string
		portName string
		want     []Replica
	}{{
		name:     "named port; a dual-stack Pod once; a slice without the port ignored",
		portName: "admin",
		want: []Replica{
			{Key: "http://198.18.0.9:9090", URL: "http://198.18.0.9:9090"},
			{Key: installNS + "/interceptor-a", URL: "http://198.18.0.1:9090"},
		},
	}, {
		name: "empty port name takes each slice's first port",
		want: []Replica{
			{Key: "http://198.18.0.9:9999", URL: "http://198.18.0.9:9999"},
			{Key: installNS + "/interceptor-a", URL: "http://198.18.0.1:9999"},
			{Key: installNS + "/interceptor-b", URL: "http://198.18.0.2:9999"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			d := &EndpointSliceDiscovery{Reader: c, Namespace: installNS, Selector: adminSelector, PortName: tc.portName}
			got, err := d.Replicas(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("replicas (-want +got):\n%s", diff)
			}
		})
	}
}
