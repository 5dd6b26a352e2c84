package endpoints

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCandidates(t *testing.T) {
	a1 := Endpoint{IP: "198.18.0.1", Port: 80, Zone: "a"}
	a2 := Endpoint{IP: "198.18.0.2", Port: 80, Zone: "a"}
	b1 := Endpoint{IP: "198.18.0.3", Port: 80, Zone: "b"}
	unknown := Endpoint{IP: "198.18.0.4", Port: 80}
	hint := func(e Endpoint, zones ...string) Endpoint { e.ForZones = zones; return e }
	set := func(eps ...Endpoint) *Set { return &Set{Endpoints: eps} }

	for _, tc := range []struct {
		name      string
		set       *Set
		zone      string
		zoneAware bool
		want      []Endpoint
		wantCross bool
	}{
		{name: "no set", set: nil, zone: "a", zoneAware: true},
		{name: "empty set", set: set(), zone: "a", zoneAware: true},
		{name: "zone awareness off: all", set: set(a1, b1), zone: "a", zoneAware: false, want: []Endpoint{a1, b1}},
		{name: "zone unknown: all, not cross-zone", set: set(a1, b1), zone: "", zoneAware: true, want: []Endpoint{a1, b1}},
		{name: "same zone preferred", set: set(a1, b1, a2), zone: "a", zoneAware: true, want: []Endpoint{a1, a2}},
		{name: "other zone only: all, cross-zone", set: set(b1, unknown), zone: "a", zoneAware: true, want: []Endpoint{b1, unknown}, wantCross: true},
		{name: "every endpoint in zone", set: set(a1, a2), zone: "a", zoneAware: true, want: []Endpoint{a1, a2}},
		{
			name: "hints win over the endpoint's own zone",
			set:  set(hint(a1, "a"), hint(b1, "a"), hint(a2, "b")), zone: "a", zoneAware: true,
			want: []Endpoint{hint(a1, "a"), hint(b1, "a")},
		},
		{
			name: "hints for other zones only: same zone next",
			set:  set(hint(a1, "b"), hint(b1, "b")), zone: "a", zoneAware: true,
			want: []Endpoint{hint(a1, "b")},
		},
		{
			name: "hints on some endpoints only are ignored",
			set:  set(hint(b1, "a"), a1), zone: "a", zoneAware: true,
			want: []Endpoint{a1},
		},
		{
			name: "hints elsewhere and no endpoint in zone: all, cross-zone",
			set:  set(hint(b1, "b")), zone: "a", zoneAware: true,
			want: []Endpoint{hint(b1, "b")}, wantCross: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cross := Candidates(tc.set, tc.zone, tc.zoneAware)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("candidates (-want +got):\n%s", d)
			}
			if cross != tc.wantCross {
				t.Errorf("crossZone = %v, want %v", cross, tc.wantCross)
			}
		})
	}
}

func TestCandidatesDoesNotAllocateWhenAllQualify(t *testing.T) {
	s := &Set{Endpoints: []Endpoint{{IP: "198.18.0.1", Port: 80, Zone: "a"}, {IP: "198.18.0.2", Port: 80, Zone: "a"}}}
	if n := testing.AllocsPerRun(100, func() { Candidates(s, "a", true) }); n != 0 {
		t.Errorf("Candidates allocated %v times, want 0", n)
	}
}

func BenchmarkCandidates(b *testing.B) {
	eps := make([]Endpoint, 12)
	for i := range eps {
		eps[i] = Endpoint{IP: "198.18.0.1", Port: int32(8000 + i), Zone: []string{"a", "b", "c"}[i%3]}
	}
	s := &Set{Endpoints: eps}
	b.Run("all-in-zone-or-off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Candidates(s, "a", false)
		}
	})
	b.Run("filter-same-zone", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Candidates(s, "a", true)
		}
	})
}
