package scaling

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
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
	// ShutdownTimeout bounds the graceful stop; zero means 5s.
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
	opts   ServerOptions
	grpc   *grpc.Server
	health *health.Server
	stop   chan struct{}
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
		// Ping idle connections so that a StreamIsActive stream to a vanished KEDA pod ends.
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	)
	s := &Server{opts: opts, grpc: grpc.NewServer(gopts...), health: health.NewServer(), stop: make(chan struct{})}
	svc := NewService(state, opts.Clock, opts.Log, s.stop)
	svc.fleetNamespace = opts.FleetNamespace
	externalscaler.RegisterExternalScalerServer(s.grpc, svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	return s
}

// NeedLeaderElection is false: every scaler replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then ends the activity streams, marks health NOT_SERVING and stops
// gracefully within ShutdownTimeout.
func (s *Server) Start(ctx context.Context) error {
	lis := s.opts.Listener
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", s.opts.Addr); err != nil {
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
		return fmt.Errorf("serving gRPC: %w", err)
	case <-ctx.Done():
	}
	s.health.Shutdown()
	close(s.stop)
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.opts.ShutdownTimeout):
		s.grpc.Stop()
		<-done
	}
	return nil
}
