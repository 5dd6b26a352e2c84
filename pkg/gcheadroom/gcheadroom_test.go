package gcheadroom

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/testenv"
)

func TestPercent(t *testing.T) {
	o := Options{MaxPercent: 400, MinPercent: 50, Headroom: 64 << 20}
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 400},        // nothing measured yet
		{8 << 20, 400},  // 800 % would be allowed: capped at the configured GOGC
		{16 << 20, 400}, // exactly the headroom at 400 %
		{32 << 20, 200}, // the headroom is 200 % of the live heap
		{64 << 20, 100}, // …100 %
		{100 << 20, 64}, // …64 %
		{256 << 20, 50}, // 25 % would be below the floor
		{1 << 40, 50},   // a huge heap
	} {
		if got := o.Percent(c.live); got != c.want {
			t.Errorf("Percent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}

// TestTunerFollowsLiveHeap keeps a live heap that is large against the headroom and checks that the
// Tuner lowers the GC percentage after a collection, raises it again once the heap is released, and
// leaves it alone after Stop.
func TestTunerFollowsLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	o := Options{MaxPercent: 400, MinPercent: 25, Headroom: 8 << 20}
	tu := Start(o)
	defer tu.Stop()

	live := make([][]byte, 64) // 64 MiB live: 8 MiB headroom is 12 %, so the floor
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	waitPercent(t, tu, 25)
	if got := debug.SetGCPercent(25); got != 25 {
		t.Errorf("GC percent in effect %d, want 25", got)
	}
	runtime.KeepAlive(live)
	live = nil
	waitPercent(t, tu, 400)

	tu.Stop()
	debug.SetGCPercent(77)
	runtime.GC()
	runtime.GC()
	if got := debug.SetGCPercent(77); got != 77 {
		t.Errorf("a stopped Tuner changed the GC percent to %d", got)
	}
}

// waitPercent collects until the Tuner has set want (its cleanup runs after a collection, on another
// goroutine).
func waitPercent(t *testing.T, tu *Tuner, want int) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		runtime.GC()
		if tu.Percent() == want {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("Tuner set %d %%, want %d", tu.Percent(), want)
}

// TestRunnableTunesWhileRunning runs the Runnable as a manager would: the percentage is set when it
// starts, follows the live heap while it runs, and is left alone once its context ended.
func TestRunnableTunesWhileRunning(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	debug.SetGCPercent(100)
	r := &Runnable{Options: Options{MaxPercent: 321, MinPercent: 25, Headroom: 8 << 20}}
	if r.NeedLeaderElection() {
		t.Error("NeedLeaderElection: true, want false (every replica tunes its own process)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	for deadline := time.Now().Add(10 * time.Second); !r.Running(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the Runnable did not start tuning")
		}
	}
	if got := debug.SetGCPercent(321); got != 321 {
		t.Errorf("GC percent %d after Start, want MaxPercent 321", got)
	}
	live := make([][]byte, 64) // 64 MiB live: the floor
	for i := range live {
		live[i] = make([]byte, 1<<20)
	}
	waitGCPercent(t, 25)
	runtime.KeepAlive(live)
	live = nil
	waitGCPercent(t, 321)

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Start returned %v, want nil", err)
	}
	if r.Running() {
		t.Error("Running after Start returned")
	}
	debug.SetGCPercent(77)
	runtime.GC()
	runtime.GC()
	if got := debug.SetGCPercent(77); got != 77 {
		t.Errorf("the GC percent changed to %d after the Runnable stopped", got)
	}
}

// waitGCPercent collects until the percentage in effect is want.
func waitGCPercent(t *testing.T, want int) {
	t.Helper()
	testenv.EventuallyDetail(t, 20*time.Second, fmt.Sprintf("the GC percent is %d", want), func() (bool, string) {
		runtime.GC()
		got := debug.SetGCPercent(-1)
		debug.SetGCPercent(got)
		return got == want, fmt.Sprintf("GC percent %d", got)
	})
}
