package scaling

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/scaling/scalingtest"
	"github.com/httpscale/httpscale/pkg/trigger"
)

const (
	benchApps     = 5000
	benchReplicas = 20
)

func benchApp(i int) string { return fmt.Sprintf("ns-%d/app-%d", i%50, i) }

func percentile(d []time.Duration, p float64) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

func reportLatencies(b *testing.B, lat []time.Duration) {
	b.ReportMetric(float64(percentile(lat, 0.50).Microseconds()), "p50-µs")
	b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
	b.ReportMetric(float64(percentile(lat, 1).Microseconds()), "max-µs")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGetMetrics measures GetMetrics over a real gRPC connection on loopback while the
// aggregator folds 20 replicas x 5,000 apps and publishes a snapshot every 200ms in the background
// (deltas touching 10% of the apps), as the collector does at that size ("collecting"), and with
// the snapshot left alone ("static"), to tell the handler's latency from CPU contention.
func BenchmarkGetMetrics(b *testing.B) {
	b.Run("collecting", func(b *testing.B) { benchGetMetrics(b, true) })
	b.Run("static", func(b *testing.B) { benchGetMetrics(b, false) })
}

func benchGetMetrics(b *testing.B, collecting bool) {
	state := NewState(30 * time.Second)
	agg := NewAggregator(AggregatorOptions{Grace: 10 * time.Second, Window: state.Window, Woken: state.Woken})
	var reps []Replica
	for r := range benchReplicas {
		reps = append(reps, Replica{Key: fmt.Sprint(r), URL: fmt.Sprint("http://r", r)})
	}
	agg.SetReplicas(reps)
	rng := rand.New(rand.NewPCG(1, 1))
	totals := make([][]uint64, benchReplicas)
	now := time.Now()
	for r := range benchReplicas {
		totals[r] = make([]uint64, benchApps)
		c := admin.Counts{Epoch: "e", Seq: 1, Full: true}
		for i := range benchApps {
			c.Apps = append(c.Apps, admin.AppCount{Key: benchApp(i), InFlight: int64(rng.IntN(3)), Requests: 0})
		}
		agg.Observe(fmt.Sprint(r), c, now)
	}
	state.Publish(agg.Build(now))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { // the collector's loop, without the HTTP part
		if !collecting {
			return
		}
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			now := time.Now()
			for r := range benchReplicas {
				c := admin.Counts{Epoch: "e", Seq: 2}
				for range benchApps / 10 {
					i := rng.IntN(benchApps)
					totals[r][i] += uint64(rng.IntN(20))
					c.Apps = append(c.Apps, admin.AppCount{Key: benchApp(i), InFlight: int64(rng.IntN(3)), Requests: totals[r][i]})
				}
				agg.Observe(fmt.Sprint(r), c, now)
			}
			state.Publish(agg.Build(now))
		}
	})
	defer wg.Wait()
	defer cancel()

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(ServerOptions{Listener: lis, Log: testLogB(b)}, state)
	go func() { _ = srv.Start(ctx) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := externalscaler.NewExternalScalerClient(conn)
	refs := make([]*externalscaler.ScaledObjectRef, benchApps)
	for i := range refs {
		refs[i] = ref(trigger.Metadata{App: benchApp(i), ConcurrencyTarget: 10, RequestRateTarget: 100}.Encode("s:1"))
	}
	names := []string{trigger.MetricConcurrency, trigger.MetricRequestRate}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if _, err := client.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: refs[i%benchApps], MetricName: names[i%2]}); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

// BenchmarkPollCycle measures one collector cycle against 20 fake replicas with 5,000 apps each,
// served by real pkg/admin handlers on loopback: 20 concurrent HTTP polls, JSON decoding, folding and
// building the snapshot. cpu-ms/cycle is the process's CPU time per cycle and includes the fake
// replicas' side (encoding), which runs in the same process. "delta" is the steady state (10% of
// the apps changed, 5% with requests in flight); "full" is the first cycle after a scaler start.
func BenchmarkPollCycle(b *testing.B) {
	ics := make([]*scalingtest.Interceptor, benchReplicas)
	var reps []Replica
	for r := range ics {
		ics[r] = scalingtest.Start(scalingtest.Options{})
		defer ics[r].Close()
		for i := range benchApps {
			ics[r].Counts().AddRequests(benchApp(i), 1)
		}
		reps = append(reps, Replica{Key: fmt.Sprint(r), URL: ics[r].URL()})
	}
	newCollector := func() *Collector {
		return NewCollector(CollectorOptions{
			Discovery: DiscoverFunc(func(context.Context) ([]Replica, error) { return reps, nil }),
			Counts:    admin.Client{}, Wake: admin.Client{HTTP: &noWake},
			Interval: time.Second, Timeout: 5 * time.Second, StaleGrace: 10 * time.Second, Log: testLogB(b),
		}, NewState(30*time.Second))
	}
	rng := rand.New(rand.NewPCG(2, 2))
	run := func(b *testing.B, ctx context.Context, c *Collector) {
		c.startCycle(ctx)
		for c.pending > 0 {
			c.apply(<-c.results)
		}
		c.build()
		if n := len(c.state.Snapshot().Apps); n != benchApps {
			b.Fatalf("snapshot has %d apps, want %d", n, benchApps)
		}
	}
	b.Run("delta", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c := newCollector()
		run(b, ctx, c) // the full first cycle
		var cpu time.Duration
		busy := make([][]string, len(ics))
		b.ResetTimer()
		for range b.N {
			b.StopTimer()
			for r, ic := range ics {
				for _, app := range busy[r] { // last cycle's in-flight requests finished
					ic.Counts().Set(app, 0, 0)
				}
				busy[r] = busy[r][:0]
				for range benchApps / 20 {
					app := benchApp(rng.IntN(benchApps))
					ic.Counts().Set(app, 1+int64(rng.IntN(3)), 0)
					busy[r] = append(busy[r], app)
				}
				for range benchApps / 20 {
					ic.Counts().AddRequests(benchApp(rng.IntN(benchApps)), 1)
				}
			}
			start := cpuTime()
			b.StartTimer()
			run(b, ctx, c)
			b.StopTimer()
			cpu += cpuTime() - start
		}
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/cycle")
	})
	b.Run("full", func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var cpu time.Duration
		for range b.N {
			b.StopTimer()
			c := newCollector()
			start := cpuTime()
			b.StartTimer()
			run(b, ctx, c)
			b.StopTimer()
			cpu += cpuTime() - start
		}
		b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N), "cpu-ms/cycle")
	})
}

