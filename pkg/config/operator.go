package config

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"
)

// Operator configures the operator binary.
type Operator struct {
	Common
	// LeaderElect makes only one operator replica reconcile at a time.
	LeaderElect bool
	// Namespace is where the operator is installed and writes the routing table.
	Namespace string
	// WatchNamespaces limits the namespaces whose HTTPScaledObjects are reconciled; empty means all.
	WatchNamespaces []string
	// TableName is the routing table's head ConfigMap.
	TableName string
	// ScalerAddress is written into every ScaledObject's external-push trigger.
	ScalerAddress string
	InterceptorAdmin
	// ProbeInterval and ProbeTimeout pace the routing-propagation probes.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	// TableDebounce is the quiet time that ends a burst of changes before the routing table is written;
	// TableMaxDelay bounds how long a continuing burst may postpone the write.
	TableDebounce time.Duration
	TableMaxDelay time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// ClusterDomain is the cluster's DNS domain; Serve mode routes <svc>.<ns>.svc.<ClusterDomain>.
	ClusterDomain string
	// InterceptorProxyPort is the interceptors' proxy port on their pods, the target of Serve mode's
	// redirect slices.
	InterceptorProxyPort int
	// Webhook configures the validating admission webhook and its certificate.
	Webhook Webhook
	// Schedules configures scheduled scaling.
	Schedules Schedules
}

// Bind registers the operator's flags on fs, then takes their values from the environment (see EnvName).
func (o *Operator) Bind(fs *flag.FlagSet) {
	o.bind(fs, ":8081", ":8080")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "Elect one active operator replica.")
	fs.StringVar(&o.Namespace, "namespace", "httpscale-system", "Namespace the operator is installed in; the routing table is written here.")
	fs.Func("watch-namespaces", "Comma-separated namespaces whose HTTPScaledObjects are reconciled (default: all).", func(s string) error {
		o.WatchNamespaces = splitList(s)
		return nil
	})
	o.WatchNamespaces = splitList("")
	fs.StringVar(&o.TableName, "routing-table-name", "httpscale-routing-table", "Name of the routing table's head ConfigMap.")
	fs.StringVar(&o.ScalerAddress, "scaler-address", "httpscale-scaler.httpscale-system.svc.cluster.local:9090", "host:port of the scaler's gRPC service, written into ScaledObject triggers.")
	o.InterceptorAdmin.Bind(fs)
	fs.DurationVar(&o.ProbeInterval, "propagation-probe-interval", 2*time.Second, "How often interceptors are asked which routing table they serve.")
	fs.DurationVar(&o.ProbeTimeout, "propagation-probe-timeout", time.Second, "Timeout of one such question.")
	fs.DurationVar(&o.TableDebounce, "routing-table-debounce", 250*time.Millisecond, "Quiet time that ends a burst of changes before the routing table is written.")
	fs.DurationVar(&o.TableMaxDelay, "routing-table-max-delay", 2*time.Second, "Longest a continuing burst of changes may postpone a routing-table write.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", 4, "Parallel reconciles.")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", "cluster.local", "The cluster's DNS domain; Serve mode routes <service>.<namespace>.svc.<domain>.")
	fs.IntVar(&o.InterceptorProxyPort, "interceptor-proxy-port", 8080, "The interceptors' proxy port on their pods, where Serve mode redirects an app's Service while the app is at zero.")
	o.Webhook.Bind(fs)
	o.Schedules.Bind(fs)
	o.loadEnv(fs)
}

// Validate reports every invalid setting at once.
func (o *Operator) Validate() error {
	errs := []error{o.validate()}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if o.TableName == "" {
		errs = append(errs, errors.New("--routing-table-name must not be empty"))
	}
	if o.ScalerAddress == "" {
		errs = append(errs, errors.New("--scaler-address must not be empty"))
	}
	if _, err := o.Selector(); err != nil {
		errs = append(errs, err)
	}
	for name, d := range map[string]time.Duration{"propagation-probe-interval": o.ProbeInterval, "propagation-probe-timeout": o.ProbeTimeout, "routing-table-debounce": o.TableDebounce, "routing-table-max-delay": o.TableMaxDelay} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %s", name, d))
		}
	}
	if o.MaxConcurrentReconciles < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.MaxConcurrentReconciles))
	}
	if o.InterceptorProxyPort < 1 || o.InterceptorProxyPort > 65535 {
		errs = append(errs, fmt.Errorf("--interceptor-proxy-port must be a port number (1-65535), got %d", o.InterceptorProxyPort))
	}
	if strings.Contains(o.ClusterDomain, "/") || strings.HasPrefix(o.ClusterDomain, ".") || strings.HasSuffix(o.ClusterDomain, ".") {
		errs = append(errs, fmt.Errorf("--cluster-domain %q: want a DNS domain such as cluster.local, without leading or trailing dots", o.ClusterDomain))
	}
	errs = append(errs, o.Webhook.Validate(), o.Schedules.Validate())
	return errors.Join(errs...)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
