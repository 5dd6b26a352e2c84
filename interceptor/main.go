// Command interceptor is the HTTP proxy fleet: it routes requests to apps, holds them while an app
// scales from zero, and counts traffic per app for the scaler.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
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

// The routing table, ready endpoints of routed Services, and this replica's node (for its zone).
// +kubebuilder:rbac:groups="",namespace=httpscale-system,resources=configmaps,verbs=get;list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:], nil); err != nil {
		fmt.Fprintln(os.Stderr, "interceptor:", err)
		os.Exit(1)
	}
}

// run runs the interceptor until ctx ends; dial, when non-nil, replaces the upstream dialer (tests).
func run(ctx context.Context, args []string, dial dialFunc) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	cfg := &config.Interceptor{}
	return component.Run(ctx, component.Spec{
		Name:   "interceptor",
		Config: cfg,
		Scheme: scheme,
		Options: func(o *manager.Options) {
			// The drain runs inside the manager's shutdown; give it its whole budget.
			t := cfg.DrainDelay + cfg.DrainTimeout + 15*time.Second
			o.GracefulShutdownTimeout = &t
		},
		Setup: func(mgr manager.Manager, log logr.Logger) error {
			setGCPercent(cfg.GCPercent)
			// One registry per run, served on the admin port: the process's own metrics plus every
			// part's, and no global state shared between runs (tests start several in one process).
			metrics := prometheus.NewRegistry()
			metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			kube, err := wireKubernetes(mgr, cfg, metrics, log)
			if err != nil {
				return err
			}
			return setupServers(mgr, cfg, kube, metrics, dial, log)
		},
	}, args)
}

// setGCPercent sets the process's garbage-collector target from --gc-percent unless GOGC is set. It is
// process-wide, so run sets it once the flags are parsed and before any part allocates, not inside a
// part's setup.
func setGCPercent(percent int) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(percent)
	}
}
