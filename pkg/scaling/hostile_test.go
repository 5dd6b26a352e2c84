package scaling

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// logBook is a logger that keeps every line, so that a test can assert what an operator would read.
type logBook struct {
	mu    sync.Mutex
	lines []string
}

func newLogBook(t *testing.T) (*logBook, logr.Logger) {
	b := &logBook{}
	return b, funcr.New(func(prefix, args string) {
		b.mu.Lock()
		b.lines = append(b.lines, prefix+" "+args)
		b.mu.Unlock()
	}, funcr.Options{Verbosity: 0})
}

// has reports whether one line contains every part.
func (b *logBook) has(parts ...string) bool { return b.count(parts...) > 0 }

// count returns how many lines contain every part.
func (b *logBook) count(parts ...string) int {
	return len(b.matching(parts...))
}

// matching returns the lines that contain every part.
func (b *logBook) matching(parts ...string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range b.lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// hostileCounts serves /counts with handle and answers 404 everywhere else (the wake stream too).
func hostileCounts(t *testing.T, handle http.HandlerFunc) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != admin.PathCounts {
			http.NotFound(w, r)
			return
		}
		handle(w, r)
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv.URL
}

func jsonCounts(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

// TestHostileReplicasDoNotPoisonOtherReplicasOrApps runs two well-behaved replicas next to replicas
// that misbehave in every way the admin port allows, and checks what KEDA is told by the Service it
// calls: the well-behaved replicas' sums, per app and for the fleet, exactly, for longer than the
// stale grace, and one Info log line naming each bad replica with the reason.
//
// It runs the Collector with the default flags (200ms interval, 1s timeout, 15s grace) in virtual
// time, with the replicas reached without a network: what a poll may take is then the replicas'
// doing alone, never the machine's load. (On the real network with a 100ms timeout, a loaded
// machine made the well-behaved replicas' polls time out for longer than the grace, and KEDA was
// rightly told 0.) The admin client's handling of the same misbehaviour over real connections is
// pkg/admin's hostile tests' subject.
func TestHostileReplicasDoNotPoisonOtherReplicasOrApps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		book, log := newLogBook(t)
		a, b := newMemReplica(), newMemReplica()
		a.counts.Set("ns/app", 2, 0)
		b.counts.Set("ns/app", 1, 0)
		b.counts.Set("ns/other", 5, 0)

		// Each hostile replica is a RoundTrip of its own.
		answer := func(contentType, body string) func(*http.Request) (*http.Response, error) {
			return func(*http.Request) (*http.Response, error) {
				rec := httptest.NewRecorder()
				rec.Header().Set("Content-Type", contentType)
				rec.WriteString(body)
				return rec.Result(), nil
			}
		}
		hostile := map[string]struct {
			rt     func(*http.Request) (*http.Response, error)
			reason string // the poll error's reason in the log and the metric
		}{
			// Before answers were validated, -1000000 cancelled the other replicas' 3 requests in flight
			// and told KEDA the app was idle.
			"negative": {answer("application/json", `{"epoch":"n","seq":1,"full":true,"apps":[{"k":"ns/app","i":-1000000},{"k":"ns/other","h":-5}]}`), "invalid"},
			// Two values near the int64 limit overflowed the fleet's sum into a negative number.
			"overflow": {answer("application/json", `{"epoch":"o","seq":1,"full":true,"apps":[{"k":"ns/app","i":9000000000000000000},{"k":"ns/zzz","i":9000000000000000000}]}`), "invalid"},
			"bad-key":  {answer("application/json", `{"epoch":"k","seq":1,"full":true,"apps":[{"k":"","i":7}]}`), "invalid"},
			"html":     {answer("text/html", "<html><body>upstream error</body></html>"), "failed"},
			// A half-written answer: the connection ends early.
			"truncated": {func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, ContentLength: 500,
					Body:    io.NopCloser(io.MultiReader(strings.NewReader(`{"epoch":"t","seq":1,"full":true,"apps":[{"k":"ns/app","i":40`), errReader{io.ErrUnexpectedEOF})),
					Request: req}, nil
			}, "failed"},
			// Headers and a first byte, then nothing.
			"stalled": {func(req *http.Request) (*http.Response, error) {
				return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
					Body: io.NopCloser(io.MultiReader(strings.NewReader(`{"epoch":"s","apps":[`), stallReader{req.Context()})), Request: req}, nil
			}, "timeout"},
			// Accepts the connection and never answers.
			"silent": {func(req *http.Request) (*http.Response, error) {
				<-req.Context().Done()
				return nil, req.Context().Err()
			}, "timeout"},
		}
		healthy := memTransport{"a": a, "b": b}
		transport := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if hr, ok := hostile[req.URL.Host]; ok {
				return hr.rt(req)
			}
			return healthy.RoundTrip(req)
		})
		var reps atomic.Pointer[[]Replica]
		reps.Store(&[]Replica{{Key: "a", URL: "http://a"}, {Key: "b", URL: "http://b"}})
		state := NewState(30 * time.Second)
		c := NewCollector(CollectorOptions{
			Discovery: DiscoverFunc(func(context.Context) ([]Replica, error) { return *reps.Load(), nil }),
			Counts:    admin.Client{HTTP: &http.Client{Transport: transport}},
			Wake:      admin.Client{HTTP: &noWake},
			Interval:  200 * time.Millisecond, Timeout: time.Second, StaleGrace: 15 * time.Second,
			Log: log,
		}, state)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- c.Start(ctx) }()
		svc := NewService(state, nil, log, nil)
		metric := func(md map[string]string, name string) float64 {
			t.Helper()
			resp, err := svc.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: name})
			if err != nil {
				t.Fatalf("GetMetrics %s: %v", name, err)
			}
			return resp.MetricValues[0].MetricValueFloat
		}
		isActive := func(md map[string]string) bool {
			t.Helper()
			resp, err := svc.IsActive(ctx, ref(md))
			if err != nil {
				t.Fatalf("IsActive: %v", err)
			}
			return resp.Result
		}
		otherMD := trigger.Metadata{App: "ns/other", ConcurrencyTarget: 10}.Encode("s:1")
		fleet := trigger.Metadata{Fleet: true, ConcurrencyTarget: 100}.Encode("s:1")
		time.Sleep(time.Second) // virtual time
		synctest.Wait()
		if got := metric(appMD, trigger.MetricConcurrency); got != 3 {
			t.Fatalf("ns/app concurrency = %v before any hostile replica, want 3", got)
		}

		invalidBefore := testutil.ToFloat64(metricPollErrors.WithLabelValues("invalid"))
		all := append([]Replica(nil), *reps.Load()...)
		for key := range hostile {
			all = append(all, Replica{Key: key, URL: "http://" + key})
		}
		reps.Store(&all)
		time.Sleep(2 * time.Second) // every hostile replica polled and failed (the timeout is 1s)
		synctest.Wait()
		for key := range hostile {
			if !slices.ContainsFunc(state.Snapshot().Replicas, func(rs ReplicaStatus) bool { return rs.Key == key && rs.Err != "" }) {
				t.Errorf("hostile replica %s not polled with an error after 2s", key)
			}
		}

		// What KEDA reads is exactly the well-behaved replicas' sums, and the healthy ones keep being
		// polled next to the hostile ones, past the grace a failing replica's counts are kept for.
		a.counts.Set("ns/app", 4, 0)
		for range 20 {
			time.Sleep(time.Second)
			synctest.Wait()
			if got := metric(appMD, trigger.MetricConcurrency); got != 5 {
				t.Fatalf("at %s: ns/app concurrency = %v, want 5 from the well-behaved replicas", time.Now().Format(time.StampMilli), got)
			}
			if got := metric(otherMD, trigger.MetricConcurrency); got != 5 {
				t.Fatalf("ns/other concurrency = %v, want 5", got)
			}
			if got := metric(fleet, trigger.MetricFleet); got != 10 {
				t.Fatalf("fleet concurrency = %v, want 10", got)
			}
			if !isActive(appMD) || !isActive(otherMD) {
				t.Fatal("an app with requests in flight is reported inactive")
			}
		}
		if _, ok := state.Snapshot().Apps["ns/zzz"]; ok {
			t.Error("an app only a rejected answer mentioned is in the snapshot")
		}
		for _, rs := range state.Snapshot().Replicas {
			if _, bad := hostile[rs.Key]; bad && (!rs.LastSuccess.IsZero() || rs.Err == "") {
				t.Errorf("hostile replica %s: last success %v, error %q; want never successful with an error", rs.Key, rs.LastSuccess, rs.Err)
			}
		}
		for key, hr := range hostile {
			// Each poll of the last 20 s failed the same way: logged once at Info, repeats at V(1).
			replica := fmt.Sprintf(`"replica"=%q`, key)
			if n := book.count("polling interceptor counts failed", replica, fmt.Sprintf(`"reason"=%q`, hr.reason)); n != 1 {
				t.Errorf("%d Info lines name replica %s with reason %s, want 1; its lines: %q", n, key, hr.reason, book.matching(replica))
			}
		}
		if got := testutil.ToFloat64(metricPollErrors.WithLabelValues("invalid")) - invalidBefore; got < 3 {
			t.Errorf("poll errors with reason invalid grew by %v, want at least one per invalid replica (3)", got)
		}

		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Start returned %v", err)
		}
	})
}

