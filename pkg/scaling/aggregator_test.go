package scaling

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/admin"
)

var t0 = time.Unix(1_800_000_000, 0)

func full(epoch string, seq uint64, apps ...admin.AppCount) admin.Counts {
	return admin.Counts{Epoch: epoch, Seq: seq, Full: true, Apps: apps}
}

func delta(epoch string, seq uint64, apps ...admin.AppCount) admin.Counts {
	return admin.Counts{Epoch: epoch, Seq: seq, Apps: apps}
}

func app(key string, inFlight, held int64, requests uint64) admin.AppCount {
	return admin.AppCount{Key: key, InFlight: inFlight, Held: held, Requests: requests}
}

func concurrency(s *Snapshot) map[string]int64 {
	out := map[string]int64{}
	for k, a := range s.Apps {
		out[k] = a.Concurrency
	}
	return out
}

func newAgg(reps ...string) *Aggregator {
	a := NewAggregator(AggregatorOptions{StaleAfter: 2 * time.Second, Grace: 10 * time.Second, ActiveHold: DefaultActiveHold})
	var rs []Replica
	for _, r := range reps {
		rs = append(rs, Replica{Key: r, URL: "http://" + r})
	}
	a.SetReplicas(rs)
	return a
}

func TestAggregatorSumsConcurrencyWithFullAndDeltaAnswers(t *testing.T) {
	a := newAgg("a", "b")
	a.Observe("a", full("ea", 5, app("ns/x", 2, 1, 10), app("ns/y", 1, 0, 3)), t0)
	a.Observe("b", full("eb", 7, app("ns/x", 0, 4, 1), app("ns/y", 5, 0, 2)), t0)
	snap, _ := a.Build(t0)
	if diff := cmp.Diff(map[string]int64{"ns/x": 7, "ns/y": 6}, concurrency(snap)); diff != "" {
		t.Errorf("concurrency after full answers (-want +got):\n%s", diff)
	}
	if snap.FleetConcurrency != 13 {
		t.Errorf("fleet concurrency = %d, want 13", snap.FleetConcurrency)
	}
	if since, epoch := a.Cursor("a"); since != 5 || epoch != "ea" {
		t.Errorf("cursor of a = %d %q, want 5 ea", since, epoch)
	}

	// A delta that omits ns/y keeps its previous values; a full answer that omits ns/y forgets it.
	a.Observe("a", delta("ea", 6, app("ns/x", 0, 0, 12)), t0.Add(time.Second))
	a.Observe("b", full("eb", 8, app("ns/x", 1, 0, 1)), t0.Add(time.Second))
	snap, _ = a.Build(t0.Add(time.Second))
	if diff := cmp.Diff(map[string]int64{"ns/x": 1, "ns/y": 1}, concurrency(snap)); diff != "" {
		t.Errorf("concurrency after delta and full (-want +got):\n%s", diff)
	}
}

func TestAggregatorKeepsAFailingReplicasCountsForTheGracePeriod(t *testing.T) {
	a := newAgg("a", "b")
	a.Observe("a", full("ea", 1, app("ns/x", 3, 0, 0)), t0)
	a.Observe("b", full("eb", 1, app("ns/x", 1, 0, 0)), t0)
	if s, _ := a.Build(t0); s.Concurrency("ns/x") != 4 || s.Apps["ns/x"].Stale {
		t.Fatalf("start: concurrency %d stale %v, want 4 false", s.Concurrency("ns/x"), s.Apps["ns/x"].Stale)
	}

	// a hangs: no answer and no error yet, only age. b keeps answering.
	for _, step := range []struct {
		at             time.Duration
		failA          bool
		wantConc       int64
		wantStale      bool
		wantA          ReplicaStatus
		recoverA       bool
		wantAfterRecov int64
	}{
		{at: 1 * time.Second, wantConc: 4},
		{at: 3 * time.Second, wantConc: 4, wantStale: true, wantA: ReplicaStatus{Stale: true}},
		{at: 4 * time.Second, failA: true, wantConc: 4, wantStale: true, wantA: ReplicaStatus{Stale: true, Err: "timeout"}},
		{at: 10 * time.Second, failA: true, wantConc: 4, wantStale: true, wantA: ReplicaStatus{Stale: true, Err: "timeout"}},
		{at: 11 * time.Second, failA: true, wantConc: 1, wantA: ReplicaStatus{Expired: true, Err: "timeout"}},
	} {
		now := t0.Add(step.at)
		a.Observe("b", delta("eb", 1, app("ns/x", 1, 0, 0)), now)
		if step.failA {
			a.Fail("a", errors.New("timeout"))
		}
		s, _ := a.Build(now)
		got := s.Replicas[0]
		if s.Concurrency("ns/x") != step.wantConc || s.Apps["ns/x"].Stale != step.wantStale ||
			got.Stale != step.wantA.Stale || got.Expired != step.wantA.Expired || got.Err != step.wantA.Err {
			t.Errorf("at +%s: concurrency %d stale %v, replica a %+v; want %d %v %+v",
				step.at, s.Concurrency("ns/x"), s.Apps["ns/x"].Stale, got, step.wantConc, step.wantStale, step.wantA)
		}
	}

	// a answers again: its counts are back and it is healthy.
	now := t0.Add(12 * time.Second)
	a.Observe("a", delta("ea", 2, app("ns/x", 2, 0, 0)), now)
	s, _ := a.Build(now)
	if s.Concurrency("ns/x") != 3 || s.Replicas[0].Stale || s.Replicas[0].Expired || s.Replicas[0].Err != "" {
		t.Errorf("after recovery: concurrency %d, replica %+v; want 3 and healthy", s.Concurrency("ns/x"), s.Replicas[0])
	}
}

