package endpoints

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

func slice(addrType discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{AddressType: addrType, Ports: ports, Endpoints: eps}
}

func port(name string, n int32) discoveryv1.EndpointPort {
	p := discoveryv1.EndpointPort{Port: ptr.To(n)}
	if name != "" {
		p.Name = ptr.To(name)
	}
	return p
}

func ep(ip string, opts ...func(*discoveryv1.Endpoint)) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func notReady(e *discoveryv1.Endpoint)     { e.Conditions.Ready = ptr.To(false) }
func readyUnknown(e *discoveryv1.Endpoint) { e.Conditions.Ready = nil }
func terminating(e *discoveryv1.Endpoint) {
	e.Conditions.Terminating = ptr.To(true)
}
func inZone(z string) func(*discoveryv1.Endpoint) {
	return func(e *discoveryv1.Endpoint) { e.Zone = ptr.To(z) }
}
func hinted(zones ...string) func(*discoveryv1.Endpoint) {
	return func(e *discoveryv1.Endpoint) {
		e.Hints = &discoveryv1.EndpointHints{}
		for _, z := range zones {
			e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
		}
	}
}

func redirect(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	s.Labels = map[string]string{discoveryv1.LabelManagedBy: RedirectManagedBy}
	return s
}

// listSlices is listEndpoints of the entries of ss.
func listSlices(k ServiceKey, ss []*discoveryv1.EndpointSlice) (*Set, []Endpoint) {
	entries := make([]sliceEntry, len(ss))
	for i, s := range ss {
		entries[i] = newSliceEntry(s)
	}
	return listEndpoints(k, entries)
}

func TestBuildSet(t *testing.T) {
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	web := []discoveryv1.EndpointPort{port("web", 8080), port("metrics", 9090)}
	for _, tc := range []struct {
		name     string
		portName string
		slices   []*discoveryv1.EndpointSlice
		want     []Endpoint // nil: no Set
	}{
		{
			name: "ready, unknown readiness counts as ready, not ready and terminating skipped", portName: "web",
			slices: []*discoveryv1.EndpointSlice{slice(v4, web,
				ep("198.18.0.1"), ep("198.18.0.2", readyUnknown), ep("198.18.0.3", notReady), ep("198.18.0.4", terminating))},
			want: []Endpoint{{IP: "198.18.0.1", Port: 8080}, {IP: "198.18.0.2", Port: 8080}},
		},
		{
			name: "the named port is chosen", portName: "metrics",
			slices: []*discoveryv1.EndpointSlice{slice(v4, web, ep("198.18.0.1"))},
			want:   []Endpoint{{IP: "198.18.0.1", Port: 9090}},
		},
		{
			name: "a port the slice lacks gives nothing", portName: "grpc",
			slices: []*discoveryv1.EndpointSlice{slice(v4, web, ep("198.18.0.1"))},
		},
		{
			name: "empty port name takes the unnamed port", portName: "",
			slices: []*discoveryv1.EndpointSlice{slice(v4, []discoveryv1.EndpointPort{port("", 80)}, ep("198.18.0.1"))},
			want:   []Endpoint{{IP: "198.18.0.1", Port: 80}},
		},
		{
			name: "empty port name takes a single named port", portName: "",
			slices: []*discoveryv1.EndpointSlice{slice(v4, []discoveryv1.EndpointPort{port("http", 80)}, ep("198.18.0.1"))},
			want:   []Endpoint{{IP: "198.18.0.1", Port: 80}},
		},
		{
			name: "empty port name is ambiguous among several named ports", portName: "",
			slices: []*discoveryv1.EndpointSlice{slice(v4, web, ep("198.18.0.1"))},
		},
		{
			name: "UDP ports are not forwarded to", portName: "dns",
			slices: []*discoveryv1.EndpointSlice{slice(v4, []discoveryv1.EndpointPort{{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)}}, ep("198.18.0.1"))},
		},
		{
			name: "FQDN slices are skipped, IPv6 kept, duplicates across slices merged, sorted", portName: "web",
			slices: []*discoveryv1.EndpointSlice{
				slice(v4, web, ep("198.18.0.9"), ep("198.18.0.2")),
				slice(v4, web, ep("198.18.0.2")),
				slice(v6, web, ep("2001:db8::1")),
				slice(discoveryv1.AddressTypeFQDN, web, ep("app.example.com")),
			},
			want: []Endpoint{{IP: "198.18.0.2", Port: 8080}, {IP: "198.18.0.9", Port: 8080}, {IP: "2001:db8::1", Port: 8080}},
		},
		{
			name: "the operator's Serve-mode redirect slice is not the app's", portName: "web",
			slices: []*discoveryv1.EndpointSlice{
				redirect(slice(v4, web, ep("198.18.1.1"))),
				slice(v4, web, ep("198.18.0.1")),
			},
			want: []Endpoint{{IP: "198.18.0.1", Port: 8080}},
		},
		{
			name: "zone and hints are kept", portName: "web",
			slices: []*discoveryv1.EndpointSlice{slice(v4, web, ep("198.18.0.1", inZone("a"), hinted("a", "b")))},
			want:   []Endpoint{{IP: "198.18.0.1", Port: 8080, Zone: "a", ForZones: []string{"a", "b"}}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := ServiceKey{Namespace: "ns", Service: "svc", PortName: tc.portName}
			got, _ := listSlices(k, tc.slices)
			var want *Set
			if tc.want != nil {
				want = &Set{Key: k, Endpoints: tc.want}
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("buildSet (-want +got):\n%s", d)
			}
		})
	}
}

func TestSameEndpoints(t *testing.T) {
	a := &Set{Endpoints: []Endpoint{{IP: "198.18.0.1", Port: 80, Zone: "a"}}}
	for _, tc := range []struct {
		name string
		x, y *Set
		want bool
	}{
		{"nil and nil", nil, nil, true},
		{"nil and empty", nil, &Set{}, true},
		{"equal", a, &Set{Endpoints: []Endpoint{{IP: "198.18.0.1", Port: 80, Zone: "a"}}}, true},
		{"zone differs", a, &Set{Endpoints: []Endpoint{{IP: "198.18.0.1", Port: 80, Zone: "b"}}}, false},
		{"hints differ", a, &Set{Endpoints: []Endpoint{{IP: "198.18.0.1", Port: 80, Zone: "a", ForZones: []string{"a"}}}}, false},
		{"nil and one", nil, a, false},
	} {
		if got := sameEndpoints(tc.x, tc.y); got != tc.want {
			t.Errorf("%s: sameEndpoints = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestBuckets(t *testing.T) {
	for _, tc := range []struct{ n, want int }{{0, 1}, {1, 1}, {64, 1}, {65, 2}, {128, 2}, {129, 4}, {1000, 16}} {
		if got := bucketsFor(tc.n); int(got) != tc.want {
			t.Errorf("bucketsFor(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	// A Service's bucket depends only on its name and the bucket count.
	if bucketOf("shop", 8) != bucketOf("shop", 8) || bucketOf("shop", 1) != 0 {
		t.Error("bucketOf is not a function of name and count")
	}
}
