package scaling

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/trigger"
)

func ref(md map[string]string) *externalscaler.ScaledObjectRef {
	return &externalscaler.ScaledObjectRef{Name: "app", Namespace: "ns", ScalerMetadata: md}
}

func TestGetMetricSpecReturnsOneMetricPerTarget(t *testing.T) {
	svc := NewService(NewState(time.Minute), nil, testLog(t), nil)
	for _, tc := range []struct {
		name string
		md   trigger.Metadata
		want []*externalscaler.MetricSpec
	}{{
		name: "concurrency only",
		md:   trigger.Metadata{App: "ns/app", ConcurrencyTarget: 10},
		want: []*externalscaler.MetricSpec{{MetricName: trigger.MetricConcurrency, TargetSize: 10, TargetSizeFloat: 10}},
	}, {
		name: "request rate only, fractional target",
		md:   trigger.Metadata{App: "ns/app", RequestRateTarget: 0.5},
		want: []*externalscaler.MetricSpec{{MetricName: trigger.MetricRequestRate, TargetSize: 1, TargetSizeFloat: 0.5}},
	}, {
		name: "both",
		md:   trigger.Metadata{App: "ns/app", ConcurrencyTarget: 4, RequestRateTarget: 100},
		want: []*externalscaler.MetricSpec{
			{MetricName: trigger.MetricConcurrency, TargetSize: 4, TargetSizeFloat: 4},
			{MetricName: trigger.MetricRequestRate, TargetSize: 100, TargetSizeFloat: 100},
		},
	}, {
		name: "interceptor fleet",
		md:   trigger.Metadata{Fleet: true, ConcurrencyTarget: 200},
		want: []*externalscaler.MetricSpec{{MetricName: trigger.MetricFleet, TargetSize: 200, TargetSizeFloat: 200}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := svc.GetMetricSpec(context.Background(), ref(tc.md.Encode("scaler:9090")))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, resp.MetricSpecs, protocmp.Transform()); diff != "" {
				t.Errorf("metric specs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestGetMetricsAnswersOnlyTheConfiguredMetricAsked(t *testing.T) {
	state := NewState(time.Minute)
	a := newAgg("a")
	a.Observe("a", full("ea", 1, app("ns/app", 3, 2, 0)), t0)
	a.Observe("a", delta("ea", 2, app("ns/app", 3, 2, 30)), t0.Add(time.Second))
	snap, changed := a.Build(t0.Add(time.Second))
	state.Publish(snap, changed)
	svc := NewService(state, clocktesting.NewFakePassiveClock(t0.Add(time.Second)), testLog(t), nil)

	both := trigger.Metadata{App: "ns/app", ConcurrencyTarget: 4, RequestRateTarget: 100, Window: 10 * time.Second, Granularity: time.Second}.Encode("s:1")
	concOnly := trigger.Metadata{App: "ns/app", ConcurrencyTarget: 4}.Encode("s:1")
	fleet := trigger.Metadata{Fleet: true, ConcurrencyTarget: 4}.Encode("s:1")
	for _, tc := range []struct {
		name, metric string
		md           map[string]string
		want         float64
		wantCode     codes.Code
	}{
		{name: "concurrency", metric: trigger.MetricConcurrency, md: both, want: 5},
		{name: "request rate", metric: trigger.MetricRequestRate, md: both, want: 3},
		{name: "fleet", metric: trigger.MetricFleet, md: fleet, want: 5},
		{name: "rate not configured", metric: trigger.MetricRequestRate, md: concOnly, wantCode: codes.InvalidArgument},
		{name: "app metric on fleet trigger", metric: trigger.MetricConcurrency, md: fleet, wantCode: codes.InvalidArgument},
		{name: "unknown name", metric: "s0-concurrency", md: both, wantCode: codes.InvalidArgument},
		{name: "bad metadata", metric: trigger.MetricConcurrency, md: map[string]string{"httpScaledObject": "nope"}, wantCode: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := svc.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(tc.md), MetricName: tc.metric})
			if status.Code(err) != tc.wantCode {
				t.Fatalf("error %v, want code %s", err, tc.wantCode)
			}
			if err != nil {
				return
			}
			want := []*externalscaler.MetricValue{{MetricName: tc.metric, MetricValueFloat: tc.want, MetricValue: int64(tc.want)}}
			if diff := cmp.Diff(want, resp.MetricValues, protocmp.Transform()); diff != "" {
				t.Errorf("metric values (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOneRequestAfterALongIdleActivatesTheApp is the regression test for request-rate activation
// that rounds to zero: two hours without traffic, then one request, with the request rate as the
// only metric and a one-hour window (1/3600 req/s, which KEDA's three-decimal formatting would turn
// into 0).
func TestOneRequestAfterALongIdleActivatesTheApp(t *testing.T) {
	state := NewState(30 * time.Second)
	clk := clocktesting.NewFakePassiveClock(t0)
	svc := NewService(state, clk, testLog(t), nil)
	md := ref(trigger.Metadata{App: "ns/app", RequestRateTarget: 5, Window: time.Hour, Granularity: time.Minute}.Encode("s:1"))
	if _, err := svc.GetMetricSpec(context.Background(), md); err != nil { // KEDA asks first; the window is learned
		t.Fatal(err)
	}
	a := NewAggregator(AggregatorOptions{Grace: 10 * time.Second, Window: state.Window, Woken: state.Woken, ActiveHold: DefaultActiveHold})
	a.SetReplicas([]Replica{{Key: "a", URL: "http://a"}})

	const interval = 200 * time.Millisecond
	now := t0
	step := func(requests uint64) {
		now = now.Add(interval)
		clk.SetTime(now)
		a.Observe("a", delta("ea", 1, app("ns/app", 0, 0, requests)), now)
		snap, changed := a.Build(now)
		state.Publish(snap, changed)
	}
	a.Observe("a", full("ea", 1, app("ns/app", 0, 0, 41)), now) // old traffic, long gone
	for range int(2 * time.Hour / interval) {
		step(41)
	}
	isActive := func() bool {
		resp, err := svc.IsActive(context.Background(), md)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Result
	}
	rate := func() float64 {
		resp, err := svc.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: md, MetricName: trigger.MetricRequestRate})
		if err != nil {
			t.Fatal(err)
		}
		return resp.MetricValues[0].MetricValueFloat
	}
	if isActive() || rate() != 0 {
		t.Fatalf("after two idle hours: active %v rate %v, want false 0", isActive(), rate())
	}

	step(42) // one request
	if !isActive() {
		t.Error("IsActive = false after one request, want true")
	}
	if got := rate(); got < MinReportedRate {
		t.Errorf("request rate after one request = %v, want at least %v so that KEDA does not see 0", got, MinReportedRate)
	}

	// It is active for the active hold only; the request stays in the rate through the window.
	for range int(DefaultActiveHold/interval) - 1 {
		step(42)
	}
	if !isActive() {
		t.Errorf("IsActive = false %s after the request, within the active hold %s", DefaultActiveHold-interval, DefaultActiveHold)
	}
	step(42)
	step(42)
	if isActive() {
		t.Error("IsActive = true after the active hold, want false: the rate window must not keep an idle app from scaling to zero")
	}
	for range int(59 * time.Minute / interval) {
		step(42)
	}
	if got := rate(); got < MinReportedRate {
		t.Errorf("request rate 59m after the request inside a 1h window = %v, want at least %v", got, MinReportedRate)
	}
	for range int(2 * time.Minute / interval) {
		step(42)
	}
	if isActive() || rate() != 0 {
		t.Errorf("after the window: active %v rate %v, want false 0", isActive(), rate())
	}
}

func TestIsActiveFollowsWakeNotices(t *testing.T) {
	state := NewState(30 * time.Second)
	state.Publish(&Snapshot{At: t0, Apps: map[string]*AppStats{}}, nil) // a first poll found no traffic
	clk := clocktesting.NewFakePassiveClock(t0)
	svc := NewService(state, clk, testLog(t), nil)
	md := ref(trigger.Metadata{App: "ns/app", ConcurrencyTarget: 1}.Encode("s:1"))
	active := func() bool {
		resp, err := svc.IsActive(context.Background(), md)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Result
	}
	if active() {
		t.Fatal("active before any traffic")
	}
	state.Wake("ns/app", t0)
	if !active() {
		t.Error("not active right after a wake notice")
	}
	clk.SetTime(t0.Add(31 * time.Second))
	if active() {
		t.Error("still active after the wake hold")
	}
}

// A replica that has just started must not answer from an empty view: zero concurrency would let the
// HPA scale an app down, and "inactive" would hide held requests. Calls that need the counts wait for
// the first snapshot; a wake notice that came first is answered at once.
func TestCallsWaitForTheFirstSnapshotUnlessAWakeAnswersThem(t *testing.T) {
	state := NewState(30 * time.Second)
	clk := clocktesting.NewFakePassiveClock(t0)
	svc := NewService(state, clk, testLog(t), nil)
	md := ref(trigger.Metadata{App: "ns/app", ConcurrencyTarget: 1}.Encode("s:1"))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := svc.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: md, MetricName: trigger.MetricConcurrency})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("GetMetrics before the first snapshot: %v, want it to wait until the deadline", err)
	}

	state.Wake("ns/woken", t0)
	woken := ref(trigger.Metadata{App: "ns/woken", ConcurrencyTarget: 1}.Encode("s:1"))
	resp, err := svc.IsActive(context.Background(), woken)
	if err != nil || !resp.Result {
		t.Fatalf("IsActive of a woken app before the first snapshot: %v %v, want true at once", resp, err)
	}

	got := make(chan float64, 1)
	go func() {
		resp, err := svc.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: md, MetricName: trigger.MetricConcurrency})
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- resp.MetricValues[0].MetricValueFloat
	}()
	time.Sleep(20 * time.Millisecond)
	agg := NewAggregator(AggregatorOptions{StaleAfter: time.Second, Grace: time.Minute})
	agg.SetReplicas([]Replica{{Key: "a"}})
	agg.Observe("a", admin.Counts{Epoch: "e", Seq: 1, Full: true, Apps: []admin.AppCount{{Key: "ns/app", InFlight: 3}}}, t0)
	state.Publish(agg.Build(t0))
	select {
	case v := <-got:
		if v != 3 {
			t.Errorf("GetMetrics answered %v once the snapshot came, want 3", v)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("GetMetrics still waiting after the first snapshot")
	}
}

// KEDA calls the scaler with one client certificate for every ScaledObject: a ScaledObject in one
// tenant's namespace naming another namespace's app (or the fleet's metric) is refused, so it cannot
// read that app's traffic through its HPA.
func TestScaledObjectsReadOnlyTheirOwnNamespacesApps(t *testing.T) {
	state := NewState(time.Minute)
	svc := NewService(state, nil, testLog(t), nil)
	svc.fleetNamespace = "httpscale-system"
	state.Publish(&Snapshot{At: t0, Apps: map[string]*AppStats{}}, nil) // calls that need counts wait for a first one
	victim := trigger.Metadata{App: "team-b/shop", ConcurrencyTarget: 1}.Encode("scaler:9090")
	fleet := trigger.Metadata{Fleet: true, ConcurrencyTarget: 1}.Encode("scaler:9090")
	ctx := context.Background()
	for name, r := range map[string]*externalscaler.ScaledObjectRef{
		"another namespace's app":        {Namespace: "team-a", Name: "spy", ScalerMetadata: victim},
		"no namespace":                   {Name: "spy", ScalerMetadata: victim},
		"the fleet metric from a tenant": {Namespace: "team-a", Name: "spy", ScalerMetadata: fleet},
		"the fleet metric, no namespace": {Name: "spy", ScalerMetadata: fleet},
	} {
		if _, err := svc.IsActive(ctx, r); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: IsActive %v, want PermissionDenied", name, err)
		}
		if _, err := svc.GetMetricSpec(ctx, r); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: GetMetricSpec %v, want PermissionDenied", name, err)
		}
		if _, err := svc.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: r, MetricName: trigger.MetricConcurrency}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("%s: GetMetrics %v, want PermissionDenied", name, err)
		}
	}
	for name, r := range map[string]*externalscaler.ScaledObjectRef{
		"its own app":                      {Namespace: "team-b", Name: "shop", ScalerMetadata: victim},
		"the fleet from its own namespace": {Namespace: "httpscale-system", Name: "httpscale-interceptor", ScalerMetadata: fleet},
	} {
		if _, err := svc.IsActive(ctx, r); err != nil {
			t.Errorf("%s: IsActive %v", name, err)
		}
	}
}
