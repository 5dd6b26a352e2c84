package endpoints

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// TestSliceStore follows one watch's store through the changes a Reflector makes, checking after
// each what a Service port lists and which Services the Cache is told to recompute.
func TestSliceStore(t *testing.T) {
	named := func(name, service string, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
		s.ObjectMeta = metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{discoveryv1.LabelServiceName: service}}
		return s
	}
	v4 := discoveryv1.AddressTypeIPv4
	web := []discoveryv1.EndpointPort{port("web", 8080)}
	shop := ServiceKey{Namespace: "ns", Service: "shop", PortName: "web"}
	cart := ServiceKey{Namespace: "ns", Service: "cart", PortName: "web"}

	var changed [][]string
	lists := 0
	st := newSliceStore(func(s []string) { changed = append(changed, s) }, func() { lists++ })
	check := func(step string, k ServiceKey, wantReady, wantPending []Endpoint, wantChanged ...string) {
		t.Helper()
		ready, pending := st.list(k)
		var want *Set
		if wantReady != nil {
			want = &Set{Key: k, Endpoints: wantReady}
		}
		if d := cmp.Diff(want, ready); d != "" {
			t.Errorf("%s: ready (-want +got):\n%s", step, d)
		}
		if d := cmp.Diff(wantPending, pending); d != "" {
			t.Errorf("%s: pending (-want +got):\n%s", step, d)
		}
		var got []string
		if len(changed) > 0 {
			got = changed[len(changed)-1]
		}
		if wantChanged != nil && !slices.Equal(got, wantChanged) {
			t.Errorf("%s: recomputed %q, want %q", step, got, wantChanged)
		}
		changed = nil
	}
	pod := podRef("ns", "a", "ua")

	if err := st.Replace([]any{named("shop-1", "shop", slice(v4, web, ep("198.18.0.1", notReady, pod, inZone("z1"), hinted("z1", "z2")))),
		named("cart-1", "cart", slice(v4, web, ep("198.18.0.9")))}, "1"); err != nil {
		t.Fatal(err)
	}
	if lists != 1 || st.len() != 2 {
		t.Fatalf("after the list: %d lists, %d slices held, want 1 and 2", lists, st.len())
	}
	check("listed", shop, nil, []Endpoint{{IP: "198.18.0.1", Port: 8080, Zone: "z1", ForZones: []string{"z1", "z2"}, Pod: "a", PodUID: "ua"}})

	flip := named("shop-1", "shop", slice(v4, web, ep("198.18.0.1", pod, inZone("z1"), hinted("z1", "z2")), ep("198.18.0.2", notReady)))
	_ = st.Update(flip)
	check("readiness flipped", shop,
		[]Endpoint{{IP: "198.18.0.1", Port: 8080, Zone: "z1", ForZones: []string{"z1", "z2"}, Pod: "a", PodUID: "ua"}},
		[]Endpoint{{IP: "198.18.0.2", Port: 8080}}, "shop")

	_ = st.Add(named("shop-2", "shop", slice(v4, web, ep("198.18.0.3"), ep("198.18.0.2"), ep("198.18.0.4", terminating))))
	check("a second slice of the Service", shop,
		[]Endpoint{
			{IP: "198.18.0.1", Port: 8080, Zone: "z1", ForZones: []string{"z1", "z2"}, Pod: "a", PodUID: "ua"},
			{IP: "198.18.0.2", Port: 8080}, {IP: "198.18.0.3", Port: 8080},
		}, nil, "shop")
	if st.len() != 3 {
		t.Errorf("%d slices held, want 3", st.len())
	}

	_ = st.Update(named("shop-2", "shop", slice(v4, web, ep("198.18.0.3", terminating), ep("198.18.0.2", terminating, notReady))))
	check("terminating: neither ready nor pending", shop,
		[]Endpoint{{IP: "198.18.0.1", Port: 8080, Zone: "z1", ForZones: []string{"z1", "z2"}, Pod: "a", PodUID: "ua"}},
		[]Endpoint{{IP: "198.18.0.2", Port: 8080}}, "shop")

	_ = st.Delete(cache.DeletedFinalStateUnknown{Key: "ns/shop-1", Obj: flip})
	check("a slice deleted", shop, nil, nil, "shop")
	if st.len() != 2 {
		t.Errorf("%d slices held, want 2", st.len())
	}

	// The Service label moved to another Service of the same watch: both are recomputed, and the
	// one it left keeps nothing of it.
	_ = st.Update(named("shop-2", "cart", slice(v4, web, ep("198.18.0.7"))))
	check("relabelled: the Service it left", shop, nil, nil, "shop", "cart")
	check("relabelled: the Service it joined", cart, []Endpoint{{IP: "198.18.0.7", Port: 8080}, {IP: "198.18.0.9", Port: 8080}}, nil)
	if st.len() != 2 {
		t.Errorf("%d slices held, want 2", st.len())
	}
	// A delete whose final state still carries the old label finds the slice by name.
	_ = st.Delete(named("shop-2", "shop", slice(v4, web)))
	check("deleted under its old label", cart, []Endpoint{{IP: "198.18.0.9", Port: 8080}}, nil, "cart")
	_ = st.Delete(named("gone", "cart", slice(v4, web)))
	if changed != nil {
		t.Errorf("deleting a slice never stored recomputed %q", changed)
	}

	if err := st.Replace([]any{named("shop-3", "shop", slice(v4, web, ep("198.18.0.5")))}, "2"); err != nil {
		t.Fatal(err)
	}
	check("a re-list forgets what it does not list", cart, nil, nil)
	check("and has what it lists", shop, []Endpoint{{IP: "198.18.0.5", Port: 8080}}, nil)
	if lists != 2 || st.len() != 1 {
		t.Errorf("after the re-list: %d lists, %d slices held, want 2 and 1", lists, st.len())
	}
}

