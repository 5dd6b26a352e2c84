package scaling

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"k8s.io/utils/clock"
)

// ServerOptions configure the gRPC server.
type ServerOptions struct {
	// Addr is the listen address, e.g. ":9090". Ignored when Listener is set.
	Addr string
	// Listener, when set, is served instead of listening on Addr (tests pass 127.0.0.1:0).
	Listener net.Listener
	// TLS, when set, serves TLS (KEDA's enableTLS); see LoadTLS.
	TLS *tls.Config
	// Clock is the time source for wake recency; nil means the real clock.
	Clock clock.PassiveClock
	// DrainDelay is how long the server goes on serving after its context ended, with its readiness
	// failing and the gRPC health service NOT_SERVING, before it ends its streams and closes its
	// connections (GOAWAY): long enough for kube-proxy to stop sending new connections here, so the
	// client's next connection reaches a live replica. Wake notices still reach the streams meanwhile.
	DrainDelay time.Duration
	// ShutdownTimeout bounds the graceful stop after the drain delay; zero means 5s.
	ShutdownTimeout time.Duration
	// Log receives server errors.
	Log logr.Logger
	// FleetNamespace, when set, is the only namespace whose ScaledObjects may read the interceptor
	// fleet's metric (the install namespace).
	FleetNamespace string
}

// Server serves the ExternalScaler Service and the standard gRPC health service. It is a
// controller-runtime Runnable that runs on every scaler replica.
type Server struct {
	opts     ServerOptions
	grpc     *grpc.Server
	health   *health.Server
	stop     chan struct{}
	draining atomic.Bool
	stopped  chan struct{}
}

// NewServer returns a Server answering from state.
func NewServer(opts ServerOptions, state *State) *Server {
	if opts.ShutdownTimeout <= 0 {
		opts.ShutdownTimeout = 5 * time.Second
	}
	var gopts []grpc.ServerOption
	if opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	// KEDA keeps one connection per scaler address and may ping it; allow that without GOAWAY.
	gopts = append(gopts,
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Ping idle connections so that the StreamIsActive streams of a KEDA pod that vanished without
		// closing its connection (its node lost) end within 15 s instead of lingering for the kernel's
		// TCP timeouts.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 10 * time.Second, Timeout: 5 * time.Second}),
	)
	s := &Server{opts: opts, grpc: grpc.NewServer(gopts...), health: health.NewServer(), stop: make(chan struct{}), stopped: make(chan struct{})}
	svc := NewService(state, opts.Clock, opts.Log, s.stop)
	svc.fleetNamespace = opts.FleetNamespace
	externalscaler.RegisterExternalScalerServer(s.grpc, svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return s
}

// NeedLeaderElection is false: every scaler replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Draining reports whether the server's context has ended: it is draining or stopped. The scaler's
// readiness check fails from then on.
func (s *Server) Draining() bool { return s.draining.Load() }

// Stopped is closed once Start has returned.
func (s *Server) Stopped() <-chan struct{} { return s.stopped }

// Start serves until ctx ends, then drains: health NOT_SERVING and Draining true at once, everything
// served as before for DrainDelay, then the activity streams end (KEDA sees a clean end of stream
// and opens a new one, on a new connection since GOAWAY was sent, after its fixed 2 s retry) and the
// server stops gracefully within ShutdownTimeout.
func (s *Server) Start(ctx context.Context) error {
	defer close(s.stopped)
	lis := s.opts.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", s.opts.Addr); err != nil {
			s.draining.Store(true)
			return fmt.Errorf("listening for gRPC on %s: %w", s.opts.Addr, err)
		}
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(externalscaler.ExternalScaler_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(lis) }()
	s.opts.Log.Info("serving KEDA external scaler", "address", lis.Addr().String(), "tls", s.opts.TLS != nil)
	select {
	case err := <-errc:
		s.draining.Store(true)
		return fmt.Errorf("serving gRPC: %w", err)
	case <-ctx.Done():
	}
	s.draining.Store(true)
	s.health.Shutdown()
	if s.opts.DrainDelay > 0 {
		s.opts.Log.Info("draining: readiness fails, serving on until the drain delay has passed", "delay", s.opts.DrainDelay.String())
		time.Sleep(s.opts.DrainDelay)
	}
	done := make(chan struct{})
	// GOAWAY first (GracefulStop sends it to every connection before it waits), so that the streams
	// ended next are opened again on a new connection, which kube-proxy sends to a ready replica.
	go func() { s.grpc.GracefulStop(); close(done) }()
	close(s.stop)
	select {
	case <-done:
	case <-time.After(s.opts.ShutdownTimeout):
		s.grpc.Stop()
		<-done
	}
	s.opts.Log.Info("stopped serving KEDA")
	return nil
}