// errReader fails every read with err.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// stallReader blocks every read until ctx ends.
type stallReader struct{ ctx context.Context }

func (r stallReader) Read([]byte) (int, error) {
	<-r.ctx.Done()
	return 0, r.ctx.Err()
}

// TestReplicaTurningHostileKeepsItsLastGoodCountsThenExpires checks that a replica whose answers
// become impossible is treated like one that stopped answering: its last believable counts are kept
// for the grace period, then dropped; its impossible numbers are never used.
func TestReplicaTurningHostileKeepsItsLastGoodCountsThenExpires(t *testing.T) {
	var mu sync.Mutex
	body := `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/app","i":4}]}`
	url := hostileCounts(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		b := body
		mu.Unlock()
		jsonCounts(b)(w, r)
	})
	h := startHarness(t, harnessOptions{replicas: 1, grace: time.Second})
	h.ics[0].Counts().Set("ns/app", 1, 0)
	reps := append(*h.reps.Load(), Replica{Key: "turncoat", URL: url})
	h.reps.Store(&reps)
	testenv.EventuallyDetail(t, 10*time.Second, "both replicas counted", metricIs(h, appMD, trigger.MetricConcurrency, 5))

	mu.Lock()
	body = `{"epoch":"e","seq":2,"full":true,"apps":[{"k":"ns/app","i":-100}]}`
	mu.Unlock()
	turned := time.Now()
	for time.Since(turned) < 600*time.Millisecond {
		if got := h.metric(appMD, trigger.MetricConcurrency); got != 5 {
			t.Fatalf("ns/app concurrency = %v within the grace period, want 5 (the last good counts)", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	testenv.EventuallyDetail(t, 10*time.Second, "turncoat's counts dropped after the grace period", metricIs(h, appMD, trigger.MetricConcurrency, 1))
}

// floodingReplica answers /counts with an empty snapshot and, on /wake, writes the given lines as fast
// as the connection takes them, then keeps the stream open with heartbeats.
func floodingReplica(t *testing.T, lines func(w io.Writer)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case admin.PathCounts:
			jsonCounts(`{"epoch":"f","seq":1,"full":true,"apps":[]}`)(w, r)
		case admin.PathWake:
			w.Header().Set(admin.HeaderWakeHeartbeat, "100ms")
			w.WriteHeader(http.StatusOK)
			lines(w)
			w.(http.Flusher).Flush()
			for {
				select {
				case <-r.Context().Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				io.WriteString(w, "{}\n")
				w.(http.Flusher).Flush()
			}
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(func() { srv.CloseClientConnections(); srv.Close() })
	return srv.URL
}

// TestWakeFloodIsBoundedPerReplica runs a replica that sends thousands of wake notices for
// apps nobody asked about, and notices whose key is not an app key, next to a well-behaved replica.
// The scaler keeps at most the flooding replica's allowance, names it in the log, records no
// malformed key, and still pushes the well-behaved replica's notice to KEDA at once.
func TestWakeFloodIsBoundedPerReplica(t *testing.T) {
	// 5,000 notices: 25 times the burst, and read within the wait even at load 45 under -race (20,000
	// were not: 12,774 in 10 s).
	const rate, burst, flood = 100, 200, 5000
	book, log := newLogBook(t)
	h := startHarness(t, harnessOptions{replicas: 1, wakeRate: rate, wakeBurst: burst, log: log})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	md := trigger.Metadata{App: "ns/app", RequestRateTarget: 1}.Encode("s:1")
	stream, err := h.client.StreamIsActive(ctx, ref(md))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := recvWithin(t, stream, 5*time.Second); v {
		t.Fatal("first message true before any traffic")
	}

	malformed := []string{"no-slash", "a/b/c", "/name", "ns/" + strings.Repeat("x", 400)}
	url := floodingReplica(t, func(w io.Writer) {
		for _, k := range malformed {
			fmt.Fprintf(w, "{\"key\":%q}\n", k)
		}
		for i := range flood {
			fmt.Fprintf(w, "{\"key\":\"flood/app-%d\"}\n", i)
		}
	})
	seen := func() float64 {
		return testutil.ToFloat64(metricWakes) + testutil.ToFloat64(metricWakesDropped.WithLabelValues("rate")) +
			testutil.ToFloat64(metricWakesDropped.WithLabelValues("malformed"))
	}
	before := seen()
	start := time.Now()
	reps := append(*h.reps.Load(), Replica{Key: "flooder", URL: url})
	h.reps.Store(&reps)
	testenv.EventuallyDetail(t, 10*time.Second, "the whole flood read", func() (bool, string) {
		n := seen() - before
		return n >= float64(flood+len(malformed)), fmt.Sprintf("%v notices read", n)
	})

	// The well-behaved replica's notice is not queued behind the flood.
	h.ics[0].Wake("ns/app")
	if v, d := recvWithin(t, stream, 5*time.Second); !v {
		t.Fatal("message after the well-behaved replica's wake notice is false")
	} else if d > 2*time.Second {
		t.Errorf("wake notice took %s to reach KEDA during another replica's flood", d)
	}

	h.state.mu.Lock()
	var kept int
	for app := range h.state.wakes {
		if strings.HasPrefix(app, "flood/") {
			kept++
		}
		for _, k := range malformed {
			if app == k {
				t.Errorf("malformed key %.20q recorded as a wake notice", k)
			}
		}
	}
	h.state.mu.Unlock()
	if allowed := burst + int(rate*time.Since(start).Seconds()) + 1; kept == 0 || kept > allowed {
		t.Errorf("%d of the flooding replica's %d notices kept, want between 1 and its allowance %d", kept, flood, allowed)
	}
	if !book.has("dropping wake notices", `"replica"="flooder"`, `"reason"="rate"`) ||
		!book.has("dropping wake notices", `"replica"="flooder"`, `"reason"="malformed"`) {
		t.Error("no log line names the flooding replica with reasons rate and malformed")
	}
}

// TestFlappingEpochDoesNotInventRequests runs a replica that answers with a new epoch on every poll,
// each claiming a thousand requests since it started, next to a well-behaved replica: the request
// rate KEDA reads counts the well-behaved replica's requests and at most the flapping replica's first
// restart, not a thousand requests per poll.
func TestFlappingEpochDoesNotInventRequests(t *testing.T) {
	var mu sync.Mutex
	n := 0
	url := hostileCounts(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		epoch := n
		mu.Unlock()
		jsonCounts(fmt.Sprintf(`{"epoch":"flap-%d","seq":1,"full":true,"apps":[{"k":"ns/app","r":1000}]}`, epoch))(w, r)
	})
	h := startHarness(t, harnessOptions{replicas: 1})
	reps := append(*h.reps.Load(), Replica{Key: "flapper", URL: url})
	h.reps.Store(&reps)
	polls := func() int { mu.Lock(); defer mu.Unlock(); return n }
	testenv.EventuallyDetail(t, 10*time.Second, "flapping replica polled many times", func() (bool, string) {
		return polls() >= 30, fmt.Sprintf("%d polls", polls())
	})
	h.ics[0].Counts().AddRequests("ns/app", 10)
	// appMD's window is 10s: the well-behaved 10 requests are 1/s, the flapping replica's one counted
	// restart adds at most 100/s; each further poll would add another 100/s.
	testenv.EventuallyDetail(t, 10*time.Second, "well-behaved requests counted", func() (bool, string) {
		got := h.metric(appMD, trigger.MetricRequestRate)
		return got >= 1, "got " + formatFloat(got)
	})
	if got := h.metric(appMD, trigger.MetricRequestRate); got > 101 {
		t.Errorf("request rate = %v after %d polls of a flapping replica, want at most 101 (10 real requests and one restart)", got, polls())
	}
}

// TestAbsurdRequestCounterIsCut runs a replica whose request counter jumps from 0 to 2^52 between two
// polls: KEDA reads a rate bounded by MaxAppRequestRate, not one of 10^14 requests a second.
func TestAbsurdRequestCounterIsCut(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	url := hostileCounts(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n := requests
		mu.Unlock()
		jsonCounts(fmt.Sprintf(`{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/app","r":%d}]}`, n))(w, r)
	})
	h := startHarness(t, harnessOptions{replicas: 1})
	reps := append(*h.reps.Load(), Replica{Key: "jumper", URL: url})
	h.reps.Store(&reps)
	testenv.EventuallyDetail(t, 10*time.Second, "baseline from the jumping replica", func() (bool, string) {
		for _, rs := range h.state.Snapshot().Replicas {
			if rs.Key == "jumper" && !rs.LastSuccess.IsZero() {
				return true, ""
			}
		}
		return false, "not polled yet"
	})
	mu.Lock()
	requests = 1 << 52
	mu.Unlock()
	testenv.EventuallyDetail(t, 10*time.Second, "jump observed", func() (bool, string) {
		got := h.metric(appMD, trigger.MetricRequestRate)
		return got > 0, "got " + formatFloat(got)
	})
	// appMD's window is 10s; the cut allows MaxAppRequestRate for each second since the previous
	// answer, at least one.
	if got, limit := h.metric(appMD, trigger.MetricRequestRate), float64(MaxAppRequestRate)/10; got > limit {
		t.Errorf("request rate = %v after one absurd counter, want at most %v", got, limit)
	}
}