// TestSliceEntryPorts: the entry answers port lookups as the slice's ports would (slicePort's rules).
func TestSliceEntryPorts(t *testing.T) {
	udp := discoveryv1.EndpointPort{Name: ptr.To("dns"), Port: ptr.To[int32](53), Protocol: ptr.To(corev1.ProtocolUDP)}
	noNumber := discoveryv1.EndpointPort{Name: ptr.To("x")}
	for _, tc := range []struct {
		name  string
		ports []discoveryv1.EndpointPort
		want  map[string]int32 // port name asked → port; absent: none
	}{
		{"named", []discoveryv1.EndpointPort{port("web", 8080), port("metrics", 9090)}, map[string]int32{"web": 8080, "metrics": 9090}},
		{"the only port answers the empty name", []discoveryv1.EndpointPort{port("web", 8080)}, map[string]int32{"web": 8080, "": 8080}},
		{"unnamed", []discoveryv1.EndpointPort{port("", 8080)}, map[string]int32{"": 8080}},
		{"not UDP", []discoveryv1.EndpointPort{udp}, map[string]int32{}},
		{"the only usable of two is not the only port", []discoveryv1.EndpointPort{port("web", 8080), udp}, map[string]int32{"web": 8080}},
		{"a port without a number", []discoveryv1.EndpointPort{noNumber}, map[string]int32{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSliceEntry(slice(discoveryv1.AddressTypeIPv4, tc.ports, ep("198.18.0.1")))
			for _, name := range []string{"", "web", "metrics", "dns", "x"} {
				got, ok := e.port(name)
				want, wantOK := tc.want[name]
				if got != want || ok != wantOK {
					t.Errorf("port(%q) = %d, %v; want %d, %v", name, got, ok, want, wantOK)
				}
			}
		})
	}
}

// TestListEndpointsSharesACanonicalSlice: a Service's only slice whose endpoints are already as
// listed gives its endpoints to the Set and the pending list without copying; any other gives what
// the general path gives.
func TestListEndpointsSharesACanonicalSlice(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	web := []discoveryv1.EndpointPort{port("web", 8080)}
	k := ServiceKey{Namespace: "ns", Service: "svc", PortName: "web"}
	for _, tc := range []struct {
		name      string
		slice     *discoveryv1.EndpointSlice
		canonical bool
	}{
		{"sorted", slice(v4, web, ep("198.18.0.1"), ep("198.18.0.2"), ep("198.18.0.3", notReady)), true},
		{"only pending", slice(v4, web, ep("198.18.0.3", notReady)), true},
		{"unsorted", slice(v4, web, ep("198.18.0.2"), ep("198.18.0.1")), false},
		{"an address twice", slice(v4, web, ep("198.18.0.1"), ep("198.18.0.1", inZone("z"))), false},
		{"an address ready and pending", slice(v4, web, ep("198.18.0.1"), ep("198.18.0.1", notReady)), false},
		{"two ports", slice(v4, []discoveryv1.EndpointPort{port("web", 8080), port("metrics", 9090)}, ep("198.18.0.1")), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newSliceEntry(tc.slice)
			if e.canonical != tc.canonical {
				t.Fatalf("canonical = %v, want %v", e.canonical, tc.canonical)
			}
			ready, pending := listEndpoints(k, []sliceEntry{e})
			general := e
			general.canonical = false
			wantReady, wantPending := listEndpoints(k, []sliceEntry{general})
			if d := cmp.Diff(wantReady, ready); d != "" {
				t.Errorf("ready (-general +got):\n%s", d)
			}
			if d := cmp.Diff(wantPending, pending); d != "" {
				t.Errorf("pending (-general +got):\n%s", d)
			}
			if tc.canonical && e.ready > 0 && &ready.Endpoints[0] != &e.eps[0] {
				t.Error("the ready endpoints were copied")
			}
			if ready, _ := listEndpoints(ServiceKey{Namespace: "ns", Service: "svc", PortName: "other"}, []sliceEntry{e}); ready != nil {
				t.Errorf("another port name listed %v", ready.Endpoints)
			}
		})
	}
}