// BenchmarkAggregate isolates the scaler's own CPU per cycle at 20 replicas x 5,000 apps: folding 20
// decoded deltas (500 changed apps each) and building the snapshot, without HTTP or JSON.
func BenchmarkAggregate(b *testing.B) {
	agg := NewAggregator(AggregatorOptions{Grace: 10 * time.Second})
	var reps []Replica
	for r := range benchReplicas {
		reps = append(reps, Replica{Key: fmt.Sprint(r)})
	}
	agg.SetReplicas(reps)
	now := time.Now()
	for r := range benchReplicas {
		c := admin.Counts{Epoch: "e", Full: true}
		for i := range benchApps {
			c.Apps = append(c.Apps, admin.AppCount{Key: benchApp(i), Requests: 1})
		}
		agg.Observe(fmt.Sprint(r), c, now)
	}
	agg.Build(now)
	rng := rand.New(rand.NewPCG(3, 3))
	deltas := make([]admin.Counts, 64*benchReplicas)
	for d := range deltas {
		c := admin.Counts{Epoch: "e"}
		for range benchApps / 10 {
			c.Apps = append(c.Apps, admin.AppCount{Key: benchApp(rng.IntN(benchApps)), InFlight: int64(rng.IntN(3)), Requests: uint64(2 + d)})
		}
		deltas[d] = c
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		now = now.Add(200 * time.Millisecond)
		for r := range benchReplicas {
			agg.Observe(fmt.Sprint(r), deltas[(i*benchReplicas+r)%len(deltas)], now)
		}
		agg.Build(now)
	}
}

// BenchmarkWakeLatency measures the time from a wake notice published on a replica (a real
// pkg/admin wake handler on loopback) to the StreamIsActive message at a real gRPC client, through
// the collector's wake stream, the State and the gRPC service.
func BenchmarkWakeLatency(b *testing.B) {
	ic := scalingtest.Start(scalingtest.Options{})
	defer ic.Close()
	state := NewState(30 * time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := NewCollector(CollectorOptions{
		Discovery: DiscoverFunc(func(context.Context) ([]Replica, error) { return []Replica{{Key: "a", URL: ic.URL()}}, nil }),
		Interval:  200 * time.Millisecond, Timeout: time.Second, StaleGrace: 10 * time.Second, Log: testLogB(b),
	}, state)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := NewServer(ServerOptions{Listener: lis, Log: testLogB(b)}, state)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { _ = c.Start(ctx) })
	wg.Go(func() { _ = srv.Start(ctx) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	stream, err := externalscaler.NewExternalScalerClient(conn).StreamIsActive(ctx,
		ref(trigger.Metadata{App: "ns/app", RequestRateTarget: 1}.Encode("s:1")))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the initial value
		b.Fatal(err)
	}
	for ic.WakeStreams() == 0 {
		time.Sleep(time.Millisecond)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		ic.Wake("ns/app")
		resp, err := stream.Recv()
		if err != nil || !resp.Result {
			b.Fatalf("Recv: %v %v", resp, err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatencies(b, lat)
}

// BenchmarkServiceGetMetrics is the handler alone (no gRPC): parse the trigger metadata, load the
// snapshot, compute the value, for 5,000 apps alternating concurrency and request rate.
func BenchmarkServiceGetMetrics(b *testing.B) {
	state := NewState(30 * time.Second)
	agg := NewAggregator(AggregatorOptions{Grace: 10 * time.Second})
	agg.SetReplicas([]Replica{{Key: "a"}})
	now := time.Now()
	c := admin.Counts{Epoch: "e", Full: true}
	for i := range benchApps {
		c.Apps = append(c.Apps, admin.AppCount{Key: benchApp(i), InFlight: 1, Requests: 1})
	}
	agg.Observe("a", c, now)
	for i := range 300 { // a minute of history at 200ms
		for j := range c.Apps {
			c.Apps[j].Requests += uint64(1 + i%3)
		}
		now = now.Add(200 * time.Millisecond)
		agg.Observe("a", c, now)
		state.Publish(agg.Build(now))
	}
	svc := NewService(state, nil, testLogB(b), nil)
	reqs := make([]*externalscaler.GetMetricsRequest, benchApps)
	for i := range reqs {
		name := trigger.MetricConcurrency
		if i%2 == 1 {
			name = trigger.MetricRequestRate
		}
		reqs[i] = &externalscaler.GetMetricsRequest{MetricName: name,
			ScaledObjectRef: ref(trigger.Metadata{App: benchApp(i), ConcurrencyTarget: 10, RequestRateTarget: 100}.Encode("s:1"))}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := svc.GetMetrics(context.Background(), reqs[i%benchApps]); err != nil {
			b.Fatal(err)
		}
	}
}
