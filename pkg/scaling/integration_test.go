package scaling

import (
	"context"
	"math"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/scaling/scalingtest"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// harness runs a Collector and a gRPC Server against fake interceptor replicas (real pkg/admin
// handlers on loopback) and talks to the server with a real gRPC client. It is for tests whose subject
// is the wire (the gRPC surface, its limits, TLS); a test whose verdict depends on timing runs in
// virtual time on startVirtual instead.
type harness struct {
	t      *testing.T
	ics    []*scalingtest.Interceptor
	reps   atomic.Pointer[[]Replica]
	state  *State
	conn   *grpc.ClientConn
	client externalscaler.ExternalScalerClient
}

type harnessOptions struct {
	replicas int
	server   ServerOptions
	dial     []grpc.DialOption
}

func startHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	h := &harness{t: t, state: NewState(30 * time.Second)}
	var reps []Replica
	for i := range o.replicas {
		ic := scalingtest.Start(scalingtest.Options{})
		t.Cleanup(ic.Close)
		h.ics = append(h.ics, ic)
		reps = append(reps, Replica{Key: string(rune('a' + i)), URL: ic.URL()})
	}
	h.reps.Store(&reps)
	log := testLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	collector := NewCollector(CollectorOptions{
		Discovery: DiscoverFunc(func(context.Context) ([]Replica, error) { return *h.reps.Load(), nil }),
		Counts:    admin.Client{},
		Wake:      admin.Client{},
		Interval:  20 * time.Millisecond,
		Timeout:   100 * time.Millisecond,
		// Longer than any test runs: no test on real sockets is about a replica's counts expiring
		// (those run in virtual time, startVirtual), and a loaded machine that answers a loopback poll
		// late for a second must not drop them from under a test about the gRPC surface (it did:
		// "ns/app concurrency after a bad call = 0, want 2", 2 of 20 runs under load with a 1s grace).
		StaleGrace: time.Hour,
		Log:        log.WithName("collector"),
	}, h.state)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.server.Listener = lis
	o.server.Log = log.WithName("grpc")
	server := NewServer(o.server, h.state)
	done := make(chan error, 2)
	go func() { done <- collector.Start(ctx) }()
	go func() { done <- server.Start(ctx) }()
	dial := o.dial
	if dial == nil {
		dial = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	h.conn, err = grpc.NewClient(lis.Addr().String(), dial...)
	if err != nil {
		t.Fatal(err)
	}
	h.client = externalscaler.NewExternalScalerClient(h.conn)
	t.Cleanup(func() {
		h.conn.Close()
		cancel()
		for range 2 {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("runnable returned %v on shutdown", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("collector or server did not stop within 10s")
				return
			}
		}
	})
	select {
	case <-h.state.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("no snapshot within 10s")
	}
	return h
}

func (h *harness) metric(md map[string]string, name string) float64 {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := h.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: name})
	if err != nil {
		h.t.Fatalf("GetMetrics %s: %v", name, err)
	}
	return resp.MetricValues[0].MetricValueFloat
}

func (h *harness) isActive(md map[string]string) bool {
	h.t.Helper()
	resp, err := h.client.IsActive(context.Background(), ref(md))
	if err != nil {
		h.t.Fatalf("IsActive: %v", err)
	}
	return resp.Result
}

func metricIs(h *harness, md map[string]string, name string, want float64) func() (bool, string) {
	return func() (bool, string) {
		got := h.metric(md, name)
		return got == want, "got " + formatFloat(got)
	}
}

func formatFloat(f float64) string {
	return trigger.Metadata{ConcurrencyTarget: f}.Encode("")[trigger.KeyConcurrencyTarget]
}

var appMD = trigger.Metadata{App: "ns/app", ConcurrencyTarget: 10, RequestRateTarget: 5, Window: 10 * time.Second, Granularity: time.Second}.Encode("s:1")

