package config

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
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
	// Fleet is the fleet this operator serves: the HTTPScaledObjects whose spec.fleet names it (empty
	// spec.fleet is "default").
	Fleet string
	// WatchNamespaces limits the namespaces whose HTTPScaledObjects are reconciled; empty means all.
	WatchNamespaces []string
	// TableName is the routing table's head ConfigMap.
	TableName string
	// ScalerAddress is written into every ScaledObject's external-push trigger.
	ScalerAddress string
	// ScalerTLSAuthentication names the KEDA ClusterTriggerAuthentication holding the CA and the
	// client certificate KEDA uses to reach the scaler over mutual TLS; "" leaves the trigger in
	// plain text.
	ScalerTLSAuthentication string
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
	// InterceptorServiceAccount is the interceptor's ServiceAccount in Namespace; the operator lets it
	// read exactly the Secrets HTTPScaledObjects name in spec.tls. Empty grants nothing.
	InterceptorServiceAccount string
	// Webhook configures the validating admission webhook and its certificate.
	Webhook Webhook
	// Schedules configures scheduled scaling.
	Schedules Schedules
	// PprofAddr serves net/http/pprof (CPU and heap profiles of a large installation); "" or "0"
	// disables it.
	PprofAddr string
}

// Bind registers the operator's flags on fs, then takes their values from the environment (see EnvName).
func (o *Operator) Bind(fs *flag.FlagSet) {
	o.bind(fs, ":8081", ":8080")
	fs.BoolVar(&o.LeaderElect, "leader-elect", true, "Elect one active operator replica.")
	fs.StringVar(&o.Namespace, "namespace", "httpscale-system", "Namespace the operator is installed in; the routing table is written here.")
	fs.StringVar(&o.Fleet, "fleet", "default", "Fleet this operator serves: the HTTPScaledObjects whose spec.fleet names it (an empty spec.fleet is \"default\").")
	fs.Func("watch-namespaces", "Comma-separated namespaces whose HTTPScaledObjects are reconciled (default: all).", func(s string) error {
		o.WatchNamespaces = splitList(s)
		return nil
	})
	o.WatchNamespaces = splitList("")
	fs.StringVar(&o.TableName, "routing-table-name", "httpscale-routing-table", "Name of the routing table's head ConfigMap.")
	fs.StringVar(&o.ScalerTLSAuthentication, "scaler-tls-authentication", "", "KEDA ClusterTriggerAuthentication with the CA and client certificate for the scaler's mutual TLS (caCert, tlsClientCert, tlsClientKey); every generated ScaledObject's trigger uses it with enableTLS. Empty: plain text.")
	fs.StringVar(&o.ScalerAddress, "scaler-address", "httpscale-scaler.httpscale-system.svc.cluster.local:9090", "host:port of the scaler's gRPC service, written into ScaledObject triggers.")
	o.InterceptorAdmin.Bind(fs)
	fs.DurationVar(&o.ProbeInterval, "propagation-probe-interval", 2*time.Second, "How often interceptors are asked which routing table they serve.")
	fs.DurationVar(&o.ProbeTimeout, "propagation-probe-timeout", time.Second, "Timeout of one such question.")
	fs.DurationVar(&o.TableDebounce, "routing-table-debounce", 250*time.Millisecond, "Quiet time that ends a burst of changes before the routing table is written.")
	fs.DurationVar(&o.TableMaxDelay, "routing-table-max-delay", 2*time.Second, "Longest a continuing burst of changes may postpone a routing-table write.")
	fs.IntVar(&o.MaxConcurrentReconciles, "max-concurrent-reconciles", 4, "Parallel reconciles.")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", "cluster.local", "The cluster's DNS domain; Serve mode routes <service>.<namespace>.svc.<domain>.")
	fs.IntVar(&o.InterceptorProxyPort, "interceptor-proxy-port", 8080, "The interceptors' proxy port on their pods, where Serve mode redirects an app's Service while the app is at zero.")
	fs.StringVar(&o.InterceptorServiceAccount, "interceptor-service-account", "httpscale-interceptor", "The interceptor's ServiceAccount in --namespace, granted get/list/watch on exactly the Secrets HTTPScaledObjects name in spec.tls (a Role per namespace); empty grants nothing.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "", `Address serving /debug/pprof/ (off when empty or "0"); for profiling, never expose it.`)
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
	if !fleetName.MatchString(o.Fleet) || len(o.Fleet) > 30 {
		errs = append(errs, fmt.Errorf("--fleet %q: want a lower-case DNS label of at most 30 characters (as spec.fleet)", o.Fleet))
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

// fleetName is the pattern of spec.fleet.
var fleetName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
