// Command interceptor is the HTTP proxy fleet: it routes requests to apps, holds them while an app
// scales from zero, and counts traffic per app for the scaler.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/component"
	"github.com/httpscale/httpscale/pkg/config"
)

// The routing table, ready endpoints of routed Services, and this replica's node (for its zone). Pods
// are read one at a time by name, never listed or watched: a starting pod that an EndpointSlice of a
// routed Service names, for its readiness probe and its start times (pkg/coldstart).
// +kubebuilder:rbac:groups="",namespace=httpscale-system,resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:groups="",resources=pods,verbs=get

// The admin port's authentication (--admin-auth=token): who a caller's token belongs to, and whether a
// scraper outside the fleet may get /metrics.
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], runOptions{}); err != nil {
		fmt.Fprintln(os.Stderr, "interceptor:", err)
		os.Exit(1)
	}
}

// runOptions are what tests change in a run.
type runOptions struct {
	// dial, when non-nil, replaces the upstream dialer.
	dial dialFunc
	// logs, when non-nil, receives the logs instead of stderr.
	logs io.Writer
}

// run runs the interceptor until ctx ends: against Kubernetes, or with --standalone from a file.
func run(ctx context.Context, args []string, o runOptions) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	cfg := &config.Interceptor{}
	return component.Run(ctx, component.Spec{
		Name:      "interceptor",
		Config:    cfg,
		Scheme:    scheme,
		LogWriter: o.logs,
		WithoutKubernetes: func() func(context.Context, logr.Logger) error {
			if cfg.Standalone == "" {
				return nil
			}
			return func(ctx context.Context, log logr.Logger) error { return runStandalone(ctx, cfg, o.dial, log) }
		},
		Options: func(o *manager.Options) {
			// The drain runs inside the manager's shutdown; give it its whole budget.
			t := cfg.DrainDelay + cfg.DrainTimeout + 15*time.Second
			o.GracefulShutdownTimeout = &t
			o.PprofBindAddress = cfg.PprofAddr // off unless asked for (memory measurements)
		},
		Setup: func(mgr manager.Manager, log logr.Logger) error {
			if limit := setMemoryLimit(cfg); limit > 0 {
				log.Info("Go memory limit", "bytes", limit)
			}
			if gc := gcTuner(cfg); gc != nil {
				if err := mgr.Add(gc); err != nil {
					return fmt.Errorf("adding the GC tuner: %w", err)
				}
			}
			metrics := newMetricsRegistry()
			kube, err := wireKubernetes(mgr, cfg, metrics, log)
			if err != nil {
				return err
			}
			return setupServers(mgr, cfg, kube, metrics, o.dial, log)
		},
	}, args)
}

// newMetricsRegistry returns the registry served on the admin port: the process's own metrics plus
// every part's. One per run, so that no global state is shared between runs (tests start several in
// one process).
func newMetricsRegistry() *prometheus.Registry {
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return metrics
}