func TestGRPCServesCountsSummedOverRealInterceptors(t *testing.T) {
	h := startHarness(t, harnessOptions{replicas: 3})
	if h.isActive(appMD) {
		t.Fatal("active before any traffic")
	}
	h.ics[0].Counts().Set("ns/app", 2, 0)
	h.ics[1].Counts().Set("ns/app", 1, 3)
	h.ics[2].Counts().Set("ns/other", 7, 0)
	testenv.EventuallyDetail(t, 10*time.Second, "concurrency is the sum over replicas", metricIs(h, appMD, trigger.MetricConcurrency, 6))
	if !h.isActive(appMD) {
		t.Error("not active with 6 requests in flight or held")
	}
	fleet := trigger.Metadata{Fleet: true, ConcurrencyTarget: 100}.Encode("s:1")
	testenv.EventuallyDetail(t, 10*time.Second, "fleet concurrency", metricIs(h, fleet, trigger.MetricFleet, 13))

	for _, ic := range h.ics {
		ic.Counts().AddRequests("ns/app", 10)
	}
	testenv.EventuallyDetail(t, 10*time.Second, "request rate over the 10s window", metricIs(h, appMD, trigger.MetricRequestRate, 3))

	health := healthpb.NewHealthClient(h.conn)
	resp, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: externalscaler.ExternalScaler_ServiceDesc.ServiceName})
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health check: %v %v, want SERVING", resp, err)
	}
}

// TestHungReplicaKeepsItsLastCountsForTheGracePeriodWithoutBlockingReads runs in virtual time with
// the default flags: a replica that stops answering keeps its last counts, marked stale, for the
// 15s grace from its last good answer and not a poll longer, the other replica is still polled
// meanwhile, KEDA's reads never wait on the hung one, and it counts again once it answers.
// startCountingPair starts two virtual replicas counting 4 and 1 requests of ns/app, and checks
// that one interval later the metric sums them.
func startCountingPair(t *testing.T) *vharness {
	t.Helper()
	h := startVirtual(t, virtualOptions{replicas: 2})
	h.ics[0].Counts().Set("ns/app", 4, 0)
	h.ics[1].Counts().Set("ns/app", 1, 0)
	after(vInterval)
	if got := h.metric(appMD, trigger.MetricConcurrency); got != 5 {
		t.Fatalf("concurrency %v one interval after the counts were set, want 5 from both replicas", got)
	}
	return h
}

func TestHungReplicaKeepsItsLastCountsForTheGracePeriodWithoutBlockingReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startCountingPair(t)

		h.ics[0].Hang() // its last good answer was at most one interval ago
		h.ics[1].Counts().Set("ns/app", 2, 0)
		after(2 * time.Second)
		// The healthy replica's change shows while the hung one's last counts are kept, marked stale.
		if got := h.metric(appMD, trigger.MetricConcurrency); got != 6 {
			t.Fatalf("concurrency %v while a replica hangs, want 6 (its last counts and the other's new ones)", got)
		}
		if s := h.state.Snapshot(); !s.Apps["ns/app"].Stale || !s.Replicas[0].Stale {
			t.Errorf("app stale %v, hung replica stale %v after 2s without an answer, want both", s.Apps["ns/app"].Stale, s.Replicas[0].Stale)
		}
		// Reads never wait on the hung replica: no virtual time passes in them.
		for range 20 {
			start := time.Now()
			h.metric(appMD, trigger.MetricConcurrency)
			h.isActive(appMD)
			if d := time.Since(start); d > 0 {
				t.Fatalf("GetMetrics and IsActive took %s while a replica hangs", d)
			}
		}
		after(vGrace - 2*time.Second - vInterval) // just short of the grace since its last good answer
		if got := h.metric(appMD, trigger.MetricConcurrency); got != 6 {
			t.Fatalf("concurrency %v before the grace ended, want 6: the hung replica's counts were dropped early", got)
		}
		after(2 * vInterval) // past the grace
		if got := h.metric(appMD, trigger.MetricConcurrency); got != 2 {
			t.Fatalf("concurrency %v after the grace, want 2: the hung replica's counts are still used", got)
		}

		h.ics[0].Unhang()
		after(vTimeout + vInterval) // the poll in flight times out, the next one is answered
		if got := h.metric(appMD, trigger.MetricConcurrency); got != 6 {
			t.Fatalf("concurrency %v after the replica answers again, want 6", got)
		}
	})
}

