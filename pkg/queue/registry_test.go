package queue

import (
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/admin"
)

func TestCountsFullThenDelta(t *testing.T) {
	r := NewRegistry(nil)
	r.Sync([]string{"ns/a", "ns/b", "ns/c"})
	a, b := r.App("ns/a"), r.App("ns/b")
	a.Received()
	done := a.StartForward()
	b.Received()
	b.Received()

	full := r.CountsSince(0)
	want := []admin.AppCount{{Key: "ns/a", InFlight: 1, Requests: 1}, {Key: "ns/b", Requests: 2}, {Key: "ns/c"}}
	if !full.Full || full.Epoch != r.Epoch() {
		t.Fatalf("first answer: full=%v epoch=%q, want full with epoch %q", full.Full, full.Epoch, r.Epoch())
	}
	if d := cmp.Diff(want, full.Apps); d != "" {
		t.Fatalf("full snapshot (-want +got):\n%s", d)
	}

	// Nothing changed: the delta lists only the app with a request in flight.
	d1 := r.CountsSince(full.Seq)
	if d := cmp.Diff([]admin.AppCount{{Key: "ns/a", InFlight: 1, Requests: 1}}, d1.Apps); d1.Full || d != "" {
		t.Fatalf("idle delta full=%v (-want +got):\n%s", d1.Full, d)
	}

	// The request ends: the app must be reported once more with zero in flight.
	done()
	d2 := r.CountsSince(d1.Seq)
	if d := cmp.Diff([]admin.AppCount{{Key: "ns/a", Requests: 1}}, d2.Apps); d != "" {
		t.Fatalf("delta after end (-want +got):\n%s", d)
	}
	d3 := r.CountsSince(d2.Seq)
	if len(d3.Apps) != 0 {
		t.Fatalf("delta with no change lists %v, want nothing", d3.Apps)
	}
	if d3.Seq <= d2.Seq {
		t.Fatalf("seq did not grow: %d then %d", d2.Seq, d3.Seq)
	}
}

func TestHoldLimit(t *testing.T) {
	r := NewRegistry(nil)
	a := r.App("ns/a")
	for i := range 3 {
		if !a.TryHold(3) {
			t.Fatalf("hold %d refused under limit 3", i+1)
		}
	}
	if a.TryHold(3) {
		t.Fatal("fourth hold admitted with limit 3")
	}
	if got := a.Held(); got != 3 {
		t.Fatalf("held = %d after a refused hold, want 3", got)
	}
	a.Unhold()
	if !a.TryHold(3) {
		t.Fatal("hold refused after one was released")
	}
	if a.TryHold(0) {
		t.Fatal("limit 0 admitted a request")
	}
}

func TestSyncKeepsBusyAppsAndResetsRemovedOnes(t *testing.T) {
	r := NewRegistry(nil)
	r.Sync([]string{"ns/a", "ns/b"})
	busy := r.App("ns/a")
	busy.Received()
	end := busy.StartForward()
	idle := r.App("ns/b")
	idle.Received()

	r.Sync(nil)
	got := r.CountsSince(0).Apps
	if d := cmp.Diff([]admin.AppCount{{Key: "ns/a", InFlight: 1, Requests: 1}}, got); d != "" {
		t.Fatalf("after removing both (-want +got):\n%s", d)
	}
	end()
	r.Sync([]string{"ns/b"})
	got = r.CountsSince(0).Apps
	if d := cmp.Diff([]admin.AppCount{{Key: "ns/b"}}, got); d != "" {
		t.Fatalf("re-added app must start from zero (-want +got):\n%s", d)
	}
}

// TestRemoveKeepsBusyAppsUntilIdle checks that Remove drops idle apps at once, keeps an app with a
// request in flight, drops it on a later Remove once idle, and makes the next counts answer full.
func TestRemoveKeepsBusyAppsUntilIdle(t *testing.T) {
	r := NewRegistry(nil)
	r.Add([]string{"ns/a", "ns/b", "ns/c"})
	busy := r.App("ns/a")
	end := busy.StartForward()
	seq := r.CountsSince(0).Seq

	r.Remove([]string{"ns/a", "ns/b", "ns/absent"})
	if c := r.CountsSince(seq); !c.Full {
		t.Fatal("an answer after a removal must be full")
	}
	got := r.CountsSince(0).Apps
	if d := cmp.Diff([]admin.AppCount{{Key: "ns/a", InFlight: 1}, {Key: "ns/c"}}, got); d != "" {
		t.Fatalf("after removing a busy and an idle app (-want +got):\n%s", d)
	}
	end()
	r.Remove(nil) // nothing new to remove: the busy app, now idle, goes
	got = r.CountsSince(0).Apps
	if d := cmp.Diff([]admin.AppCount{{Key: "ns/c"}}, got); d != "" {
		t.Fatalf("after the busy app turned idle (-want +got):\n%s", d)
	}
	// An app added again after a removal kept it lingering is not dropped by the next Remove.
	end = r.App("ns/c").StartForward()
	r.Remove([]string{"ns/c"})
	r.Add([]string{"ns/c"})
	end()
	r.Remove(nil)
	if got := r.CountsSince(0).Apps; len(got) != 1 || got[0].Key != "ns/c" {
		t.Fatalf("an app added back was dropped: %v", got)
	}
}

