// Package config holds one typed configuration struct per httpscale binary: defaults, then environment
// variables (HTTPSCALE_*), then command-line flags, then Validate.
package config

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
)

// Common settings every binary has: how to reach the API server and where to serve probes and metrics.
type Common struct {
	// Kubeconfig is a kubeconfig file path; empty means in-cluster config, then $KUBECONFIG, then
	// ~/.kube/config.
	Kubeconfig string
	// ProbeAddr serves /healthz and /readyz.
	ProbeAddr string
	// MetricsAddr serves Prometheus metrics; "0" disables it.
	MetricsAddr string
}

func (c *Common) bind(fs *flag.FlagSet, probeAddr, metricsAddr string) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", env("KUBECONFIG", ""), "Path to a kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", env("HTTPSCALE_HEALTH_PROBE_BIND_ADDRESS", probeAddr), "Address serving /healthz and /readyz.")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", env("HTTPSCALE_METRICS_BIND_ADDRESS", metricsAddr), `Address serving Prometheus /metrics; "0" disables it.`)
}

func (c *Common) validate() error {
	var errs []error
	if err := validateAddr("health-probe-bind-address", c.ProbeAddr); err != nil {
		errs = append(errs, err)
	}
	if c.MetricsAddr != "0" {
		if err := validateAddr("metrics-bind-address", c.MetricsAddr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RESTConfig loads the API server connection settings.
func (c *Common) RESTConfig() (*rest.Config, error) {
	if c.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("loading kubeconfig %s: %w", c.Kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := ctrlconfig.GetConfig()
	if err != nil {
		return nil, fmt.Errorf("loading API server config: %w", err)
	}
	return cfg, nil
}

func validateAddr(name, addr string) error {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--%s %q: want host:port: %w", name, addr, err)
	}
	return nil
}

// env returns the environment variable's value, or def when it is unset or empty.
func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func envBool(name string, def bool) bool {
	if b, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return b
	}
	return def
}

// Base returns the settings every binary shares.
func (c *Common) Base() *Common { return c }

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return d
	}
	return def
}

// InterceptorAdmin is how the operator and the scaler find every interceptor replica's admin port.
type InterceptorAdmin struct {
	// InterceptorSelector selects the interceptor admin Service's EndpointSlices in the install
	// namespace.
	InterceptorSelector string
	// InterceptorAdminPort names the admin port in those EndpointSlices; empty takes the first port.
	InterceptorAdminPort string
}

// Bind registers the two flags on fs.
func (a *InterceptorAdmin) Bind(fs *flag.FlagSet) {
	fs.StringVar(&a.InterceptorSelector, "interceptor-admin-selector", env("HTTPSCALE_INTERCEPTOR_ADMIN_SELECTOR", "kubernetes.io/service-name=httpscale-interceptor-admin"), "Label selector of the interceptor admin Service's EndpointSlices.")
	fs.StringVar(&a.InterceptorAdminPort, "interceptor-admin-port-name", env("HTTPSCALE_INTERCEPTOR_ADMIN_PORT_NAME", "admin"), "Name of the admin port in those EndpointSlices; empty takes the first port.")
}

// Selector parses InterceptorSelector.
func (a *InterceptorAdmin) Selector() (labels.Selector, error) {
	sel, err := labels.Parse(a.InterceptorSelector)
	if err != nil {
		return nil, fmt.Errorf("--interceptor-admin-selector %q: %w", a.InterceptorSelector, err)
	}
	return sel, nil
}