func TestRestartedReplicaCountsFromZeroWithoutSpikeOrDrop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startVirtual(t, virtualOptions{replicas: 2, before: func(ics []*scalingtest.Interceptor) {
			ics[0].Counts().AddRequests("ns/app", 1000) // before the first poll: a baseline, not traffic
			ics[1].Counts().AddRequests("ns/app", 500)
		}})
		s := h.state.Snapshot()
		if len(s.Replicas) != 2 || s.Replicas[0].Epoch == "" || s.Replicas[1].Epoch == "" {
			t.Fatalf("replicas after the first cycle: %+v, want both polled", s.Replicas)
		}
		if got := h.metric(appMD, trigger.MetricRequestRate); got != 0 {
			t.Fatalf("rate after the first poll = %v, want 0 (existing totals are a baseline)", got)
		}
		oldEpoch := s.Replicas[0].Epoch
		h.ics[0].Restart()
		h.ics[0].Counts().AddRequests("ns/app", 20)
		h.ics[1].Counts().AddRequests("ns/app", 10)
		after(vInterval)
		// appMD's window is 10s: 30 requests are 3/s, the restarted replica's 20 counted from zero.
		if got := h.metric(appMD, trigger.MetricRequestRate); got != 3 {
			t.Errorf("rate after a restart = %v, want 3", got)
		}
		if s := h.state.Snapshot(); s.Replicas[0].Epoch == oldEpoch {
			t.Errorf("replica epoch still %q after restart", oldEpoch)
		}
	})
}

func TestReplicaLeavingDiscoveryIsDroppedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startCountingPair(t)
		rest := (*h.reps.Load())[1:]
		h.reps.Store(&rest)
		after(vInterval) // the next cycle's discovery, not the grace
		if got := h.metric(appMD, trigger.MetricConcurrency); got != 1 {
			t.Errorf("concurrency %v one interval after a replica left discovery, want 1", got)
		}
	})
}

func recvWithin(t *testing.T, stream externalscaler.ExternalScaler_StreamIsActiveClient, d time.Duration) (bool, time.Duration) {
	t.Helper()
	start := time.Now()
	type result struct {
		v   bool
		err error
	}
	c := make(chan result, 1)
	go func() {
		resp, err := stream.Recv()
		c <- result{resp.GetResult(), err}
	}()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("StreamIsActive Recv: %v", r.err)
		}
		return r.v, time.Since(start)
	case <-time.After(d):
		t.Fatalf("no StreamIsActive message within %s", d)
		return false, 0
	}
}

func TestStreamIsActivePushesWakeNoticesAndSurvivesBrokenWakeStreams(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startVirtual(t, virtualOptions{replicas: 2})
		md := trigger.Metadata{App: "ns/app", RequestRateTarget: 1}.Encode("s:1")
		stream := h.streamIsActive(md)
		if v, _ := stream.recvWithin(t, time.Second); v {
			t.Fatal("first message true before any traffic")
		}
		after(vInterval / 2) // between two polls
		if h.ics[0].WakeStreams() != 1 || h.ics[1].WakeStreams() != 1 {
			t.Fatalf("wake streams open: %d and %d, want 1 each", h.ics[0].WakeStreams(), h.ics[1].WakeStreams())
		}
		count0, sum0 := wakeDelays(t)
		// A notice the replica raised 300ms before it reached the scaler.
		h.ics[1].WakeAt("ns/app", time.Now().Add(-300*time.Millisecond))
		if v, d := stream.recvWithin(t, time.Second); !v {
			t.Fatal("message after a wake notice is false")
		} else if d != 0 {
			t.Errorf("wake notice reached the StreamIsActive client after %s, want at once (not at the next poll)", d)
		}
		// The wake's path to KEDA is measured: one sample, from the notice's time to the push.
		if count, sum := wakeDelays(t); count != count0+1 || math.Abs(sum-sum0-0.3) > 1e-9 {
			t.Errorf("wake notice delay: %d samples summing %.6fs, want 1 of 0.3s", count-count0, sum-sum0)
		}
		if !h.isActive(md) {
			t.Error("IsActive disagrees with the stream after a wake notice")
		}

		// The replica breaks its stream; the collector reconnects (backoff 25-50ms) and the next wake
		// still arrives.
		h.ics[1].DropWakeStreams()
		after(100 * time.Millisecond)
		if n := h.ics[1].WakeStreams(); n != 1 {
			t.Fatalf("%d wake streams 100ms after the replica dropped its stream, want 1 (reconnected)", n)
		}
		h.ics[1].Wake("ns/app")
		if v, d := stream.recvWithin(t, time.Second); !v {
			t.Fatal("message after the second wake notice is false")
		} else if d != 0 {
			t.Errorf("second wake notice reached the client after %s, want at once", d)
		}
	})
}

