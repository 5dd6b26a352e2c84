// Package component starts an httpscale binary: it parses flags into the binary's config, sets up
// logging, builds the controller-runtime manager every long-running part is added to, and runs it
// until the context ends (SIGTERM in production).
package component

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sync"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/httpscale/httpscale/pkg/config"
)

// Config is a binary's typed configuration.
type Config interface {
	Bind(fs *flag.FlagSet)
	Validate() error
	Base() *config.Common
}

// Spec describes one binary.
type Spec struct {
	// Name names the binary in logs and flag errors.
	Name string
	// Config receives the parsed flags.
	Config Config
	// Scheme holds every kind the binary reads or writes.
	Scheme *runtime.Scheme
	// Options adjusts manager options (leader election, cache scope) after the common ones are set.
	Options func(*manager.Options)
	// Setup adds the binary's controllers and Runnables to the manager.
	Setup func(mgr manager.Manager, log logr.Logger) error
	// WithoutKubernetes, when set and returning a function once the flags are parsed and valid, runs
	// the binary with that function instead of a manager: no API server configuration is loaded.
	WithoutKubernetes func() func(ctx context.Context, log logr.Logger) error
	// LogWriter receives the logs; nil means stderr.
	LogWriter io.Writer
}

// Run parses args, builds the manager and blocks until ctx ends and the manager has stopped. It returns
// nil on a clean shutdown.
func Run(ctx context.Context, spec Spec, args []string) error {
	fs := flag.NewFlagSet(spec.Name, flag.ContinueOnError)
	spec.Config.Bind(fs)
	zapOpts := zap.Options{DestWriter: spec.LogWriter}
	zapOpts.BindFlags(fs)
	printedVersion := bindVersion(fs, spec.Name)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("parsing flags: %w", err)
	}
	if printedVersion() {
		return nil
	}
	if err := spec.Config.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	log := shutdownLogger(ctx, zap.New(zap.UseFlagOptions(&zapOpts))).WithName(spec.Name)
	ctrl.SetLogger(log)
	// client-go logs through klog (leader election among others): the same format, level and
	// shutdown rule as everything else, instead of klog's own lines on stderr. klog's logger is a
	// process global that client-go's goroutines read without a lock, so it is set once: a binary
	// runs once per process, and tests that call Run again (with informers of an earlier run still
	// winding down) must not write it under them.
	klogOnce.Do(func() { klog.SetLogger(log.WithName("client-go")) })

	if spec.WithoutKubernetes != nil {
		if run := spec.WithoutKubernetes(); run != nil {
			return run(ctx, log)
		}
	}
	common := spec.Config.Base()
	restCfg, err := common.RESTConfig()
	if err != nil {
		return err
	}
	opts := manager.Options{
		Scheme:                 spec.Scheme,
		Logger:                 log,
		HealthProbeBindAddress: common.ProbeAddr,
		Metrics:                metricsserver.Options{BindAddress: common.MetricsAddr},
	}
	if spec.Options != nil {
		spec.Options(&opts)
	}
	mgr, err := ctrl.NewManager(restCfg, opts)
	if err != nil {
		return fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	if spec.Setup != nil {
		if err := spec.Setup(mgr, log); err != nil {
			return fmt.Errorf("setting up %s: %w", spec.Name, err)
		}
	}
	log.Info("starting", "probeAddr", common.ProbeAddr, "metricsAddr", common.MetricsAddr)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("running manager: %w", err)
	}
	log.Info("stopped cleanly")
	return nil
}

// klogOnce guards klog.SetLogger in Run.
var klogOnce sync.Once
