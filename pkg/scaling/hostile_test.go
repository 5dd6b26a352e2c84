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
// for the grace period, then dropped; its impossible numbers are never used. It runs in virtual time
// with the default flags (200ms interval, 15s grace).
func TestReplicaTurningHostileKeepsItsLastGoodCountsThenExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var body atomic.Value
		body.Store(`{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/app","i":4}]}`)
		h := startVirtual(t, virtualOptions{replicas: 1})
		h.ics[0].Counts().Set("ns/app", 1, 0)
		h.addReplica("turncoat", func(w http.ResponseWriter, r *http.Request) { jsonCounts(body.Load().(string))(w, r) })
		after(vInterval)
		if got := h.metric(appMD, trigger.MetricConcurrency); got != 5 {
			t.Fatalf("ns/app concurrency = %v, want 5 from both replicas", got)
		}

		body.Store(`{"epoch":"e","seq":2,"full":true,"apps":[{"k":"ns/app","i":-100}]}`)
		// Its last good answer was this instant: its counts are kept for 15s, at every poll.
		for range (vGrace - vInterval) / vInterval {
			after(vInterval)
			if got := h.metric(appMD, trigger.MetricConcurrency); got != 5 {
				t.Fatalf("at %s: ns/app concurrency = %v within the grace period, want 5 (the last good counts)", time.Now().Format(time.StampMilli), got)
			}
		}
		after(2 * vInterval)
		if got := h.metric(appMD, trigger.MetricConcurrency); got != 1 {
			t.Fatalf("ns/app concurrency = %v after the grace period, want 1: the turncoat's counts were not dropped", got)
		}
	})
}

// floodingReplica answers /counts with an empty snapshot and, on /wake, writes the given lines as fast
// as the stream takes them, then keeps the stream open with heartbeats.
func floodingReplica(lines func(w io.Writer)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
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
	}
}

// TestWakeFloodIsBoundedPerReplica runs a replica that sends thousands of wake notices for
// apps nobody asked about, and notices whose key is not an app key, next to a well-behaved replica.
// The scaler keeps at most the flooding replica's allowance, names it in the log, records no
// malformed key, and still pushes the well-behaved replica's notice to KEDA at once. It runs in
// virtual time: the allowance is exact, and "at once" means no time passes.
func TestWakeFloodIsBoundedPerReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rate, burst, flood = 100, 200, 5000 // 25 times the burst
		book, log := newLogBook(t)
		h := startVirtual(t, virtualOptions{replicas: 1, wakeRate: rate, wakeBurst: burst, log: log})
		md := trigger.Metadata{App: "ns/app", RequestRateTarget: 1}.Encode("s:1")
		stream := h.streamIsActive(md)
		if v, _ := stream.recvWithin(t, time.Second); v {
			t.Fatal("first message true before any traffic")
		}

		malformed := []string{"no-slash", "a/b/c", "/name", "ns/" + strings.Repeat("x", 400)}
		seen := func() float64 {
			return testutil.ToFloat64(metricWakes) + testutil.ToFloat64(metricWakesDropped.WithLabelValues("rate")) +
				testutil.ToFloat64(metricWakesDropped.WithLabelValues("malformed"))
		}
		before := seen()
		start := time.Now()
		h.addURL("flooder", h.net.serve("flooder", floodingReplica(func(w io.Writer) {
			for _, k := range malformed {
				fmt.Fprintf(w, "{\"key\":%q}\n", k)
			}
			for i := range flood {
				fmt.Fprintf(w, "{\"key\":\"flood/app-%d\"}\n", i)
			}
		})))
		after(vInterval) // the flooder is discovered and its stream read to the end
		if n := seen() - before; n != float64(flood+len(malformed)) {
			t.Fatalf("%v of the %d notices read", n, flood+len(malformed))
		}

		// The well-behaved replica's notice is not queued behind the flood.
		h.ics[0].Wake("ns/app")
		if v, d := stream.recvWithin(t, time.Second); !v {
			t.Fatal("message after the well-behaved replica's wake notice is false")
		} else if d != 0 {
			t.Errorf("wake notice took %s to reach KEDA after another replica's flood, want at once", d)
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
		if allowed := burst + int(rate*time.Since(start).Seconds()); kept < burst || kept > allowed {
			t.Errorf("%d of the flooding replica's %d notices kept, want its burst %d and at most its allowance %d", kept, flood, burst, allowed)
		}
		if !book.has("dropping wake notices", `"replica"="flooder"`, `"reason"="rate"`) ||
			!book.has("dropping wake notices", `"replica"="flooder"`, `"reason"="malformed"`) {
			t.Error("no log line names the flooding replica with reasons rate and malformed")
		}
	})
}

// TestFlappingEpochDoesNotInventRequests runs a replica that answers with a new epoch on every poll,
// each claiming a thousand requests since it started, next to a well-behaved replica: the request
// rate KEDA reads counts the well-behaved replica's requests and at most the flapping replica's first
// restart, not a thousand requests per poll.
func TestFlappingEpochDoesNotInventRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var polls atomic.Int64
		h := startVirtual(t, virtualOptions{replicas: 1})
		h.addReplica("flapper", func(w http.ResponseWriter, r *http.Request) {
			epoch := polls.Add(1)
			jsonCounts(fmt.Sprintf(`{"epoch":"flap-%d","seq":1,"full":true,"apps":[{"k":"ns/app","r":1000}]}`, epoch))(w, r)
		})
		after(6 * time.Second)
		if n := polls.Load(); n < 30 {
			t.Fatalf("flapping replica polled %d times in 6s, want 30", n)
		}
		h.ics[0].Counts().AddRequests("ns/app", 10)
		after(vInterval)
		// appMD's window is 10s: the well-behaved 10 requests are 1/s, the flapping replica's one counted
		// restart adds at most 100/s; each further poll would add another 100/s.
		if got := h.metric(appMD, trigger.MetricRequestRate); got < 1 || got > 101 {
			t.Errorf("request rate = %v after %d polls of a flapping replica, want 1 to 101 (10 real requests and at most one restart)", got, polls.Load())
		}
	})
}

// TestAbsurdRequestCounterIsCut runs a replica whose request counter jumps from 0 to 2^52 between two
// polls: KEDA reads a rate bounded by MaxAppRequestRate, not one of 10^14 requests a second.
func TestAbsurdRequestCounterIsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var requests atomic.Uint64
		h := startVirtual(t, virtualOptions{replicas: 1})
		h.addReplica("jumper", func(w http.ResponseWriter, r *http.Request) {
			jsonCounts(fmt.Sprintf(`{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/app","r":%d}]}`, requests.Load()))(w, r)
		})
		after(vInterval)
		if !slices.ContainsFunc(h.state.Snapshot().Replicas, func(rs ReplicaStatus) bool { return rs.Key == "jumper" && !rs.LastSuccess.IsZero() }) {
			t.Fatal("jumping replica not polled after one interval")
		}
		requests.Store(1 << 52)
		after(vInterval)
		// appMD's window is 10s; the cut allows MaxAppRequestRate for each second since the previous
		// answer, at least one.
		if got, limit := h.metric(appMD, trigger.MetricRequestRate), float64(MaxAppRequestRate)/10; got <= 0 || got > limit {
			t.Errorf("request rate = %v after one absurd counter, want above 0 and at most %v", got, limit)
		}
	})
}
