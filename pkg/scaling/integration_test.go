package scaling

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
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
// handlers on loopback) and talks to the server with a real gRPC client.
type harness struct {
	t      *testing.T
	ics    []*scalingtest.Interceptor
	reps   atomic.Pointer[[]Replica]
	state  *State
	conn   *grpc.ClientConn
	client externalscaler.ExternalScalerClient
}

type harnessOptions struct {
	replicas      int
	grace         time.Duration
	wakeHeartbeat time.Duration
	server        ServerOptions
	dial          []grpc.DialOption
	// wakeRate and wakeBurst: see CollectorOptions.
	wakeRate  float64
	wakeBurst int
	// log, when set, receives the collector's and server's logs instead of the test log.
	log logr.Logger
	// before runs after the replicas started and before the collector's first poll.
	before func(ics []*scalingtest.Interceptor)
}

func startHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	if o.grace == 0 {
		o.grace = time.Second
	}
	h := &harness{t: t, state: NewState(30 * time.Second)}
	var reps []Replica
	for i := range o.replicas {
		ic := scalingtest.Start(scalingtest.Options{WakeHeartbeat: o.wakeHeartbeat})
		t.Cleanup(ic.Close)
		h.ics = append(h.ics, ic)
		reps = append(reps, Replica{Key: string(rune('a' + i)), URL: ic.URL()})
	}
	h.reps.Store(&reps)
	if o.before != nil {
		o.before(h.ics)
	}
	log := o.log
	if log.GetSink() == nil {
		log = testLog(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	collector := NewCollector(CollectorOptions{
		Discovery:  DiscoverFunc(func(context.Context) ([]Replica, error) { return *h.reps.Load(), nil }),
		Counts:     admin.Client{},
		Wake:       admin.Client{},
		Interval:   20 * time.Millisecond,
		Timeout:    100 * time.Millisecond,
		StaleGrace: o.grace,
		WakeRate:   o.wakeRate,
		WakeBurst:  o.wakeBurst,
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

func TestHungReplicaKeepsItsLastCountsForTheGracePeriodWithoutBlockingReads(t *testing.T) {
	h := startHarness(t, harnessOptions{replicas: 2, grace: 1500 * time.Millisecond})
	h.ics[0].Counts().Set("ns/app", 4, 0)
	h.ics[1].Counts().Set("ns/app", 1, 0)
	testenv.EventuallyDetail(t, 10*time.Second, "both replicas counted", metricIs(h, appMD, trigger.MetricConcurrency, 5))

	h.ics[0].Hang()
	hungAt := time.Now()
	h.ics[1].Counts().Set("ns/app", 2, 0)
	// The healthy replica's change shows while the hung one's last counts are kept.
	testenv.EventuallyDetail(t, 10*time.Second, "healthy replica still polled while the other hangs", metricIs(h, appMD, trigger.MetricConcurrency, 6))
	testenv.EventuallyDetail(t, 10*time.Second, "hung replica marked stale", func() (bool, string) {
		s := h.state.Snapshot()
		return s.Apps["ns/app"].Stale && s.Replicas[0].Stale, "not stale yet"
	})
	if time.Since(hungAt) < time.Second && h.metric(appMD, trigger.MetricConcurrency) != 6 {
		t.Error("hung replica's counts were dropped before the grace period ended")
	}
	// Reads never wait on the hung replica.
	for range 20 {
		start := time.Now()
		h.metric(appMD, trigger.MetricConcurrency)
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Fatalf("GetMetrics took %s while a replica hangs", d)
		}
	}
	testenv.EventuallyDetail(t, 10*time.Second, "hung replica ignored after the grace period", metricIs(h, appMD, trigger.MetricConcurrency, 2))
	// The grace period runs from the last good answer, up to one 20ms interval before Hang.
	if d := time.Since(hungAt); d < 1400*time.Millisecond {
		t.Errorf("hung replica dropped after %s, before the 1.5s grace period", d)
	}
	h.ics[0].Unhang()
	testenv.EventuallyDetail(t, 10*time.Second, "replica back after it answers again", metricIs(h, appMD, trigger.MetricConcurrency, 6))
}

func TestRestartedReplicaCountsFromZeroWithoutSpikeOrDrop(t *testing.T) {
	h := startHarness(t, harnessOptions{replicas: 2, before: func(ics []*scalingtest.Interceptor) {
		ics[0].Counts().AddRequests("ns/app", 1000) // before the first poll: a baseline, not traffic
		ics[1].Counts().AddRequests("ns/app", 500)
	}})
	testenv.EventuallyDetail(t, 10*time.Second, "baseline", func() (bool, string) {
		s := h.state.Snapshot()
		return len(s.Replicas) == 2 && s.Replicas[0].Epoch != "" && s.Replicas[1].Epoch != "", "replicas not polled yet"
	})
	if got := h.metric(appMD, trigger.MetricRequestRate); got != 0 {
		t.Fatalf("rate after the first poll = %v, want 0 (existing totals are a baseline)", got)
	}
	oldEpoch := h.state.Snapshot().Replicas[0].Epoch
	h.ics[0].Restart()
	h.ics[0].Counts().AddRequests("ns/app", 20)
	h.ics[1].Counts().AddRequests("ns/app", 10)
	testenv.EventuallyDetail(t, 10*time.Second, "rate counts the restarted replica from zero", metricIs(h, appMD, trigger.MetricRequestRate, 3))
	if s := h.state.Snapshot(); s.Replicas[0].Epoch == oldEpoch {
		t.Errorf("replica epoch still %q after restart", oldEpoch)
	}
}

func TestReplicaLeavingDiscoveryIsDroppedAtOnce(t *testing.T) {
	h := startHarness(t, harnessOptions{replicas: 2})
	h.ics[0].Counts().Set("ns/app", 4, 0)
	h.ics[1].Counts().Set("ns/app", 1, 0)
	testenv.EventuallyDetail(t, 10*time.Second, "both replicas counted", metricIs(h, appMD, trigger.MetricConcurrency, 5))
	reps := *h.reps.Load()
	rest := reps[1:]
	h.reps.Store(&rest)
	testenv.EventuallyDetail(t, 10*time.Second, "removed replica no longer counted", metricIs(h, appMD, trigger.MetricConcurrency, 1))
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
	h := startHarness(t, harnessOptions{replicas: 2})
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
	testenv.EventuallyDetail(t, 10*time.Second, "wake streams open", func() (bool, string) {
		return h.ics[0].WakeStreams() == 1 && h.ics[1].WakeStreams() == 1, "not subscribed yet"
	})
	count0, sum0 := wakeDelays(t)
	woke := time.Now()
	h.ics[1].Wake("ns/app")
	if v, d := recvWithin(t, stream, 5*time.Second); !v {
		t.Fatal("message after a wake notice is false")
	} else {
		t.Logf("wake notice reached the StreamIsActive client in %s", d)
	}
	// The wake's path to KEDA is measured: one sample, from the notice's time to the push.
	testenv.EventuallyDetail(t, 10*time.Second, "the wake notice's delay observed", func() (bool, string) {
		count, _ := wakeDelays(t)
		return count == count0+1, fmt.Sprintf("%d samples, want %d", count, count0+1)
	})
	if _, sum := wakeDelays(t); sum-sum0 <= 0 || sum-sum0 > time.Since(woke).Seconds() {
		t.Errorf("wake notice delay %.6fs, want within the %s since the notice", sum-sum0, time.Since(woke))
	}
	if !h.isActive(md) {
		t.Error("IsActive disagrees with the stream after a wake notice")
	}

	// The replica breaks its stream; the collector reconnects and the next wake still arrives.
	h.ics[1].DropWakeStreams()
	testenv.EventuallyDetail(t, 10*time.Second, "wake stream reconnected", func() (bool, string) {
		return h.ics[1].WakeStreams() == 1, "not reconnected"
	})
	h.ics[1].Wake("ns/app")
	if v, _ := recvWithin(t, stream, 5*time.Second); !v {
		t.Fatal("message after the second wake notice is false")
	}
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
	h := startHarness(t, harnessOptions{replicas: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	md := map[string]string{trigger.KeyHTTPScaledObject: "ns/app", trigger.KeyConcurrencyTarget: "1", trigger.KeyRequestRateWindow: "1s"}
	stream, err := h.client.StreamIsActive(ctx, ref(md))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := recvWithin(t, stream, 5*time.Second); v {
		t.Fatal("first message true before any traffic")
	}
	h.ics[0].Counts().Set("ns/app", 0, 1) // a held request, no wake notice
	if v, _ := recvWithin(t, stream, 5*time.Second); !v {
		t.Fatal("held request did not push true")
	}
	h.ics[0].Counts().Set("ns/app", 0, 0)
	expectEnd(t, stream, "held request answered")
}

// expectEnd expects the end of activity: true (KEDA starts its cooldown from the last "active" it
// hears, and ignores "inactive"), then false.
func expectEnd(t *testing.T, stream externalscaler.ExternalScaler_StreamIsActiveClient, what string) time.Duration {
	t.Helper()
	v, d := recvWithin(t, stream, 5*time.Second)
	if !v {
		t.Fatalf("%s: first message at the end of activity is false, want true (KEDA's last active)", what)
	}
	if v, _ := recvWithin(t, stream, time.Second); v {
		t.Fatalf("%s: second message at the end of activity is true, want false", what)
	}
	return d
}

// TestStreamIsActiveEndsActivityAfterTheActiveHoldNotTheRateWindow is the regression test for an app
// that reached zero scaledownPeriod plus the rate window (1 minute) after its last request: a
// finished request keeps the app active for the active hold only, although it stays in the
// request rate for the whole window.
func TestStreamIsActiveEndsActivityAfterTheActiveHoldNotTheRateWindow(t *testing.T) {
	h := startHarness(t, harnessOptions{replicas: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	md := map[string]string{trigger.KeyHTTPScaledObject: "ns/app", trigger.KeyRequestRateTarget: "10", trigger.KeyRequestRateWindow: "1m"}
	stream, err := h.client.StreamIsActive(ctx, ref(md))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := recvWithin(t, stream, 5*time.Second); v {
		t.Fatal("first message true before any traffic")
	}
	h.ics[0].Counts().AddRequests("ns/app", 3) // three short requests, none in flight at any poll
	if v, _ := recvWithin(t, stream, 5*time.Second); !v {
		t.Fatal("finished requests did not push true")
	}
	start := time.Now()
	expectEnd(t, stream, "short requests")
	if held := time.Since(start); held < DefaultActiveHold/2 || held > DefaultActiveHold+3*time.Second {
		t.Errorf("activity ended %s after the requests were seen, want about the active hold %s", held, DefaultActiveHold)
	}
	resp, err := h.client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: trigger.MetricRequestRate})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.MetricValues[0].MetricValueFloat; got <= 0 {
		t.Errorf("request rate after activity ended = %v, want the three requests still counted in the 1m window", got)
	}
	active, err := h.client.IsActive(ctx, ref(md))
	if err != nil {
		t.Fatal(err)
	}
	if active.Result {
		t.Error("IsActive = true after the active hold, want false")
	}
}