// TestAddCreatesMissingAppsAndKeepsTheRest checks that Add keeps the counters of known apps (including
// ones it is not given) and creates the others, which App then returns.
func TestAddCreatesMissingAppsAndKeepsTheRest(t *testing.T) {
	r := NewRegistry(nil)
	known := r.App("ns/a")
	known.Received()
	other := r.App("ns/other")
	r.Add([]string{"ns/a", "ns/b", "ns/c", "ns/b"})
	if r.App("ns/a") != known || r.App("ns/other") != other {
		t.Fatal("Add replaced the counters of known apps")
	}
	got := r.CountsSince(0).Apps
	want := []admin.AppCount{{Key: "ns/a", Requests: 1}, {Key: "ns/b"}, {Key: "ns/c"}, {Key: "ns/other"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("after Add (-want +got):\n%s", d)
	}
	b := r.App("ns/b")
	r.Add([]string{"ns/b"})
	if r.App("ns/b") != b {
		t.Fatal("a second Add replaced ns/b")
	}
}

// TestConcurrentDeltasNeverLoseAChange polls deltas while counters change and checks that the sums a
// consumer builds from deltas equal the final truth.
func TestConcurrentDeltasNeverLoseAChange(t *testing.T) {
	r := NewRegistry(nil)
	keys := []string{"ns/a", "ns/b", "ns/c", "ns/d"}
	r.Sync(keys)
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Go(func() {
			a := r.App(k)
			for range 2000 {
				a.Received()
				a.StartForward()()
			}
		})
	}
	view := map[string]admin.AppCount{}
	apply := func(c admin.Counts) {
		if c.Full {
			clear(view)
		}
		for _, a := range c.Apps {
			view[a.Key] = a
		}
	}
	c := r.CountsSince(0)
	apply(c)
	stop := make(chan struct{})
	go func() { wg.Wait(); close(stop) }()
	for polling := true; polling; {
		select {
		case <-stop:
			polling = false
		default:
		}
		c = r.CountsSince(c.Seq)
		apply(c)
	}
	apply(r.CountsSince(c.Seq))
	for _, k := range keys {
		if d := cmp.Diff(admin.AppCount{Key: k, Requests: 2000}, view[k]); d != "" {
			t.Errorf("consumer view of %s (-want +got):\n%s", k, d)
		}
	}
}

func TestWakeCoalescesAndNeverBlocks(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRegistry(func() time.Time { return now })
	events, cancel := r.Subscribe(0)
	a, b := r.App("ns/a"), r.App("ns/b")

	a.Wake(time.Second)
	got := <-events
	if d := cmp.Diff(admin.WakeEvent{Key: "ns/a", At: now}, got); d != "" {
		t.Fatalf("first event (-want +got):\n%s", d)
	}
	// Within the interval nothing more is published for a; b is independent.
	a.Wake(time.Second)
	b.Wake(time.Second)
	if got := <-events; got.Key != "ns/b" {
		t.Fatalf("got event for %q, want ns/b", got.Key)
	}
	// After Woke, the next cold start publishes at once.
	a.Woke()
	a.Wake(time.Second)
	if got := <-events; got.Key != "ns/a" {
		t.Fatalf("got event for %q after Woke, want ns/a", got.Key)
	}
	// A reader that stops reading never blocks publishers.
	for i := range 1000 {
		now = now.Add(2 * time.Second)
		r.App("ns/x" + string(rune('a'+i%26))).Wake(time.Second)
	}
	cancel()
	cancel()
	for range events { // drained and closed after cancel
	}
	if n := r.Subscribers(); n != 0 {
		t.Fatalf("%d subscribers after cancel, want 0", n)
	}
}

// TestRemovalForcesAFullAnswer: a consumer polling deltas must learn that a removed app is gone, which
// only a full answer can say.
func TestRemovalForcesAFullAnswer(t *testing.T) {
	r := NewRegistry(nil)
	r.Sync([]string{"ns/a", "ns/b"})
	r.App("ns/a").Received()
	first := r.CountsSince(0)
	delta := r.CountsSince(first.Seq)
	if delta.Full {
		t.Fatalf("poll with nothing removed = full, want a delta")
	}
	r.Sync([]string{"ns/b"})
	after := r.CountsSince(delta.Seq)
	if !after.Full {
		t.Fatalf("poll after a removal = delta %+v, want a full answer", after)
	}
	if d := cmp.Diff([]admin.AppCount{{Key: "ns/b"}}, after.Apps); d != "" {
		t.Errorf("full answer after removal (-want +got):\n%s", d)
	}
	if next := r.CountsSince(after.Seq); next.Full {
		t.Errorf("the poll after that = full, want deltas again")
	}
}

// TestSubscribeAnnouncesAppsHoldingRequests: a stream opened (or reopened) while requests are held
// starts with a wake event for their apps, so a cold start during a reconnect is not missed.
func TestSubscribeAnnouncesAppsHoldingRequests(t *testing.T) {
	now := time.Unix(1000, 0)
	r := NewRegistry(func() time.Time { return now })
	r.Sync([]string{"ns/cold", "ns/warm", "ns/idle"})
	cold, warm := r.App("ns/cold"), r.App("ns/warm")
	if !cold.TryHold(10) {
		t.Fatal("hold refused")
	}
	cold.Wake(time.Second) // published with no stream open: nobody gets it
	done := warm.StartForward()
	defer done()

	events, cancel := r.Subscribe(4)
	defer cancel()
	select {
	case got := <-events:
		if d := cmp.Diff(admin.WakeEvent{Key: "ns/cold", At: now}, got); d != "" {
			t.Fatalf("first event (-want +got):\n%s", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event for the app holding a request")
	}
	select {
	case got := <-events:
		t.Fatalf("unexpected event %+v: only apps holding requests are announced", got)
	case <-time.After(50 * time.Millisecond):
	}
}
