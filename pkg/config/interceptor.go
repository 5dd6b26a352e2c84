package config

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Interceptor configures the interceptor binary.
type Interceptor struct {
	Common

	// Namespace is the install namespace holding the routing-table ConfigMaps.
	Namespace string
	// ProxyAddr serves the proxied traffic (HTTP/1.1 and h2c).
	ProxyAddr string
	// AdminAddr serves pkg/admin's paths: /status /counts /wake /metrics /healthz /readyz.
	AdminAddr string

	// Zone is this replica's zone; empty means the topology.kubernetes.io/zone label of NodeName.
	Zone string
	// NodeName is the node this replica runs on (NODE_NAME, from the downward API).
	NodeName string
	// ZoneAware prefers same-zone endpoints unless an HTTPScaledObject says otherwise.
	ZoneAware bool

	// Defaults for apps that do not set their own.
	ReadinessTimeout      time.Duration
	RequestTimeout        time.Duration
	ResponseHeaderTimeout time.Duration
	QueueLimit            int

	// RetryAfter is sent with a 503 for a full hold queue.
	RetryAfter time.Duration
	// DialTimeout bounds one connection attempt to a pod.
	DialTimeout time.Duration
	// ClusterDomain builds Service names for apps forwarded via their Service.
	ClusterDomain string
	// TableResync is the period of the routing table's full re-read.
	TableResync time.Duration

	// MaxConnsPerEndpoint bounds the connections open to one pod.
	MaxConnsPerEndpoint int
	// GCPercent is the Go garbage collector's target (GOGC); the proxy's live heap is small, so a
	// higher value trades a little memory for less CPU per request. GOGC in the environment wins.
	GCPercent int
	// HTTP1FastPath serves plain body-less HTTP/1.1 requests on the proxy server's fast path; the
	// rest is handed to net/http. Off, net/http serves every request.
	HTTP1FastPath bool
	// EventLoops is how many event loops serve the fast path's common requests: 0 none (every
	// connection on its own goroutine), negative one per CPU the process may use (GOMAXPROCS).
	EventLoops int

	// DrainDelay is how long the replica keeps serving after SIGTERM with readiness failing.
	DrainDelay time.Duration
	// DrainTimeout bounds the wait for in-flight and held requests and WebSockets after the delay.
	DrainTimeout time.Duration

	// PprofAddr serves net/http/pprof (heap profiles for memory measurements); "" or "0" disables it.
	PprofAddr string
	// Standalone is a file of HTTPScaledObject documents to route by instead of Kubernetes (see
	// pkg/standalone); empty means the routing table and EndpointSlices of the cluster.
	Standalone string
}

