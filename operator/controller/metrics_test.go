package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The lag of the fleet is the age of the oldest write a replica still does not serve, measured from
// when a probe first saw that write; writes every replica serves are forgotten.
func TestPropagationLag(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	written := func(latest string) *Written {
		return &Written{Version: latest, versions: map[string]uint64{"v1": 1, "v2": 2, "v3": 3, "v4": 4}}
	}
	fleet := func(versions ...string) *Fleet {
		f := &Fleet{}
		for _, v := range versions {
			r := Replica{Address: "10.0.0.1:9090", Version: v}
			if v == "" {
				r.Err = "connection refused"
			}
			f.Replicas = append(f.Replicas, r)
		}
		return f
	}
	var l lagTracker
	steps := []struct {
		at     time.Duration
		latest string
		fleet  *Fleet
		want   propagation
	}{
		{0, "v1", fleet("v1", "v1"), propagation{current: 2}},
		// v2 written: one replica follows at once, the other stays on v1.
		{2 * time.Second, "v2", fleet("v2", "v1"), propagation{current: 1, behind: 1}},
		{10 * time.Second, "v2", fleet("v2", "v1"), propagation{current: 1, behind: 1, lag: 8 * time.Second}},
		// More writes do not reset the lag of the replica still on v1 (behind since v2 was seen).
		{20 * time.Second, "v3", fleet("v3", "v1"), propagation{current: 1, behind: 1, lag: 18 * time.Second}},
		{30 * time.Second, "v4", fleet("v4", "v3"), propagation{current: 1, behind: 1, lag: 0}},
		{35 * time.Second, "v4", fleet("v4", "v3", ""), propagation{current: 1, behind: 1, unreachable: 1, lag: 5 * time.Second}},
		// An unknown version (written by another leader) is behind everything remembered.
		{40 * time.Second, "v4", fleet("v4", "v0"), propagation{current: 1, behind: 1, lag: 10 * time.Second}},
		{41 * time.Second, "v4", fleet("v4", "v4"), propagation{current: 2}},
	}
	for _, s := range steps {
		got := l.observe(t0.Add(s.at), written(s.latest), s.fleet)
		if diff := cmp.Diff(s.want, got, cmp.AllowUnexported(propagation{})); diff != "" {
			t.Errorf("at %s (latest %s): (-want +got)\n%s", s.at, s.latest, diff)
		}
	}
	if len(l.writes) != 1 {
		t.Errorf("remembers %d writes once every replica serves the latest, want 1", len(l.writes))
	}
	if got := (&lagTracker{}).observe(t0, &Written{}, fleet("", "x")); got != (propagation{current: 1, unreachable: 1}) {
		t.Errorf("before the first write: %+v", got)
	}
}