func TestAggregatorDropsReplicasThatLeaveAtOnce(t *testing.T) {
	a := newAgg("a", "b")
	a.Observe("a", full("ea", 1, app("ns/x", 3, 0, 0)), t0)
	a.Observe("b", full("eb", 1, app("ns/x", 1, 0, 0)), t0)
	a.Build(t0)
	a.SetReplicas([]Replica{{Key: "b", URL: "http://b"}})
	a.Observe("a", full("ea", 2, app("ns/x", 9, 0, 0)), t0) // a late answer from a removed replica
	s, _ := a.Build(t0.Add(time.Millisecond))
	if s.Concurrency("ns/x") != 1 || len(s.Replicas) != 1 {
		t.Errorf("after a left: concurrency %d, %d replicas; want 1 and 1", s.Concurrency("ns/x"), len(s.Replicas))
	}
}

func TestAggregatorCountsRequestsAcrossResetsAndJoins(t *testing.T) {
	const w, g = time.Minute, time.Second
	for _, tc := range []struct {
		name  string
		steps func(a *Aggregator)
		want  uint64
	}{{
		name: "increases are summed over replicas",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 100)), t0)
			a.Observe("b", full("eb", 1, app("ns/x", 0, 0, 50)), t0)
			a.Observe("a", delta("ea", 2, app("ns/x", 0, 0, 105)), t0.Add(time.Second))
			a.Observe("b", delta("eb", 2, app("ns/x", 0, 0, 52)), t0.Add(time.Second))
		},
		want: 7,
	}, {
		name: "a joining replica's existing total is a baseline, not a burst",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 100)), t0)
			a.Observe("b", full("eb", 1, app("ns/x", 0, 0, 1_000_000)), t0.Add(time.Second))
			a.Observe("b", delta("eb", 2, app("ns/x", 0, 0, 1_000_001)), t0.Add(2*time.Second))
		},
		want: 1,
	}, {
		name: "a restarted replica (new epoch) counts from zero",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 500)), t0)
			a.Observe("a", full("ea-2", 1, app("ns/x", 0, 0, 3)), t0.Add(time.Second))
			a.Observe("a", delta("ea-2", 2, app("ns/x", 0, 0, 5)), t0.Add(2*time.Second))
		},
		want: 5,
	}, {
		name: "an epoch that flaps on every answer sets baselines, not bursts",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 500)), t0)
			// The first change is a restart like any other: 3 requests since it started.
			a.Observe("a", full("e1", 1, app("ns/x", 0, 0, 3)), t0.Add(200*time.Millisecond))
			// Then a new epoch on every answer, each claiming a thousand requests since it started.
			for i := range 10 {
				a.Observe("a", full(fmt.Sprint("e-flap-", i), 1, app("ns/x", 0, 0, 1000)), t0.Add(time.Duration(i+2)*200*time.Millisecond))
			}
			a.Observe("a", delta("e-flap-9", 2, app("ns/x", 0, 0, 1002)), t0.Add(2500*time.Millisecond))
		},
		want: 5,
	}, {
		name: "restarts further apart than MinEpochLife each count from zero",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 500)), t0)
			a.Observe("a", full("e1", 1, app("ns/x", 0, 0, 3)), t0.Add(200*time.Millisecond))
			a.Observe("a", full("e2", 1, app("ns/x", 0, 0, 4)), t0.Add(200*time.Millisecond+MinEpochLife))
		},
		want: 7,
	}, {
		name: "an absurd increase is cut to what a replica can serve",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 100)), t0)
			a.Observe("a", delta("ea", 2, app("ns/x", 0, 0, 1<<50)), t0.Add(2*time.Second))
		},
		want: 2 * MaxAppRequestRate,
	}, {
		name: "an absurd total at a restart is cut too",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 100)), t0)
			a.Observe("a", full("eb", 1, app("ns/x", 0, 0, 1<<50)), t0.Add(200*time.Millisecond))
		},
		want: MaxAppRequestRate,
	}, {
		name: "a decreasing counter in the same epoch is a reset",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 500)), t0)
			a.Observe("a", delta("ea", 2, app("ns/x", 0, 0, 4)), t0.Add(time.Second))
		},
		want: 4,
	}, {
		name: "an app new to a known replica counts from zero",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/y", 0, 0, 9)), t0)
			a.Observe("a", delta("ea", 2, app("ns/x", 0, 0, 1)), t0.Add(time.Second))
		},
		want: 1,
	}, {
		name: "an app forgotten by a full answer and back later counts from zero",
		steps: func(a *Aggregator) {
			a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 9)), t0)
			a.Observe("a", full("ea", 2), t0.Add(time.Second))
			a.Observe("a", delta("ea", 3, app("ns/x", 0, 0, 2)), t0.Add(2*time.Second))
		},
		want: 2,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAgg("a", "b")
			tc.steps(a)
			s, _ := a.Build(t0.Add(3 * time.Second))
			if got := s.Requests("ns/x", w, g); got != tc.want {
				t.Errorf("requests in window = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestRateWindowAndGranularity(t *testing.T) {
	a := newAgg("a")
	var total uint64
	at := func(d time.Duration, n uint64) {
		total += n
		a.Observe("a", delta("ea", 1, app("ns/x", 0, 0, total)), t0.Add(d))
		a.Build(t0.Add(d))
	}
	a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 0)), t0)
	a.Build(t0)
	at(500*time.Millisecond, 10) // bucket [0s,1s)
	at(1500*time.Millisecond, 20)
	at(9500*time.Millisecond, 30)

	for _, tc := range []struct {
		now      time.Duration
		w, g     time.Duration
		want     uint64
		wantRate float64
	}{
		{now: 9900 * time.Millisecond, w: 10 * time.Second, g: time.Second, want: 60, wantRate: 6},
		// At 10.2s the 10s window covers buckets [1s,11s): the first 10 requests left it.
		{now: 10200 * time.Millisecond, w: 10 * time.Second, g: time.Second, want: 50, wantRate: 5},
		// With a 5s granularity the window at 10.2s is [5s,15s).
		{now: 10200 * time.Millisecond, w: 10 * time.Second, g: 5 * time.Second, want: 30, wantRate: 3},
		{now: 20 * time.Second, w: 10 * time.Second, g: time.Second, want: 0, wantRate: 0},
		{now: 20 * time.Second, w: time.Minute, g: time.Second, want: 60, wantRate: 1},
	} {
		s, _ := a.Build(t0.Add(tc.now))
		if got, rate := s.Requests("ns/x", tc.w, tc.g), s.Rate("ns/x", tc.w, tc.g); got != tc.want || rate != tc.wantRate {
			t.Errorf("at +%s window %s/%s: %d requests, rate %v; want %d, %v", tc.now, tc.w, tc.g, got, rate, tc.want, tc.wantRate)
		}
	}
}

