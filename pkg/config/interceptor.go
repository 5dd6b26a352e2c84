package config

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/httpscale/httpscale/pkg/coldstart"
	"github.com/httpscale/httpscale/pkg/proxy"
)

// Interceptor configures the interceptor binary.
type Interceptor struct {
	Common

	// Namespace is the install namespace holding the routing-table ConfigMaps.
	Namespace string
	// TableName is the routing table's head ConfigMap (the operator's --routing-table-name).
	TableName string
	// ProxyAddr serves the proxied traffic (HTTP/1.1 and h2c).
	ProxyAddr string
	// AdminAddr serves pkg/admin's paths: /status /counts /wake /metrics /healthz /readyz.
	AdminAddr string
	// TLSAddr serves proxied traffic over TLS (HTTP/2 and HTTP/1.1 by ALPN) with each app's
	// certificate chosen by SNI (pkg/tlsterm); "" turns the TLS port off.
	TLSAddr string
	// TLSDefaultSecret is the kubernetes.io/tls Secret ("name" in Namespace, or "namespace/name")
	// whose certificate answers a server name no app's certificate serves; "" means such
	// handshakes fail.
	TLSDefaultSecret string

	// Zone is this replica's zone; empty means the topology.kubernetes.io/zone label of NodeName.
	Zone string
	// NodeName is the node this replica runs on (NODE_NAME, from the downward API).
	NodeName string
	// ZoneAware prefers same-zone endpoints unless an HTTPScaledObject says otherwise.
	ZoneAware bool

	// AdminAuth says who may call the admin port.
	AdminAuth AdminAuth

	// HoldLimits bound held requests and header sizes, and cap the objects' own settings.
	HoldLimits

	// Defaults for apps that do not set their own.
	ReadinessTimeout time.Duration
	// ReadinessGrace keeps an app's endpoints this long when all of them turn not ready at once
	// without terminating (the control plane marking pods not ready after an outage); 0 turns it off.
	ReadinessGrace        time.Duration
	RequestTimeout        time.Duration
	ResponseHeaderTimeout time.Duration
	QueueLimit            int

	// RetryAfter is sent with a 503 for a full hold queue.
	RetryAfter time.Duration
	// DialTimeout bounds one connection attempt to a pod.
	DialTimeout time.Duration
	// UpstreamDeadPeerTimeout closes a connection to a pod whose kernel acknowledged nothing (data
	// or keepalive probes) for about this long: a pod on a lost node; 0 turns it off.
	UpstreamDeadPeerTimeout time.Duration
	// ClusterDomain builds Service names for apps forwarded via their Service.
	ClusterDomain string
	// TableResync is the period of the routing table's full re-read.
	TableResync time.Duration
	// TableStaleAfter fails readiness while the API server has held a newer routing table than the
	// watch delivered for longer than it (pkg/tablewatch); 0 turns the check off.
	TableStaleAfter time.Duration
	// SessionKeysFile holds the session cookies' keys, one per line, the signing key first (a
	// mounted Secret, re-read as it changes); empty means a random key of this process.
	SessionKeysFile string

	// MaxConnsPerEndpoint bounds the connections open to one pod.
	MaxConnsPerEndpoint int

	// ColdStartProbeInterval is the least time between two cold-start probes of one starting pod,
	// ColdStartProbeTimeout bounds one, and ColdStartMaxProbes bounds those running at once (0 turns
	// cold-start probes off: held requests wait for the kubelet's readiness). See pkg/coldstart.
	ColdStartProbeInterval time.Duration
	ColdStartProbeTimeout  time.Duration
	ColdStartMaxProbes     int
	// GCPercent is the Go garbage collector's target (GOGC); the proxy's live heap is small, so a
	// higher value trades a little memory for less CPU per request. GOGC in the environment wins.
	GCPercent int
	// PerAppMetrics chooses the metrics with a series per app: none, counters (the default) or
	// histograms (see proxy.PerApp).
	PerAppMetrics string
	// HTTP1FastPath serves the proxy port's HTTP/1.1 on the event loops (on Linux, EventLoops not
	// 0); what they do not parse goes to net/http. Off, net/http serves every request.
	HTTP1FastPath bool
	// EventLoops is how many event loops serve the proxy port: 0 none (net/http serves every
	// request), negative one per CPU the process may use (GOMAXPROCS).
	EventLoops int

	// DrainDelay is how long the replica keeps serving after SIGTERM with readiness failing.
	DrainDelay time.Duration
	// DrainTimeout bounds the wait for in-flight and held requests and WebSockets after the delay.
	DrainTimeout time.Duration

	// TrustedProxies is a comma-separated list of CIDR ranges and addresses of the proxies in front
	// (ingress controllers, load balancers) whose X-Forwarded-For/-Host/-Proto are passed on; from
	// any other client they are replaced by what the interceptor saw. Empty trusts nobody.
	TrustedProxies string

	// PprofAddr serves net/http/pprof (heap profiles for memory measurements); "" or "0" disables it.
	PprofAddr string
	// Standalone is a file of HTTPScaledObject documents to route by instead of Kubernetes (see
	// pkg/standalone); empty means the routing table and EndpointSlices of the cluster.
	Standalone string
}

