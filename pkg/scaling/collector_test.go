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
