// Command scaler is the KEDA external scaler: it sums interceptor counts per app and serves them to KEDA.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/component"
	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/scaling"
)

// Interceptor replicas: the admin Service's EndpointSlices in the install namespace, nothing else.
// +kubebuilder:rbac:groups=discovery.k8s.io,namespace=httpscale-system,resources=endpointslices,verbs=get;list;watch

func main() {
	if err := run(ctrl.SetupSignalHandler(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "scaler:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error { return runWithLogs(ctx, args, nil) }

// runWithLogs is run with the logs going to logs (nil: stderr).
func runWithLogs(ctx context.Context, args []string, logs io.Writer) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("building scheme: %w", err)
	}
	cfg := &config.Scaler{}
	var sel labels.Selector // parsed once, in Options (the config was validated before)
	return component.Run(ctx, component.Spec{
		Name: "scaler", Config: cfg, Scheme: scheme, LogWriter: logs,
		Options: func(o *manager.Options) {
			sel, _ = cfg.Selector()
			o.Cache.ByObject = scaling.CacheByObject(cfg.Namespace, sel)
		},
		Setup: func(mgr manager.Manager, log logr.Logger) error {
			var err error
			opts := scaling.Options{
				Namespace: cfg.Namespace, Selector: sel, PortName: cfg.InterceptorAdminPort,
				Interval: cfg.PollInterval, Timeout: cfg.PollTimeout, StaleGrace: cfg.StaleGrace, WakeHold: cfg.WakeHold,
				GRPCAddr: cfg.GRPCAddr, DrainDelay: cfg.DrainDelay, AdminTokenFile: cfg.InterceptorAdminTokenFile,
			}
			if cfg.TLSCertFile != "" {
				if opts.TLS, err = scaling.LoadTLS(cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSClientCAFile); err != nil {
					return err
				}
			}
			return scaling.SetupWithManager(mgr, opts, log)
		},
	}, args)
}