// Bind registers the interceptor's flags on fs, then takes their values from the environment (see
// EnvName). Probes and metrics are served on the admin port, so the manager's own metrics server is off
// by default. The proxy's defaults are pkg/proxy's own (proxy.Defaults), so the binary and the library
// cannot drift apart.
func (i *Interceptor) Bind(fs *flag.FlagSet) {
	i.bind(fs, ":9091", "0")
	fs.StringVar(&i.Namespace, "namespace", "httpscale-system", "Install namespace holding the routing-table ConfigMaps (env POD_NAMESPACE).")
	fs.StringVar(&i.TableName, "routing-table-name", "httpscale-routing-table", "Name of the routing table's head ConfigMap, as the operator's --routing-table-name.")
	fs.StringVar(&i.ProxyAddr, "proxy-bind-address", ":8080", "Address serving proxied traffic (HTTP/1.1 and h2c).")
	fs.StringVar(&i.AdminAddr, "admin-bind-address", ":9090", "Address serving /status /counts /wake /metrics /healthz /readyz.")
	fs.StringVar(&i.TLSAddr, "tls-bind-address", "", "Address serving proxied traffic over TLS with each app's certificate (spec.tls) chosen by SNI; empty turns TLS off.")
	fs.StringVar(&i.TLSDefaultSecret, "tls-default-secret", "", "kubernetes.io/tls Secret (name in --namespace, or namespace/name) for server names no app's certificate serves; empty fails those handshakes.")
	fs.StringVar(&i.Zone, "zone", "", "This replica's zone; empty reads the topology.kubernetes.io/zone label of the node named by NODE_NAME.")
	fs.StringVar(&i.NodeName, "node-name", "", "Node this replica runs on (env NODE_NAME).")
	fs.BoolVar(&i.ZoneAware, "zone-aware", true, "Prefer endpoints in this replica's zone (per-app override in the HTTPScaledObject).")
	fs.DurationVar(&i.ReadinessTimeout, "readiness-timeout", proxy.Defaults.ReadinessTimeout, "Default time a request is held waiting for a ready endpoint.")
	fs.DurationVar(&i.ReadinessGrace, "readiness-grace", 15*time.Second, "Keep routing to an app's pods this long when all of them turn not ready at once without terminating (as the control plane marks them after an API server outage); 0 holds requests at once.")
	fs.DurationVar(&i.RequestTimeout, "request-timeout", 0, "Default bound of a whole forwarded request including its body (not of an upgraded WebSocket); 0 means --max-request-timeout (none without a cap).")
	fs.DurationVar(&i.ResponseHeaderTimeout, "response-header-timeout", DefaultResponseHeaderTimeout, "Default bound of the wait for response headers; 0 means --max-request-timeout (none without a cap).")
	fs.IntVar(&i.QueueLimit, "queue-limit", proxy.Defaults.QueueLimit, "Default number of requests held at once per app; more get 503.")
	i.HoldLimits.Bind(fs)
	i.AdminAuth.Bind(fs)
	fs.DurationVar(&i.RetryAfter, "retry-after", proxy.Defaults.RetryAfter, "Retry-After sent with a 503 for a full hold queue, in whole seconds (at least 1s).")
	fs.DurationVar(&i.DialTimeout, "dial-timeout", proxy.Defaults.DialTimeout, "Bound of one connection attempt to a pod.")
	fs.DurationVar(&i.UpstreamDeadPeerTimeout, "upstream-dead-peer-timeout", proxy.Defaults.DeadPeerTimeout, "Close a connection to a pod, answering its request 502, once the pod's host acknowledged nothing (neither the request nor keepalive probes) for about this long, as when its node is lost; a slow but running app is not affected. 0 turns it off (a request sent to a lost node may then wait up to --response-header-timeout).")
	fs.StringVar(&i.ClusterDomain, "cluster-domain", proxy.Defaults.ClusterDomain, "Cluster DNS domain, for apps forwarded via their Service.")
	fs.DurationVar(&i.TableResync, "table-resync", time.Minute, "Period of the routing table's full re-read.")
	fs.DurationVar(&i.TableStaleAfter, "table-stale-after", 30*time.Second, "Fail readiness while the API server has had a newer routing table than this replica's watch delivered for longer than this; 0 turns the check off.")
	fs.StringVar(&i.SessionKeysFile, "session-keys-file", "", "File of session-cookie keys, one per line, the signing key first (re-read as it changes); empty uses a random key of this process, which other replicas do not share.")
	fs.IntVar(&i.MaxConnsPerEndpoint, "max-conns-per-endpoint", proxy.Defaults.MaxConnsPerEndpoint, "Connections open at once to one pod; more requests wait for one.")
	fs.DurationVar(&i.ColdStartProbeInterval, "cold-start-probe-interval", coldstart.Defaults.Interval, "Least time between two probes of a starting pod while requests for its app are held.")
	fs.DurationVar(&i.ColdStartProbeTimeout, "cold-start-probe-timeout", coldstart.Defaults.Timeout, "Bound of one cold-start probe (a readiness probe's timeoutSeconds lowers it).")
	fs.IntVar(&i.ColdStartMaxProbes, "cold-start-max-probes", coldstart.Defaults.MaxProbes, "Cold-start probes running at once in the replica, shared out in turn between apps; 0 turns them off (held requests wait for the kubelet's readiness).")
	fs.IntVar(&i.GCPercent, "gc-percent", 400, "Go GC target percentage (ignored when GOGC is set).")
	fs.StringVar(&i.PerAppMetrics, "per-app-metrics", string(proxy.PerAppCounters), "Metrics with a series per app: none (the fleet's only), counters (per-app counters, read at scrape time; histograms are the fleet's) or histograms (counters plus request-duration and cold-start-wait histograms per app, about 5 KiB per app).")
	fs.BoolVar(&i.HTTP1FastPath, "http1-fast-path", true, "Serve the proxy port's HTTP/1.1 on the event loops (what they do not parse goes to net/http); false: net/http serves everything.")
	fs.IntVar(&i.EventLoops, "event-loops", -1, "Event loops serving the proxy port's HTTP/1.1 on Linux (0: none, net/http serves everything; -1: one per GOMAXPROCS).")
	fs.DurationVar(&i.DrainDelay, "drain-delay", 5*time.Second, "After SIGTERM, keep serving this long with readiness failing.")
	fs.DurationVar(&i.DrainTimeout, "drain-timeout", 60*time.Second, "After the delay, wait this long for in-flight and held requests and WebSockets.")
	fs.StringVar(&i.TrustedProxies, "trusted-proxies", "", "Comma-separated CIDR ranges and addresses of proxies in front (ingress, load balancer) whose X-Forwarded-For/-Host/-Proto are passed on; from any other client they are set from the connection (its address, the Host, the port's scheme). Empty trusts nobody.")
	fs.StringVar(&i.PprofAddr, "pprof-bind-address", "", `Address serving /debug/pprof/ (off when empty or "0"); for profiling, never expose it.`)
	fs.StringVar(&i.Standalone, "standalone", "", "Run without Kubernetes, routing by this file of HTTPScaledObject documents with their endpoints (reloaded when it changes).")
	i.loadEnv(fs)
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
	if i.TLSAddr != "" {
		errs = append(errs, validateAddr("tls-bind-address", i.TLSAddr))
		if i.Standalone != "" {
			errs = append(errs, errors.New("--tls-bind-address works with Kubernetes only (certificates come from Secrets); drop it or --standalone"))
		}
	}
	if i.TLSDefaultSecret != "" {
		if i.TLSAddr == "" {
			errs = append(errs, errors.New("--tls-default-secret needs --tls-bind-address"))
		}
		if _, err := i.TLSDefaultSecretKey(); err != nil {
			errs = append(errs, err)
		}
	}
	if _, err := proxy.ParseTrustedProxies(i.TrustedProxies); err != nil {
		errs = append(errs, fmt.Errorf("--trusted-proxies: %w", err))
	}
	if i.TableName == "" {
		errs = append(errs, errors.New("--routing-table-name must not be empty"))
	}
	if i.MaxConnsPerEndpoint < 1 {
		errs = append(errs, fmt.Errorf("--max-conns-per-endpoint %d: want at least 1", i.MaxConnsPerEndpoint))
	}
	if i.GCPercent < 25 {
		errs = append(errs, fmt.Errorf("--gc-percent %d: want at least 25", i.GCPercent))
	}
	if _, err := proxy.ParsePerApp(i.PerAppMetrics); err != nil {
		errs = append(errs, fmt.Errorf("--per-app-metrics %w", err))
	}
	errs = append(errs, i.AdminAuth.Validate(i.Standalone != ""))
	responseHeader := i.ResponseHeaderTimeout
	if responseHeader == DefaultResponseHeaderTimeout {
		responseHeader = 0 // the built-in default gives way to a lower --max-request-timeout (the proxy caps it)
	}
	errs = append(errs, i.HoldLimits.Validate(i.QueueLimit, i.ReadinessTimeout, i.RequestTimeout, responseHeader))
	if i.ColdStartMaxProbes < 0 {
		errs = append(errs, fmt.Errorf("--cold-start-max-probes %d: want 0 (off) or more", i.ColdStartMaxProbes))
	}
	if i.ColdStartProbeInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("--cold-start-probe-interval %s: want at least 10ms", i.ColdStartProbeInterval))
	}
	if i.ColdStartProbeTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--cold-start-probe-timeout %s: want a positive duration", i.ColdStartProbeTimeout))
	}
	if d := i.UpstreamDeadPeerTimeout; d < 0 || d > 0 && d < 2*time.Second {
		errs = append(errs, fmt.Errorf("--upstream-dead-peer-timeout %s: want 0 (off) or at least 2s", d))
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
		"drain-delay": i.DrainDelay, "readiness-grace": i.ReadinessGrace, "table-stale-after": i.TableStaleAfter,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("--%s %s: must not be negative", name, d))
		}
	}
	// Retry-After is sent in whole seconds; 0 would tell clients to retry at once into the full queue.
	if i.RetryAfter < time.Second {
		errs = append(errs, fmt.Errorf("--retry-after %s: want at least 1s (Retry-After is sent in whole seconds; 0 would ask clients to retry at once)", i.RetryAfter))
	}
	return errors.Join(errs...)
}

// TLSDefaultSecretKey returns --tls-default-secret as "namespace/name" (a bare name is in
// --namespace), "" when unset.
func (i *Interceptor) TLSDefaultSecretKey() (string, error) {
	if i.TLSDefaultSecret == "" {
		return "", nil
	}
	ns, name, found := strings.Cut(i.TLSDefaultSecret, "/")
	if !found {
		ns, name = i.Namespace, i.TLSDefaultSecret
	}
	if errs := validation.IsDNS1123Label(ns); ns == "" || len(errs) > 0 {
		return "", fmt.Errorf("--tls-default-secret %q: the namespace must be a DNS label", i.TLSDefaultSecret)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return "", fmt.Errorf("--tls-default-secret %q: the Secret name must be a DNS subdomain: %s", i.TLSDefaultSecret, strings.Join(errs, "; "))
	}
	return ns + "/" + name, nil
}
