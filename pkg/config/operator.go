package config

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/httpscale/httpscale/pkg/routing"
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
	// KEDACheckInterval paces the check for KEDA's CRDs while they are missing.
	KEDACheckInterval time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles.
	MaxConcurrentReconciles int
	// ClusterDomain is the cluster's DNS domain; Serve mode routes <svc>.<ns>.svc.<ClusterDomain>.
	ClusterDomain string
	// ServePortMin and ServePortMax bound the Serve ports: one per Serve-mode app, on which the
	// interceptors listen for that app alone, the target of its Service's redirect slice.
	ServePortMin, ServePortMax int
	// InterceptorServiceAccount is the interceptor's ServiceAccount in Namespace; the operator lets it
	// read exactly the Secrets HTTPScaledObjects name in spec.tls. Empty grants nothing.
	InterceptorServiceAccount string
	// HostClaimRetention is how long a host stays its namespace's after the last object of the
	// namespace routing it is gone (HostClaims); zero keeps it until an admin deletes the claim.
	HostClaimRetention time.Duration
	// MaxEntryBytes is the per-object budget of a routing entry's stored form: a larger object is
	// refused at admission and left out of the routing table.
	MaxEntryBytes int
	// Webhook configures the validating admission webhook and its certificate.
	Webhook Webhook
	// Schedules configures scheduled scaling.
	Schedules Schedules
	// PprofAddr serves net/http/pprof (CPU and heap profiles of a large installation); "" or "0"
	// disables it.
	PprofAddr string
	// SessionKeysSecret is the Secret in Namespace the interceptors read their session-cookie keys
	// from; the elected operator writes a random key into it when it has none. Empty: none.
	SessionKeysSecret string
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
	fs.DurationVar(&o.KEDACheckInterval, "keda-check-interval", 20*time.Second, "While KEDA's CRDs are missing, how often the operator looks for them (it routes without them, and starts scaling once they appear).")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", "cluster.local", "The cluster's DNS domain; Serve mode routes <service>.<namespace>.svc.<domain>.")
	o.ServePortMin, o.ServePortMax = 20000, 29999
	fs.Func("serve-ports", "Range of the interceptors' Serve ports, min-max (default 20000-29999): each Serve-mode app gets one, on which the interceptors route every request to that app alone; its Service is redirected there while the app is at zero. Must not include a port the interceptors already use.", func(v string) error {
		lo, hi, ok := strings.Cut(v, "-")
		a, err1 := strconv.Atoi(strings.TrimSpace(lo))
		b, err2 := strconv.Atoi(strings.TrimSpace(hi))
		if !ok || err1 != nil || err2 != nil {
			return fmt.Errorf("want min-max, such as 20000-29999")
		}
		o.ServePortMin, o.ServePortMax = a, b
		return nil
	})
	fs.StringVar(&o.InterceptorServiceAccount, "interceptor-service-account", "httpscale-interceptor", "The interceptor's ServiceAccount in --namespace, granted get/list/watch on exactly the Secrets HTTPScaledObjects name in spec.tls (a Role per namespace); empty grants nothing.")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "", `Address serving /debug/pprof/ (off when empty or "0"); for profiling, never expose it.`)
	fs.StringVar(&o.SessionKeysSecret, "session-keys-secret", "", "Secret in --namespace holding the interceptors' session-cookie keys; the elected operator writes a random key into it when it has none (a key that is there is never changed). Empty: none.")
	fs.DurationVar(&o.HostClaimRetention, "host-claim-retention", 24*time.Hour, "How long a host stays its namespace's after the last object of the namespace routing it is gone (a GitOps replace, a helm uninstall/install); 0 keeps it until an admin deletes its HostClaim.")
	fs.IntVar(&o.MaxEntryBytes, "max-entry-bytes", routing.DefaultMaxEntryBytes, fmt.Sprintf("Per-object budget of a routing entry's stored form in bytes (at most %d): a larger HTTPScaledObject is refused at admission and left out of the routing table.", routing.MaxEntryBytesLimit))
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
	for name, d := range map[string]time.Duration{"propagation-probe-interval": o.ProbeInterval, "propagation-probe-timeout": o.ProbeTimeout, "routing-table-debounce": o.TableDebounce, "routing-table-max-delay": o.TableMaxDelay, "keda-check-interval": o.KEDACheckInterval} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive, got %s", name, d))
		}
	}
	if o.MaxConcurrentReconciles < 1 {
		errs = append(errs, fmt.Errorf("--max-concurrent-reconciles must be at least 1, got %d", o.MaxConcurrentReconciles))
	}
	if o.ServePortMin < 1024 || o.ServePortMax > 65535 || o.ServePortMin > o.ServePortMax {
		errs = append(errs, fmt.Errorf("--serve-ports %d-%d: want min-max within 1024-65535, min not above max", o.ServePortMin, o.ServePortMax))
	}
	if strings.Contains(o.ClusterDomain, "/") || strings.HasPrefix(o.ClusterDomain, ".") || strings.HasSuffix(o.ClusterDomain, ".") {
		errs = append(errs, fmt.Errorf("--cluster-domain %q: want a DNS domain such as cluster.local, without leading or trailing dots", o.ClusterDomain))
	}
	if o.HostClaimRetention < 0 {
		errs = append(errs, fmt.Errorf("--host-claim-retention must not be negative, got %s", o.HostClaimRetention))
	}
	if o.MaxEntryBytes < 1024 || o.MaxEntryBytes > routing.MaxEntryBytesLimit {
		errs = append(errs, fmt.Errorf("--max-entry-bytes must be between 1024 and %d (a quarter of a routing-table shard), got %d", routing.MaxEntryBytesLimit, o.MaxEntryBytes))
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
