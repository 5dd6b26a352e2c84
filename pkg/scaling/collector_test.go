package scaling

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/scaling/scalingtest"
)

// memReplica is an interceptor admin handler reached without a network, so that the Collector can
// run inside a synctest bubble with the production timings in virtual time.
type memReplica struct {
	counts  *scalingtest.Counts
	handler http.Handler
	hung    atomic.Bool
}

func newMemReplica() *memReplica {
	r := &memReplica{counts: scalingtest.NewCounts()}
	r.handler = admin.NewHandler(admin.HandlerOptions{Counts: r.counts})
	return r
}

// memTransport routes requests by host to memReplicas. A hung replica blocks until the request's
// context ends (the poll timeout).
type memTransport map[string]*memReplica

func (m memTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := m[req.URL.Host]
	if r == nil {
		return nil, errors.New("connection refused")
	}
	if r.hung.Load() {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	rec := httptest.NewRecorder()
	r.handler.ServeHTTP(rec, req)
	return rec.Result(), nil
}

// TestCollectorKeepsAHungReplicaForTheGracePeriod runs the Collector with the default flags
// (200ms interval, 1s timeout, 15s grace) in virtual time.
func TestCollectorKeepsAHungReplicaForTheGracePeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newMemReplica(), newMemReplica()
		transport := memTransport{"a": a, "b": b}
		state := NewState(30 * time.Second)
		c := NewCollector(CollectorOptions{
			Discovery: DiscoverFunc(func(context.Context) ([]Replica, error) {
				return []Replica{{Key: "a", URL: "http://a"}, {Key: "b", URL: "http://b"}}, nil
			}),
			Counts:   admin.Client{HTTP: &http.Client{Transport: transport}},
			Wake:     admin.Client{HTTP: &noWake},
			Interval: 200 * time.Millisecond, Timeout: time.Second, StaleGrace: 15 * time.Second,
			Log: testLog(t),
		}, state)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- c.Start(ctx) }()

		a.counts.Set("ns/app", 3, 0)
		b.counts.Set("ns/app", 1, 0)
		check := func(after time.Duration, wantConc int64, wantStale bool) {
			t.Helper()
			time.Sleep(after) // virtual time: the bubble's clock jumps
			synctest.Wait()
			s := state.Snapshot()
			if got := s.Concurrency("ns/app"); got != wantConc || (got > 0 && s.Apps["ns/app"].Stale != wantStale) {
				t.Fatalf("at %s: concurrency %d stale %v, want %d %v", s.At.Format(time.StampMilli), got, s.Apps["ns/app"] != nil && s.Apps["ns/app"].Stale, wantConc, wantStale)
			}
		}
		check(time.Second, 4, false)

		a.hung.Store(true)
		check(5*time.Second, 4, true)  // a's last counts are kept, marked stale
		b.counts.Set("ns/app", 2, 0)   // b is still polled meanwhile
		check(9*time.Second, 5, true)  // 14s after a's last answer
		check(2*time.Second, 2, false) // past the 15s grace: a is ignored
		if got := testutil.ToFloat64(metricReplicas.WithLabelValues("expired")); got != 1 {
			t.Errorf("expired replicas metric = %v, want 1", got)
		}

		a.hung.Store(false)
		check(2*time.Second, 5, false) // a answers again: counted at once

		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Start returned %v", err)
		}
	})
}

// TestCollectorLogsEachNewFailureReason runs, in virtual time, a replica whose first polls time out
// and that then answers impossible counts, then good ones, then times out again. An operator reading
// the Info log learns each reason as it starts (a first timeout must not hide the invalid answers
// that follow), repeats of the same reason stay at V(1), and the recovery is logged.
func TestCollectorLogsEachNewFailureReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mode atomic.Value // "hung", "invalid" or "good"
		mode.Store("hung")
		transport := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			body := `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/app","i":1}]}`
			switch mode.Load() {
			case "hung":
				<-req.Context().Done()
				return nil, req.Context().Err()
			case "invalid":
				body = `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/app","i":-5}]}`
			}
			rec := httptest.NewRecorder()
			rec.Header().Set("Content-Type", "application/json")
			rec.WriteString(body)
			return rec.Result(), nil
		})
		book, log := newLogBook(t)
		c := NewCollector(CollectorOptions{
			Discovery: DiscoverFunc(func(context.Context) ([]Replica, error) {
				return []Replica{{Key: "r", URL: "http://r"}}, nil
			}),
			Counts:   admin.Client{HTTP: &http.Client{Transport: transport}},
			Wake:     admin.Client{HTTP: &noWake},
			Interval: 200 * time.Millisecond, Timeout: time.Second, StaleGrace: 15 * time.Second,
			Log: log,
		}, NewState(30*time.Second))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- c.Start(ctx) }()

		failed := func(reason string) int {
			return book.count("polling interceptor counts failed", `"replica"="r"`, `"reason"="`+reason+`"`)
		}
		step := func(m string, d time.Duration) {
			mode.Store(m)
			time.Sleep(d) // virtual time
			synctest.Wait()
		}
		step("hung", 3*time.Second) // a few timed-out polls
		step("invalid", 3*time.Second)
		if n := failed("timeout"); n != 1 {
			t.Errorf("%d Info lines with reason timeout after several timed-out polls, want 1", n)
		}
		if n := failed("invalid"); n != 1 {
			t.Errorf("%d Info lines with reason invalid after several invalid answers following a timeout, want 1", n)
		}
		step("good", time.Second)
		if !book.has("polling interceptor counts works again", `"replica"="r"`) {
			t.Error("no Info line for the replica answering again")
		}
		step("hung", 3*time.Second)
		if n := failed("timeout"); n != 2 {
			t.Errorf("%d Info lines with reason timeout after the replica failed again, want 2", n)
		}

		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Start returned %v", err)
		}
	})
}