// wakeDelays reads httpscale_scaler_wake_notice_delay_seconds: its sample count and sum.
func wakeDelays(t *testing.T) (uint64, float64) {
	t.Helper()
	var m dto.Metric
	if err := metricWakeDelay.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

func TestStreamIsActivePushesActivityChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startVirtual(t, virtualOptions{replicas: 1})
		md := map[string]string{trigger.KeyHTTPScaledObject: "ns/app", trigger.KeyConcurrencyTarget: "1", trigger.KeyRequestRateWindow: "1s"}
		stream := h.streamIsActive(md)
		if v, _ := stream.recvWithin(t, time.Second); v {
			t.Fatal("first message true before any traffic")
		}
		h.ics[0].Counts().Set("ns/app", 0, 1) // a held request, no wake notice
		if v, d := stream.recvWithin(t, time.Second); !v || d > vInterval {
			t.Fatalf("held request pushed %v after %s, want true at the next poll", v, d)
		}
		h.ics[0].Counts().Set("ns/app", 0, 0)
		if d := stream.expectEnd(t, time.Second, "held request answered"); d > vInterval {
			t.Errorf("end of activity pushed %s after the held request was answered, want at the next poll", d)
		}
	})
}

// TestStreamIsActiveEndsActivityAfterTheActiveHoldNotTheRateWindow is the regression test for an app
// that reached zero scaledownPeriod plus the rate window (1 minute) after its last request: a
// finished request keeps the app active for the active hold only, although it stays in the
// request rate for the whole window.
func TestStreamIsActiveEndsActivityAfterTheActiveHoldNotTheRateWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := startVirtual(t, virtualOptions{replicas: 1})
		md := map[string]string{trigger.KeyHTTPScaledObject: "ns/app", trigger.KeyRequestRateTarget: "10", trigger.KeyRequestRateWindow: "1m"}
		stream := h.streamIsActive(md)
		if v, _ := stream.recvWithin(t, time.Second); v {
			t.Fatal("first message true before any traffic")
		}
		h.ics[0].Counts().AddRequests("ns/app", 3) // three short requests, none in flight at any poll
		if v, d := stream.recvWithin(t, time.Second); !v || d > vInterval {
			t.Fatalf("finished requests pushed %v after %s, want true at the next poll", v, d)
		}
		held := stream.expectEnd(t, time.Minute, "short requests")
		if held < DefaultActiveHold || held > DefaultActiveHold+vInterval {
			t.Errorf("activity ended %s after the requests were seen, want the active hold %s (to the next poll)", held, DefaultActiveHold)
		}
		if got := h.metric(md, trigger.MetricRequestRate); got <= 0 {
			t.Errorf("request rate after activity ended = %v, want the three requests still counted in the 1m window", got)
		}
		if h.isActive(md) {
			t.Error("IsActive = true after the active hold, want false")
		}
	})
}
