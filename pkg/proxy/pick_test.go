package proxy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

func ep(ip, zone string, hints ...string) endpoints.Endpoint {
	return endpoints.Endpoint{IP: ip, Port: 8080, Zone: zone, ForZones: hints}
}

func ips(eps []endpoints.Endpoint) []string {
	out := []string{}
	for _, e := range eps {
		out = append(out, e.IP)
	}
	return out
}

// TestZoneCandidates pins the zone choice the proxy relies on (endpoints.Candidates).
func TestZoneCandidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		eps  []endpoints.Endpoint
		zone string
		want []string
	}{
		{"same zone preferred", []endpoints.Endpoint{ep("a1", "a"), ep("b1", "b"), ep("a2", "a")}, "a", []string{"a1", "a2"}},
		{"none in zone: all", []endpoints.Endpoint{ep("b1", "b"), ep("c1", "c")}, "a", []string{"b1", "c1"}},
		{"unknown replica zone: all", []endpoints.Endpoint{ep("a1", "a"), ep("b1", "b")}, "", []string{"a1", "b1"}},
		{"endpoints without zone: all", []endpoints.Endpoint{ep("x", ""), ep("y", "")}, "a", []string{"x", "y"}},
		{"hints win over zones", []endpoints.Endpoint{ep("a1", "a", "b"), ep("b1", "b", "a")}, "a", []string{"b1"}},
		{"hint for several zones", []endpoints.Endpoint{ep("a1", "a", "a", "c"), ep("b1", "b", "b")}, "c", []string{"a1"}},
		{"hints naming no endpoint for us: all", []endpoints.Endpoint{ep("a1", "a", "a"), ep("b1", "b", "b")}, "c", []string{"a1", "b1"}},
		{"partial hints are ignored", []endpoints.Endpoint{ep("a1", "a", "b"), ep("b1", "b")}, "a", []string{"a1"}},
		{"empty", nil, "a", []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, ips(zoneCandidates(tc.eps, tc.zone))); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestPickRoundRobinSkipsTriedAndBad(t *testing.T) {
	set := &endpoints.Set{Endpoints: []endpoints.Endpoint{ep("10.0.0.1", "a"), ep("10.0.0.2", "a"), ep("10.0.0.3", "b")}}
	b := &backend{}
	v := b.candidates(set, "a")
	if v2 := b.candidates(set, "a"); v2 != v {
		t.Error("zone view not cached for the same set")
	}
	now := time.Unix(100, 0)
	var got []string
	for range 4 {
		c, _ := b.pick(v.cands, nil, now)
		got = append(got, c.ep.IP)
	}
	if d := cmp.Diff([]string{"10.0.0.1", "10.0.0.2", "10.0.0.1", "10.0.0.2"}, got); d != "" {
		t.Errorf("round robin in zone a (-want +got):\n%s", d)
	}

	b.markBad("10.0.0.1:8080", now, now.Add(time.Second))
	for range 3 {
		if c, _ := b.pick(v.cands, nil, now); c.ep.IP != "10.0.0.2" {
			t.Fatalf("picked %s while 10.0.0.1 is marked bad", c.ep.IP)
		}
	}
	if c, _ := b.pick(v.cands, nil, now.Add(2*time.Second)); c == nil {
		t.Fatal("no pick after the mark expired")
	}
	// Every untried endpoint is bad: one is tried anyway.
	if c, ok := b.pick(v.cands, []string{"10.0.0.2:8080"}, now); !ok || c.ep.IP != "10.0.0.1" {
		t.Errorf("pick with the only good endpoint tried = %v %v, want the bad one", c, ok)
	}
	if _, ok := b.pick(v.cands, []string{"10.0.0.1:8080", "10.0.0.2:8080"}, now); ok {
		t.Error("pick returned an endpoint although all were tried")
	}
	if d := cmp.Diff([]string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, func() []string {
		var s []string
		for _, c := range v.all {
			s = append(s, c.ep.IP)
		}
		return s
	}()); d != "" {
		t.Errorf("all endpoints (-want +got):\n%s", d)
	}
}

func zoneCandidates(eps []endpoints.Endpoint, zone string) []endpoints.Endpoint {
	out, _ := endpoints.Candidates(&endpoints.Set{Endpoints: eps}, zone, zone != "")
	return out
}
