package scaling

import (
	"context"
	"math"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// Service is KEDA's ExternalScaler over a State. Every call reads the current Snapshot and returns;
// nothing waits on an interceptor. It is safe for concurrent use.
type Service struct {
	externalscaler.UnimplementedExternalScalerServer

	state *State
	clock clock.PassiveClock
	log   logr.Logger
	stop  <-chan struct{}
	// fleetNamespace, when set, is the only namespace whose ScaledObjects may read the fleet metric
	// (the interceptors' own ScaledObject lives in the install namespace).
	fleetNamespace string
}

// NewService returns a Service reading state. Closing stop ends every StreamIsActive stream, which
// a graceful gRPC stop would otherwise wait for forever.
func NewService(state *State, clk clock.PassiveClock, log logr.Logger, stop <-chan struct{}) *Service {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Service{state: state, clock: clk, log: log, stop: stop}
}

// metadata parses the trigger metadata and remembers the app's rate window, so that history is kept
// long enough and activity is judged over the same window.
func (s *Service) metadata(ref *externalscaler.ScaledObjectRef) (trigger.Metadata, error) {
	if ref == nil {
		return trigger.Metadata{}, status.Error(codes.InvalidArgument, "missing scaledObjectRef")
	}
	md, err := trigger.Parse(ref.GetScalerMetadata())
	if err != nil {
		return trigger.Metadata{}, status.Errorf(codes.InvalidArgument, "ScaledObject %s/%s: %v", ref.GetNamespace(), ref.GetName(), err)
	}
	if !md.Fleet {
		// Only keys Kubernetes could name: the window is remembered per app, and a client sending
		// megabyte-long keys must not make the scaler keep them.
		if err := admin.CheckAppKey(md.App); err != nil {
			return trigger.Metadata{}, status.Errorf(codes.InvalidArgument, "ScaledObject %s/%s: %v", ref.GetNamespace(), ref.GetName(), err)
		}
		// KEDA asks on behalf of any ScaledObject, with the same client certificate: one in a
		// tenant's namespace naming another namespace's app would read that app's traffic.
		if ns, _, _ := strings.Cut(md.App, "/"); ns != ref.GetNamespace() {
			return trigger.Metadata{}, status.Errorf(codes.PermissionDenied, "ScaledObject %s/%s: %s names an app of namespace %q; a ScaledObject may only scale on apps of its own namespace",
				clip(ref.GetNamespace()), clip(ref.GetName()), trigger.KeyHTTPScaledObject, ns)
		}
		s.state.SetWindow(md.App, md.Window, md.Granularity)
	} else if s.fleetNamespace != "" && ref.GetNamespace() != s.fleetNamespace {
		return trigger.Metadata{}, status.Errorf(codes.PermissionDenied, "ScaledObject %s/%s: the interceptor fleet's metric is for ScaledObjects of namespace %q only",
			clip(ref.GetNamespace()), clip(ref.GetName()), s.fleetNamespace)
	}
	return md, nil
}

// clip shortens a name quoted in an error (it comes from the caller).
func clip(v string) string {
	if len(v) <= 253 {
		return v
	}
	return v[:253] + "..."
}

// active is the answer to IsActive for md: the app's activity in the current snapshot (concurrency
// above zero, a request within the active hold, a wake) or a wake notice that came after it.
func (s *Service) active(md trigger.Metadata) bool {
	snap := s.state.Snapshot()
	if md.Fleet {
		return snap.FleetConcurrency > 0
	}
	return snap.active(md.App) || s.state.Woken(md.App, s.clock.Now())
}

// ReadyWait bounds how long a call that needs the traffic counts waits for the first snapshot of a
// replica that has just started; then it fails with Unavailable.
const ReadyWait = 10 * time.Second

// ready waits until the first snapshot was published. A replica that has just (re)started answers
// nothing from an empty view: zero concurrency would let the HPA scale an app down, and "inactive"
// would hide held requests. It takes one poll cycle (200 ms by default).
func (s *Service) ready(ctx context.Context) error {
	select {
	case <-s.state.Ready():
		return nil
	default:
	}
	t := time.NewTimer(ReadyWait)
	defer t.Stop()
	select {
	case <-s.state.Ready():
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-s.stop:
		return status.Error(codes.Unavailable, "the scaler is shutting down")
	case <-t.C:
		return status.Error(codes.Unavailable, "no interceptor counts collected yet")
	}
}

// woken reports whether a wake notice for md's app is recent: "active" is then the answer whatever
// the snapshot says, so it needs none.
func (s *Service) woken(md trigger.Metadata) bool {
	return !md.Fleet && s.state.Woken(md.App, s.clock.Now())
}

// IsActive reports whether the app should run at least one replica.
func (s *Service) IsActive(ctx context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.IsActiveResponse, error) {
	md, err := s.metadata(ref)
	if err != nil {
		return nil, err
	}
	if !s.woken(md) {
		if err := s.ready(ctx); err != nil {
			return nil, err
		}
	}
	return &externalscaler.IsActiveResponse{Result: s.active(md)}, nil
}

// StreamIsActive sends the current activity at once, then true the moment a wake notice for the
// app arrives, and the new value whenever the activity changes; when activity ends it sends true
// once more, then false, so that KEDA's cooldown starts when the app went idle. It ends when the
// client goes away or the server stops.
func (s *Service) StreamIsActive(ref *externalscaler.ScaledObjectRef, stream externalscaler.ExternalScaler_StreamIsActiveServer) error {
	md, err := s.metadata(ref)
	if err != nil {
		return err
	}
	if !s.woken(md) {
		if err := s.ready(stream.Context()); err != nil {
			return err
		}
	}
	sub := s.state.Subscribe(md.App) // the empty app is the fleet
	defer sub.Close()
	last := s.active(md)
	if err := stream.Send(&externalscaler.IsActiveResponse{Result: last}); err != nil {
		return err
	}
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.stop:
			return nil
		case <-sub.C():
		}
		woke := sub.Woke()
		now := s.active(md) || woke
		if now == last && !woke {
			continue
		}
		// KEDA ignores inactivation pushes: it scales to zero at its next polling tick after the last
		// time it heard "active" plus the cooldown (scaledownPeriod). Without a last "active" at the
		// moment activity ends, that moment would be KEDA's previous poll, up to a pollingInterval
		// before the last request ended, and the app would leave early.
		sends := []bool{now}
		if last && !now {
			sends = []bool{true, false}
		}
		for _, v := range sends {
			if err := stream.Send(&externalscaler.IsActiveResponse{Result: v}); err != nil {
				return err
			}
		}
		last = now
	}
}

