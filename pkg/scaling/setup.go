package scaling

import (
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
	// GRPCAddr and TLS: see ServerOptions.
	GRPCAddr string
	TLS      *tls.Config
	// AdminTokenFile, when set, is a projected ServiceAccount token sent to every interceptor's
	// admin port (see admin.TokenTransport).
	AdminTokenFile string
}

// SetupWithManager adds the Collector and the gRPC Server to mgr, plus a readiness check that passes
// once the first snapshot is published. The manager's cache must hold EndpointSlices of
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
	if err := mgr.Add(collector); err != nil {
		return fmt.Errorf("adding collector: %w", err)
	}
	server := NewServer(ServerOptions{Addr: opts.GRPCAddr, TLS: opts.TLS, FleetNamespace: opts.Namespace, Log: log.WithName("scaling.grpc")}, state)
	if err := mgr.Add(server); err != nil {
		return fmt.Errorf("adding gRPC server: %w", err)
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
	return nil
}
