package scaling

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/admin"
)

// Options wire the scaler's parts into a manager.
type Options struct {
	// Namespace, Selector and PortName locate the interceptor admin Service's EndpointSlices.
	Namespace string
	Selector  labels.Selector
	PortName  string
	// Interval, Timeout, StaleGrace and WakeHold: see CollectorOptions and NewState.
	Interval, Timeout, StaleGrace, WakeHold time.Duration
	// GRPCAddr, TLS and DrainDelay: see ServerOptions.
	GRPCAddr   string
	TLS        *tls.Config
	DrainDelay time.Duration
	// AdminTokenFile, when set, is a projected ServiceAccount token sent to every interceptor's
	// admin port (see admin.TokenTransport).
	AdminTokenFile string
}

// SetupWithManager adds the Collector and the gRPC Server to mgr, plus readiness checks that pass
// once the first snapshot is published and until the server starts draining. The manager's cache must hold EndpointSlices of
// opts.Namespace (the scaler only needs get/list/watch on them there).
func SetupWithManager(mgr manager.Manager, opts Options, log logr.Logger) error {
	state := NewState(opts.WakeHold)
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: opts.Timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // loopback-fast JSON inside the cluster; gzip would cost more CPU than it saves
	}
	var rt http.RoundTripper = transport
	if opts.AdminTokenFile != "" {
		var err error
		if rt, err = admin.TokenTransport(opts.AdminTokenFile, transport); err != nil {
			return err
		}
	}
	collector := NewCollector(CollectorOptions{
		Discovery: &EndpointSliceDiscovery{
			Reader: mgr.GetCache(), Namespace: opts.Namespace, Selector: opts.Selector, PortName: opts.PortName,
		},
		Counts:     admin.Client{HTTP: &http.Client{Transport: rt}},
		Wake:       admin.Client{HTTP: &http.Client{Transport: rt}},
		Interval:   opts.Interval,
		Timeout:    opts.Timeout,
		StaleGrace: opts.StaleGrace,
		Log:        log.WithName("scaling.collector"),
	}, state)
	server := NewServer(ServerOptions{Addr: opts.GRPCAddr, TLS: opts.TLS, DrainDelay: opts.DrainDelay, FleetNamespace: opts.Namespace, Log: log.WithName("scaling.grpc")}, state)
	if err := mgr.Add(server); err != nil {
		return fmt.Errorf("adding gRPC server: %w", err)
	}
	// The collector goes on through the server's drain: wake notices must reach the streams KEDA still
	// holds until they end.
	if err := mgr.Add(untilStopped{Runnable: collector, stopped: server.Stopped(), limit: opts.DrainDelay + 10*time.Second}); err != nil {
		return fmt.Errorf("adding collector: %w", err)
	}
	if err := mgr.AddReadyzCheck("counts", func(*http.Request) error {
		select {
		case <-state.Ready():
			return nil
		default:
			return errors.New("no interceptor counts collected yet")
		}
	}); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("serving", func(*http.Request) error {
		if server.Draining() {
			return errors.New("shutting down")
		}
		return nil
	}); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	return nil
}

// untilStopped runs a Runnable past the manager's stop until stopped is closed (at most limit
// longer).
type untilStopped struct {
	manager.Runnable
	stopped <-chan struct{}
	limit   time.Duration
}

// NeedLeaderElection keeps it among the runnables stopped with the server.
func (untilStopped) NeedLeaderElection() bool { return false }

// Start runs the wrapped Runnable with a context that ends once ctx has ended and the server stopped.
func (u untilStopped) Start(ctx context.Context) error {
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		<-ctx.Done()
		t := time.NewTimer(u.limit)
		defer t.Stop()
		select {
		case <-u.stopped:
		case <-t.C:
		case <-inner.Done():
		}
		cancel()
	}()
	return u.Runnable.Start(inner)
}
