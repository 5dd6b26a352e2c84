package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// fakeCounts answers a full snapshot for since 0 and a one-app delta otherwise.
type fakeCounts struct {
	epoch string
	mu    sync.Mutex
	asked []uint64
}

func (f *fakeCounts) Epoch() string { return f.epoch }

func (f *fakeCounts) CountsSince(since uint64) Counts {
	f.mu.Lock()
	f.asked = append(f.asked, since)
	f.mu.Unlock()
	if since == 0 {
		return Counts{Epoch: f.epoch, Seq: 7, Full: true, Apps: []AppCount{
			{Key: "a/x", InFlight: 2, Held: 1, Requests: 10},
			{Key: "b/y", Requests: 3},
		}}
	}
	return Counts{Epoch: f.epoch, Seq: since + 1, Apps: []AppCount{{Key: "a/x", InFlight: 1, Requests: 11}}}
}

// fakeWake hands out subscriptions whose channels the test feeds.
type fakeWake struct {
	mu   sync.Mutex
	subs []chan WakeEvent
}

func (f *fakeWake) Subscribe(buffer int) (<-chan WakeEvent, func()) {
	ch := make(chan WakeEvent, buffer)
	f.mu.Lock()
	f.subs = append(f.subs, ch)
	f.mu.Unlock()
	var once sync.Once
	return ch, func() { once.Do(func() {}) }
}

func (f *fakeWake) waitSub(t *testing.T) chan WakeEvent {
	t.Helper()
	var ch chan WakeEvent
	testenv.Eventually(t, 5*time.Second, "a wake subscription arrived", func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.subs) > 0 {
			ch = f.subs[len(f.subs)-1]
		}
		return ch != nil
	})
	return ch
}

func TestStatusAndProbes(t *testing.T) {
	ready := errors.New("draining: shutting down")
	var notReady bool
	srv := httptest.NewServer(NewHandler(HandlerOptions{
		Status: func() Status { return Status{TableVersion: "abc", TableEntries: 3} },
		Ready: func() error {
			if notReady {
				return ready
			}
			return nil
		},
	}))
	defer srv.Close()

	got, err := Client{}.Status(context.Background(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Status{TableVersion: "abc", TableEntries: 3}, got); diff != "" {
		t.Errorf("Status (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		path     string
		notReady bool
		code     int
		body     string
	}{
		{PathHealthz, false, 200, "ok"},
		{PathReadyz, false, 200, "ok"},
		{PathReadyz, true, 503, "draining: shutting down"},
		{PathCounts, false, 404, ""}, // no source wired: not served
	} {
		notReady = tc.notReady
		resp, err := http.Get(srv.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.body) {
			t.Errorf("GET %s (notReady=%v) = %d %q, want %d containing %q", tc.path, tc.notReady, resp.StatusCode, body, tc.code, tc.body)
		}
	}
}

func TestCountsFullThenDelta(t *testing.T) {
	src := &fakeCounts{epoch: "e1"}
	srv := httptest.NewServer(NewHandler(HandlerOptions{Counts: src}))
	defer srv.Close()
	c := Client{}
	ctx := context.Background()

	full, err := c.Counts(ctx, srv.URL, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if !full.Full || full.Epoch != "e1" || len(full.Apps) != 2 || full.Apps[0].Concurrency() != 3 {
		t.Fatalf("first poll = %+v, want a full snapshot of 2 apps with a/x concurrency 3", full)
	}
	delta, err := c.Counts(ctx, srv.URL, full.Seq, full.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if delta.Full || delta.Seq != 8 || len(delta.Apps) != 1 || delta.Apps[0].Requests != 11 {
		t.Fatalf("second poll = %+v, want a delta for a/x at seq 8", delta)
	}
	// A replica that restarted (another epoch) answers a full snapshot whatever since says.
	again, err := c.Counts(ctx, srv.URL, 99, "old-epoch")
	if err != nil {
		t.Fatal(err)
	}
	if !again.Full {
		t.Errorf("poll with a stale epoch = %+v, want a full snapshot", again)
	}
	if diff := cmp.Diff([]uint64{0, 7, 0}, src.asked); diff != "" {
		t.Errorf("since values the source saw (-want +got):\n%s", diff)
	}

	resp, err := http.Get(srv.URL + PathCounts + "?since=minus-one&epoch=e1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad since: status %d, want 400", resp.StatusCode)
	}
}

func TestCountsRejectsDeltaWithoutBase(t *testing.T) {
	// A misbehaving replica that answers a delta to a first poll must not be summed.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"epoch":"e9","seq":3,"apps":[{"k":"a/x","i":1}]}`)
	}))
	defer srv.Close()
	if _, err := (Client{}).Counts(context.Background(), srv.URL, 0, ""); err == nil || !strings.Contains(err.Error(), "delta answer") {
		t.Fatalf("Counts = %v, want a delta-without-base error", err)
	}
}

func TestWakeStreamDeliversEventsInOrder(t *testing.T) {
	src := &fakeWake{}
	stop := make(chan struct{})
	// The heartbeat is also each line's write deadline: 100ms leaves room for a busy machine.
	srv := httptest.NewServer(NewHandler(HandlerOptions{Wake: src, WakeHeartbeat: 100 * time.Millisecond, Stop: stop}))
	defer srv.Close()

	var mu sync.Mutex
	var got []string
	done := make(chan error, 1)
	go func() {
		done <- Client{}.Wake(context.Background(), srv.URL, func(ev WakeEvent) {
			mu.Lock()
			got = append(got, ev.Key)
			mu.Unlock()
		})
	}()
	ch := src.waitSub(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	ch <- WakeEvent{Key: "a/x", At: at}
	time.Sleep(300 * time.Millisecond) // let heartbeats flow between events: they must not reach fn
	ch <- WakeEvent{Key: "b/y", At: at}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(stop) // the replica shuts down
	err := <-done
	if !errors.Is(err, ErrStreamEnded) {
		t.Errorf("Wake returned %v, want ErrStreamEnded", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff([]string{"a/x", "b/y"}, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

func TestWakeStreamDetectsHungReplica(t *testing.T) {
	// The replica announces a 10ms heartbeat and then goes silent without closing the connection.
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderWakeHeartbeat, "10ms")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	start := time.Now()
	err := Client{}.Wake(context.Background(), srv.URL, func(WakeEvent) { t.Error("no event was sent") })
	if !errors.Is(err, ErrHeartbeatMissed) {
		t.Fatalf("Wake = %v, want ErrHeartbeatMissed", err)
	}
	if waited := time.Since(start); waited > 3*time.Second {
		t.Errorf("hung replica detected after %s, want about %d heartbeats", waited, WakeHeartbeatMisses)
	}
}

func TestWakeStreamEndsWithCallerContext(t *testing.T) {
	src := &fakeWake{}
	srv := httptest.NewServer(NewHandler(HandlerOptions{Wake: src}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Client{}.Wake(ctx, srv.URL, func(WakeEvent) {}) }()
	src.waitSub(t)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Wake = %v, want context.Canceled", err)
	}
}
