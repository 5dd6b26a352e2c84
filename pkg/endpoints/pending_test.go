package endpoints

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
)

func podRef(namespace, name string, uid types.UID) func(*discoveryv1.Endpoint) {
	return func(e *discoveryv1.Endpoint) {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: namespace, Name: name, UID: uid}
	}
}

func TestListEndpoints(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	web := []discoveryv1.EndpointPort{port("web", 8080)}
	k := ServiceKey{Namespace: "ns", Service: "svc", PortName: "web"}
	inNS := func(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice { s.Namespace = "ns"; return s }
	for _, tc := range []struct {
		name        string
		slices      []*discoveryv1.EndpointSlice
		ready       []Endpoint
		wantPending []Endpoint
	}{
		{
			name: "not ready endpoints are pending, with their pod; terminating ones are neither",
			slices: []*discoveryv1.EndpointSlice{inNS(slice(v4, web,
				ep("198.18.0.1", podRef("ns", "a", "u1")),
				ep("198.18.0.2", notReady, podRef("ns", "b", "u2")),
				ep("198.18.0.3", notReady, terminating, podRef("ns", "c", "u3")),
				ep("198.18.0.4", terminating)))},
			ready:       []Endpoint{{IP: "198.18.0.1", Port: 8080, Pod: "a", PodUID: "u1"}},
			wantPending: []Endpoint{{IP: "198.18.0.2", Port: 8080, Pod: "b", PodUID: "u2"}},
		},
		{
			name: "a targetRef to another namespace or kind names no pod",
			slices: []*discoveryv1.EndpointSlice{inNS(slice(v4, web,
				ep("198.18.0.2", notReady, podRef("other", "victim", "u9")),
				ep("198.18.0.3", notReady, func(e *discoveryv1.Endpoint) {
					e.TargetRef = &corev1.ObjectReference{Kind: "Node", Name: "n"}
				})))},
			wantPending: []Endpoint{{IP: "198.18.0.2", Port: 8080}, {IP: "198.18.0.3", Port: 8080}},
		},
		{
			name: "an address ready in one slice is not pending in another",
			slices: []*discoveryv1.EndpointSlice{
				inNS(slice(v4, web, ep("198.18.0.1"))),
				inNS(slice(v4, web, ep("198.18.0.1", notReady), ep("198.18.0.5", notReady))),
			},
			ready:       []Endpoint{{IP: "198.18.0.1", Port: 8080}},
			wantPending: []Endpoint{{IP: "198.18.0.5", Port: 8080}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready, pending := listSlices(k, tc.slices)
			var want *Set
			if tc.ready != nil {
				want = &Set{Key: k, Endpoints: tc.ready}
			}
			if d := cmp.Diff(want, ready); d != "" {
				t.Errorf("ready (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tc.wantPending, pending); d != "" {
				t.Errorf("pending (-want +got):\n%s", d)
			}
		})
	}
}

// list sets k's listing the way a watch event does.
func list(c *Cache, k ServiceKey, ready []Endpoint, pending ...Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var s *Set
	if len(ready) > 0 {
		s = &Set{Key: k, Endpoints: ready}
	}
	ks, _ := c.keys.Load().Get(k)
	c.update(ks, s, pending)
}

func TestAnsweredEndpointIsServedUntilTheKubeletDecides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t)
		k := ServiceKey{Namespace: "ns", Service: "a"}
		other := ServiceKey{Namespace: "ns", Service: "b"}
		c.Track([]ServiceKey{k, other})
		starting := Endpoint{IP: "198.18.0.1", Port: 80, Pod: "a-1", PodUID: "u1"}

		w, wOther := wait(t.Context(), c, k), wait(t.Context(), c, other)
		l := c.Listed(k)
		list(c, k, nil, starting)
		select {
		case <-l.Changed:
		default:
			t.Fatal("the listing's Changed was not closed when a pending endpoint appeared")
		}
		l = c.Listed(k)
		if d := cmp.Diff([]Endpoint{starting}, l.Pending); d != "" || l.Ready != nil || l.Answered != nil {
			t.Fatalf("listing = %+v (pending diff %s), want one pending endpoint only", l, d)
		}
		if c.Ready(k) != nil {
			t.Fatal("a pending endpoint is served before anyone answered for it")
		}

		// Only a pending endpoint of the key, with the same pod, can be answered for.
		for _, bad := range []Endpoint{
			{IP: "198.18.0.9", Port: 80, Pod: "a-1", PodUID: "u1"},
			{IP: "198.18.0.1", Port: 81, Pod: "a-1", PodUID: "u1"},
			{IP: "198.18.0.1", Port: 80, Pod: "a-1", PodUID: "other"},
		} {
			if c.Answered(k, bad) || c.Answered(other, starting) {
				t.Fatalf("Answered accepted %+v", bad)
			}
		}
		synctest.Wait()
		select {
		case r := <-w:
			t.Fatalf("waiter woke before an answer: %+v", r)
		default:
		}

		if !c.Answered(k, starting) {
			t.Fatal("Answered refused the pending endpoint")
		}
		synctest.Wait()
		select {
		case r := <-w:
			if r.err != nil || !r.set.Probed || r.set.Len() != 1 || r.set.Endpoints[0].Addr() != "198.18.0.1:80" {
				t.Fatalf("waiter got %+v, %v; want the answered endpoint", r.set, r.err)
			}
		default:
			t.Fatal("the answer did not wake the waiter")
		}
		select {
		case r := <-wOther:
			t.Fatalf("another key's waiter woke: %+v", r)
		default:
		}
		if s := c.Ready(k); s == nil || !s.Probed {
			t.Fatalf("Ready = %+v, want the probed set", s)
		}

		// The kubelet's readiness takes over: only listed ready endpoints are served from then on.
		other2 := Endpoint{IP: "198.18.0.2", Port: 80, Pod: "a-2", PodUID: "u2"}
		list(c, k, []Endpoint{other2}, starting)
		if s := c.Ready(k); s == nil || s.Probed || s.Len() != 1 || s.Endpoints[0].IP != "198.18.0.2" {
			t.Fatalf("Ready after the kubelet's readiness = %+v, want only the listed ready endpoint", s)
		}
		if c.Answered(k, starting) {
			t.Fatal("Answered accepted an endpoint while another is listed ready")
		}
		// ... and when it goes, the old answer does not come back by itself.
		list(c, k, nil, starting)
		if s := c.Ready(k); s != nil {
			t.Fatalf("Ready = %+v, want none: an answer does not outlive the kubelet's readiness", s)
		}
	})
}