// TestHistoryCompactionIsExactForAlignedWindows appends thousands of totals, which forces many
// compactions, and compares every aligned window with a naive count.
func TestHistoryCompactionIsExactForAlignedWindows(t *testing.T) {
	const w, g = 30 * time.Second, time.Second
	rng := rand.New(rand.NewPCG(1, 2))
	var h history
	type event struct {
		at time.Time
		n  uint64
	}
	var events []event
	var total uint64
	now := t0
	for i := range 5000 {
		now = now.Add(time.Duration(rng.IntN(400)) * time.Millisecond)
		n := uint64(rng.IntN(5))
		if n == 0 {
			continue
		}
		total += n
		events = append(events, event{now, n})
		h = h.appended(now, total, w, g)
		if i%97 != 0 {
			continue
		}
		var want uint64
		start := windowStart(now, w, g)
		for _, e := range events {
			if e.at.UnixNano() >= start {
				want += e.n
			}
		}
		if got := h.inWindow(now, w, g); got != want {
			t.Fatalf("step %d at %s: %d in window, want %d", i, now.Sub(t0), got, want)
		}
		if len(h.samples) > 4*int(w/g)+16 {
			t.Fatalf("history holds %d samples for a %s/%s window: compaction does not bound it", len(h.samples), w, g)
		}
	}
}

