// Package config holds one typed configuration struct per httpscale binary: defaults, then environment
// variables (HTTPSCALE_*), then command-line flags, then Validate.
package config

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"

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
	// KubeAPIQPS and KubeAPIBurst are the client-side rate limit of every API server request, applied
	// whatever the config source (in-cluster, kubeconfig, $KUBECONFIG, ~/.kube/config). A QPS of -1
	// turns the limit off and leaves fairness to the API server's API Priority and Fairness.
	KubeAPIQPS   float64
	KubeAPIBurst int

	// envErr holds the environment variables that did not parse (see loadEnv).
	envErr error
}

// Defaults of the API client's rate limit: no client-side limit, as controller-runtime sets for
// in-cluster config. client-go's own defaults (5 requests/s, burst 10) would make a burst of 100
// HTTPScaledObjects take at least 38 s to route (each needs two writes to its object).
const (
	DefaultKubeAPIQPS   = -1
	DefaultKubeAPIBurst = 100
)

func (c *Common) bind(fs *flag.FlagSet, probeAddr, metricsAddr string) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig file (default: in-cluster, then $KUBECONFIG, then ~/.kube/config).")
	fs.StringVar(&c.ProbeAddr, "health-probe-bind-address", probeAddr, "Address serving /healthz and /readyz.")
	fs.StringVar(&c.MetricsAddr, "metrics-bind-address", metricsAddr, `Address serving Prometheus /metrics; "0" disables it.`)
	fs.Float64Var(&c.KubeAPIQPS, "kube-api-qps", DefaultKubeAPIQPS, "Requests per second to the API server; -1 means no client-side limit (API Priority and Fairness still applies).")
	fs.IntVar(&c.KubeAPIBurst, "kube-api-burst", DefaultKubeAPIBurst, "Requests to the API server allowed at once above --kube-api-qps (ignored when it is -1).")
}

// loadEnv sets every flag bound on fs from its environment variable; a binary's Bind calls it last.
// Validate reports the variables that did not parse.
func (c *Common) loadEnv(fs *flag.FlagSet) { c.envErr = loadEnv(fs) }

func (c *Common) validate() error {
	errs := []error{c.envErr}
	if q := c.KubeAPIQPS; q != -1 && (q <= 0 || math.IsNaN(q) || math.IsInf(q, 0)) {
		errs = append(errs, fmt.Errorf("--kube-api-qps %v: want a positive number of requests per second, or -1 for no client-side limit (0 would silently mean client-go's 5/s)", q))
	}
	if c.KubeAPIBurst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst %d: want at least 1", c.KubeAPIBurst))
	}
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

// RESTConfig loads the API server connection settings and applies the client rate limit
// (--kube-api-qps, --kube-api-burst) whichever source they came from.
func (c *Common) RESTConfig() (*rest.Config, error) {
	cfg, err := c.load()
	if err != nil {
		return nil, err
	}
	cfg.QPS = float32(c.KubeAPIQPS)
	cfg.Burst = c.KubeAPIBurst
	return cfg, nil
}

func (c *Common) load() (*rest.Config, error) {
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

// Base returns the settings every binary shares.
func (c *Common) Base() *Common { return c }

// InterceptorAdmin is how the operator and the scaler find every interceptor replica's admin port.
type InterceptorAdmin struct {
	// InterceptorSelector selects the interceptor admin Service's EndpointSlices in the install
	// namespace.
	InterceptorSelector string
	// InterceptorAdminPort names the admin port in those EndpointSlices; empty takes the first port.
	InterceptorAdminPort string
	// InterceptorAdminTokenFile is a projected ServiceAccount token bound to the admin port's
	// audience, sent with every call to it (the interceptors' --admin-auth=token); "" sends none.
	InterceptorAdminTokenFile string
}

// Bind registers the flags on fs.
func (a *InterceptorAdmin) Bind(fs *flag.FlagSet) {
	fs.StringVar(&a.InterceptorSelector, "interceptor-admin-selector", "kubernetes.io/service-name=httpscale-interceptor-admin", "Label selector of the interceptor admin Service's EndpointSlices.")
	fs.StringVar(&a.InterceptorAdminPort, "interceptor-admin-port-name", "admin", "Name of the admin port in those EndpointSlices; empty takes the first port.")
	fs.StringVar(&a.InterceptorAdminTokenFile, "interceptor-admin-token-file", "", "Projected ServiceAccount token (bound to the interceptors' --admin-token-audience) sent to their admin port; empty sends none.")
}

// Selector parses InterceptorSelector.
func (a *InterceptorAdmin) Selector() (labels.Selector, error) {
	sel, err := labels.Parse(a.InterceptorSelector)
	if err != nil {
		return nil, fmt.Errorf("--interceptor-admin-selector %q: %w", a.InterceptorSelector, err)
	}
	return sel, nil
}