func TestAnsweredEndpointGoesWithItsPod(t *testing.T) {
	c := newTestCache(t)
	k := ServiceKey{Namespace: "ns", Service: "a"}
	c.Track([]ServiceKey{k})
	e := Endpoint{IP: "198.18.0.1", Port: 80, Pod: "a-1", PodUID: "u1"}
	for _, tc := range []struct {
		name    string
		pending []Endpoint
	}{
		{"the endpoint left the slices or turned terminating", nil},
		{"the address now belongs to another pod", []Endpoint{{IP: "198.18.0.1", Port: 80, Pod: "a-9", PodUID: "u9"}}},
	} {
		list(c, k, nil, e)
		if !c.Answered(k, e) || c.Ready(k) == nil {
			t.Fatalf("%s: answered endpoint not served", tc.name)
		}
		list(c, k, nil, tc.pending...)
		if s := c.Ready(k); s != nil {
			t.Errorf("%s: Ready = %+v, want none", tc.name, s)
		}
		list(c, k, nil, e) // back: a new answer is needed
		if s := c.Ready(k); s != nil {
			t.Errorf("%s: Ready = %+v after the pod came back, want none until answered again", tc.name, s)
		}
	}
	list(c, k, nil, e)
	c.Answered(k, e)
	c.Withdraw(k, e)
	if s := c.Ready(k); s != nil {
		t.Errorf("Ready after Withdraw = %+v, want none", s)
	}
}

func TestListingTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t)
		k := ServiceKey{Namespace: "ns", Service: "a"}
		c.Track([]ServiceKey{k})
		e := Endpoint{IP: "198.18.0.1", Port: 80}
		start := time.Now()
		list(c, k, nil, e)
		time.Sleep(2 * time.Second)
		list(c, k, []Endpoint{e})
		time.Sleep(time.Second)
		list(c, k, []Endpoint{e, {IP: "198.18.0.2", Port: 80}})
		l := c.Listed(k)
		if !l.ListedAt.Equal(start) || !l.ReadyAt.Equal(start.Add(2*time.Second)) {
			t.Errorf("listed at %v, ready at %v; want %v and 2s later: the times of the first listing and the first ready endpoint",
				l.ListedAt, l.ReadyAt, start)
		}
		list(c, k, nil)
		if l := c.Listed(k); !l.ListedAt.IsZero() || !l.ReadyAt.IsZero() {
			t.Errorf("times %v, %v after the endpoints went, want zero", l.ListedAt, l.ReadyAt)
		}
	})
}