// Bind registers the interceptor's flags on fs, with defaults taken from the environment. Probes and
// metrics are served on the admin port, so the manager's own metrics server is off by default.
func (i *Interceptor) Bind(fs *flag.FlagSet) {
	i.bind(fs, ":9091", "0")
	fs.StringVar(&i.Namespace, "namespace", env("HTTPSCALE_NAMESPACE", env("POD_NAMESPACE", "httpscale-system")), "Install namespace holding the routing-table ConfigMaps (env POD_NAMESPACE).")
	fs.StringVar(&i.ProxyAddr, "proxy-bind-address", env("HTTPSCALE_PROXY_BIND_ADDRESS", ":8080"), "Address serving proxied traffic (HTTP/1.1 and h2c).")
	fs.StringVar(&i.AdminAddr, "admin-bind-address", env("HTTPSCALE_ADMIN_BIND_ADDRESS", ":9090"), "Address serving /status /counts /wake /metrics /healthz /readyz.")
	fs.StringVar(&i.Zone, "zone", env("HTTPSCALE_ZONE", ""), "This replica's zone; empty reads the topology.kubernetes.io/zone label of the node named by NODE_NAME.")
	fs.StringVar(&i.NodeName, "node-name", env("HTTPSCALE_NODE_NAME", env("NODE_NAME", "")), "Node this replica runs on (env NODE_NAME).")
	fs.BoolVar(&i.ZoneAware, "zone-aware", envBool("HTTPSCALE_ZONE_AWARE", true), "Prefer endpoints in this replica's zone (per-app override in the HTTPScaledObject).")
	fs.DurationVar(&i.ReadinessTimeout, "readiness-timeout", envDuration("HTTPSCALE_READINESS_TIMEOUT", 2*time.Minute), "Default time a request is held waiting for a ready endpoint.")
	fs.DurationVar(&i.RequestTimeout, "request-timeout", envDuration("HTTPSCALE_REQUEST_TIMEOUT", 0), "Default bound of a whole forwarded request including its body; 0 means none.")
	fs.DurationVar(&i.ResponseHeaderTimeout, "response-header-timeout", envDuration("HTTPSCALE_RESPONSE_HEADER_TIMEOUT", 0), "Default bound of the wait for response headers; 0 means none.")
	fs.IntVar(&i.QueueLimit, "queue-limit", envInt("HTTPSCALE_QUEUE_LIMIT", 1000), "Default number of requests held at once per app; more get 503.")
	fs.DurationVar(&i.RetryAfter, "retry-after", envDuration("HTTPSCALE_RETRY_AFTER", 5*time.Second), "Retry-After sent with a 503 for a full hold queue.")
	fs.DurationVar(&i.DialTimeout, "dial-timeout", envDuration("HTTPSCALE_DIAL_TIMEOUT", 2*time.Second), "Bound of one connection attempt to a pod.")
	fs.StringVar(&i.ClusterDomain, "cluster-domain", env("HTTPSCALE_CLUSTER_DOMAIN", "cluster.local"), "Cluster DNS domain, for apps forwarded via their Service.")
	fs.DurationVar(&i.TableResync, "table-resync", envDuration("HTTPSCALE_TABLE_RESYNC", time.Minute), "Period of the routing table's full re-read.")
	fs.IntVar(&i.MaxConnsPerEndpoint, "max-conns-per-endpoint", envInt("HTTPSCALE_MAX_CONNS_PER_ENDPOINT", 512), "Connections open at once to one pod; more requests wait for one.")
	fs.IntVar(&i.GCPercent, "gc-percent", envInt("HTTPSCALE_GC_PERCENT", 400), "Go GC target percentage (ignored when GOGC is set).")
	fs.BoolVar(&i.HTTP1FastPath, "http1-fast-path", envBool("HTTPSCALE_HTTP1_FAST_PATH", true), "Serve plain body-less HTTP/1.1 requests on the proxy's fast path (the rest goes to net/http).")
	fs.IntVar(&i.EventLoops, "event-loops", envInt("HTTPSCALE_EVENT_LOOPS", -1), "Event loops serving the fast path's plain requests to warm apps on Linux (0: a goroutine per connection; -1: one per GOMAXPROCS).")
	fs.DurationVar(&i.DrainDelay, "drain-delay", envDuration("HTTPSCALE_DRAIN_DELAY", 5*time.Second), "After SIGTERM, keep serving this long with readiness failing.")
	fs.StringVar(&i.PprofAddr, "pprof-bind-address", env("HTTPSCALE_PPROF_BIND_ADDRESS", ""), `Address serving /debug/pprof/ (off when empty or "0"); for profiling, never expose it.`)
	fs.StringVar(&i.Standalone, "standalone", env("HTTPSCALE_STANDALONE", ""), "Run without Kubernetes, routing by this file of HTTPScaledObject documents with their endpoints (reloaded when it changes).")
	fs.DurationVar(&i.DrainTimeout, "drain-timeout", envDuration("HTTPSCALE_DRAIN_TIMEOUT", 60*time.Second), "After the delay, wait this long for in-flight and held requests and WebSockets.")
}

// Validate reports every invalid setting at once.
func (i *Interceptor) Validate() error {
	errs := []error{i.validate()}
	for name, addr := range map[string]string{"proxy-bind-address": i.ProxyAddr, "admin-bind-address": i.AdminAddr} {
		errs = append(errs, validateAddr(name, addr))
	}
	if i.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if i.MaxConnsPerEndpoint < 1 {
		errs = append(errs, fmt.Errorf("--max-conns-per-endpoint %d: want at least 1", i.MaxConnsPerEndpoint))
	}
	if i.GCPercent < 25 {
		errs = append(errs, fmt.Errorf("--gc-percent %d: want at least 25", i.GCPercent))
	}
	if i.QueueLimit < 1 {
		errs = append(errs, fmt.Errorf("--queue-limit %d: want at least 1", i.QueueLimit))
	}
	for name, d := range map[string]time.Duration{
		"readiness-timeout": i.ReadinessTimeout, "dial-timeout": i.DialTimeout, "table-resync": i.TableResync,
		"drain-timeout": i.DrainTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("--%s %s: want a positive duration", name, d))
		}
	}
	for name, d := range map[string]time.Duration{
		"request-timeout": i.RequestTimeout, "response-header-timeout": i.ResponseHeaderTimeout,
		"retry-after": i.RetryAfter, "drain-delay": i.DrainDelay,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("--%s %s: must not be negative", name, d))
		}
	}
	return errors.Join(errs...)
}