// GetMetricSpec returns one metric per target the trigger sets, each with its target value.
func (s *Service) GetMetricSpec(_ context.Context, ref *externalscaler.ScaledObjectRef) (*externalscaler.GetMetricSpecResponse, error) {
	md, err := s.metadata(ref)
	if err != nil {
		return nil, err
	}
	var specs []*externalscaler.MetricSpec
	add := func(name string, target float64) {
		specs = append(specs, &externalscaler.MetricSpec{
			MetricName: name, TargetSizeFloat: target, TargetSize: max(1, int64(math.Round(target))),
		})
	}
	switch {
	case md.Fleet:
		add(trigger.MetricFleet, md.ConcurrencyTarget)
	default:
		if md.ConcurrencyTarget > 0 {
			add(trigger.MetricConcurrency, md.ConcurrencyTarget)
		}
		if md.RequestRateTarget > 0 {
			add(trigger.MetricRequestRate, md.RequestRateTarget)
		}
	}
	return &externalscaler.GetMetricSpecResponse{MetricSpecs: specs}, nil
}

// GetMetrics answers the one metric asked for. A metric the trigger does not configure is
// InvalidArgument, as KEDA should never ask for it.
func (s *Service) GetMetrics(ctx context.Context, req *externalscaler.GetMetricsRequest) (*externalscaler.GetMetricsResponse, error) {
	md, err := s.metadata(req.GetScaledObjectRef())
	if err != nil {
		return nil, err
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	snap := s.state.Snapshot()
	var v float64
	switch name := req.GetMetricName(); {
	case md.Fleet && name == trigger.MetricFleet:
		v = float64(snap.FleetConcurrency)
	case !md.Fleet && name == trigger.MetricConcurrency && md.ConcurrencyTarget > 0:
		v = float64(snap.Concurrency(md.App))
	case !md.Fleet && name == trigger.MetricRequestRate && md.RequestRateTarget > 0:
		v = snap.Rate(md.App, md.Window, md.Granularity)
	default:
		return nil, status.Errorf(codes.InvalidArgument, "metric %q is not configured by the trigger of ScaledObject %s/%s",
			name, req.GetScaledObjectRef().GetNamespace(), req.GetScaledObjectRef().GetName())
	}
	return &externalscaler.GetMetricsResponse{MetricValues: []*externalscaler.MetricValue{{
		MetricName:       req.GetMetricName(),
		MetricValue:      int64(math.Ceil(v)), // for KEDA versions that read only the integer
		MetricValueFloat: v,
	}}}, nil
}