// TestSnapshotsAreNotChangedByLaterBuilds keeps an old snapshot and checks that building more does
// not alter what it reports (the history's backing array is shared).
func TestSnapshotsAreNotChangedByLaterBuilds(t *testing.T) {
	a := newAgg("a")
	a.Observe("a", full("ea", 1, app("ns/x", 1, 0, 0)), t0)
	a.Build(t0)
	a.Observe("a", delta("ea", 2, app("ns/x", 1, 0, 5)), t0.Add(time.Second))
	old, _ := a.Build(t0.Add(time.Second))
	for i := range 200 {
		at := t0.Add(time.Second + time.Duration(i+1)*100*time.Millisecond)
		a.Observe("a", delta("ea", 3, app("ns/x", 2, 0, uint64(6+i))), at)
		a.Build(at)
	}
	if got := old.Requests("ns/x", time.Minute, time.Second); got != 5 || old.Concurrency("ns/x") != 1 {
		t.Errorf("old snapshot now reports %d requests, concurrency %d; want 5 and 1", got, old.Concurrency("ns/x"))
	}
}

func TestAggregatorReportsActivityChanges(t *testing.T) {
	a := newAgg("a")
	a.Observe("a", full("ea", 1, app("ns/x", 0, 0, 0), app("ns/y", 0, 0, 0)), t0)
	_, changed := a.Build(t0)
	if diff := cmp.Diff([]string{fleetKey}, changed); diff != "" {
		t.Errorf("first build changes (-want +got):\n%s", diff)
	}
	a.Observe("a", delta("ea", 2, app("ns/x", 0, 1, 0)), t0.Add(time.Second))
	s, changed := a.Build(t0.Add(time.Second))
	if diff := cmp.Diff([]string{"ns/x", fleetKey}, changed); diff != "" || !s.Apps["ns/x"].Active {
		t.Errorf("held request: active %v, changes (-want +got):\n%s", s.Apps["ns/x"].Active, diff)
	}
	a.Observe("a", delta("ea", 3, app("ns/x", 0, 0, 1)), t0.Add(2*time.Second))
	s, changed = a.Build(t0.Add(2 * time.Second))
	if diff := cmp.Diff([]string{fleetKey}, changed); diff != "" || !s.Apps["ns/x"].Active {
		t.Errorf("finished request keeps ns/x active through the active hold: active %v, changes (-want +got):\n%s", s.Apps["ns/x"].Active, diff)
	}
	s, changed = a.Build(t0.Add(2*time.Second + DefaultActiveHold))
	if diff := cmp.Diff([]string(nil), changed); diff != "" || !s.Apps["ns/x"].Active {
		t.Errorf("at the end of the active hold: active %v, changes (-want +got):\n%s", s.Apps["ns/x"].Active, diff)
	}
	s, changed = a.Build(t0.Add(2*time.Second + DefaultActiveHold + time.Millisecond))
	if diff := cmp.Diff([]string{"ns/x"}, changed); diff != "" || s.Apps["ns/x"].Active {
		t.Errorf("after the active hold, inside the rate window: active %v, changes (-want +got):\n%s", s.Apps["ns/x"].Active, diff)
	}
	if got := s.Requests("ns/x", time.Minute, time.Second); got != 1 {
		t.Errorf("requests in the rate window after activity ended = %d, want 1", got)
	}
}
