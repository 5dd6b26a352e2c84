package proxy

import (
	"cmp"
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"

	"github.com/httpscale/httpscale/pkg/coldstart"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/sessioncookie"
)

// TableSource yields the routing table to route with. pkg/tablewatch implements it; Table must be
// cheap (an atomic load) because it is called once per request, and may return nil before the first
// table was loaded (every request is then unrouted).
type TableSource interface {
	Table() *routing.Table
}

// TableFunc adapts a function to TableSource.
type TableFunc func() *routing.Table

// Table calls f.
func (f TableFunc) Table() *routing.Table { return f() }

// Options configure a Proxy. Zero durations and limits take the defaults in Defaults.
type Options struct {
	Tables    TableSource
	Endpoints endpoints.Source
	Registry  *queue.Registry
	// Metrics may be nil (metrics are then kept in a private registry).
	Metrics *Metrics
	Log     logr.Logger
	// Tracer, when not nil, traces every routed request (see trace.go); nil turns tracing off at
	// no cost on the request path.
	Tracer trace.Tracer
	// ColdStarts, when not nil, follows every cold start: it probes the app's starting pods and
	// records each cold start's steps (pkg/coldstart). Nil holds requests until the endpoint source
	// reports an endpoint ready, and records nothing.
	ColdStarts *coldstart.Tracker

	// Zone is this replica's zone; "" disables zone preference.
	Zone string
	// ZoneAware is the global default of Entry.ZoneAware.
	ZoneAware bool

	// ReadinessTimeout bounds holding; Entry.Timeouts.Readiness overrides it.
	ReadinessTimeout time.Duration
	// RequestTimeout bounds a forwarded request including its body; 0 means none. Entry overrides.
	RequestTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers; 0 means none. Entry overrides.
	ResponseHeaderTimeout time.Duration
	// QueueLimit is the default per-app hold-queue limit; Entry.ColdStart.QueueLimit overrides.
	QueueLimit int
	// Caps on what an app's own settings may ask for (0: none): an entry asking more, or none at
	// all (a timeout of 0 with no default), gets the cap. They keep one tenant's object from holding
	// requests (and their memory) longer or in greater number than the fleet's administrator allows.
	// MaxRequestTimeout caps the response-header timeout too.
	MaxQueueLimit       int
	MaxReadinessTimeout time.Duration
	MaxRequestTimeout   time.Duration
	// Pool, when not nil, bounds the requests held for every app together and shares them fairly
	// (see queue.Pool); a request it refuses, or a hold it evicts, is answered 503 with Retry-After.
	Pool *queue.Pool
	// RetryAfter is the Retry-After of a 503 for a full queue.
	RetryAfter time.Duration
	// DialTimeout bounds one connection attempt to an endpoint.
	DialTimeout time.Duration
	// DeadPeerTimeout closes an upstream connection whose peer acknowledged nothing (the request,
	// keepalive probes) for about this long, answering its request 502: a pod on a lost node. A
	// negative value turns it off.
	DeadPeerTimeout time.Duration
	// BadEndpointFor keeps an endpoint that refused a connection out of the rotation.
	BadEndpointFor time.Duration
	// MaxConnsPerEndpoint bounds the connections open to one endpoint; more requests wait for one.
	// It keeps a burst of released held requests from opening thousands of connections to a pod
	// that just started.
	MaxConnsPerEndpoint int
	// MaxWaitingPerEndpoint bounds the requests waiting for a connection to one endpoint (0: no
	// bound); one more is answered 503 upstream_busy with Retry-After.
	MaxWaitingPerEndpoint int
	// MaxDialAttempts bounds the endpoints tried for one request when connections fail.
	MaxDialAttempts int
	// WakeEvery is the minimum interval between two wake events of one app.
	WakeEvery time.Duration
	// ClusterDomain builds Service addresses for ViaService ("svc.ns.svc.<domain>:port").
	ClusterDomain string
	// TrustedProxies are the address ranges of proxies in front (an ingress, a load balancer)
	// whose X-Forwarded-For/-Host/-Proto are passed on; from any other client they are set from
	// what the interceptor saw. Empty (the default) trusts nobody. See ParseTrustedProxies.
	TrustedProxies []netip.Prefix

	// SessionKeys returns the keys of session cookies (the first signs, all are accepted); it is
	// called per request of an app with session persistence and must be cheap (an atomic load).
	// nil: one random key for the process's lifetime, which other replicas do not share.
	SessionKeys func() *sessioncookie.Keys

	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// DialContext replaces the dialer of both upstream transports (nil: a net.Dialer with DialTimeout).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Defaults are the values used for zero Options fields. They are the only definition: the interceptor's
// flags (pkg/config) take their defaults from here.
var Defaults = Options{
	ReadinessTimeout:    2 * time.Minute,
	QueueLimit:          1000,
	RetryAfter:          5 * time.Second,
	DialTimeout:         2 * time.Second,
	DeadPeerTimeout:     engine.DefaultDeadPeerTimeout,
	BadEndpointFor:      5 * time.Second,
	MaxDialAttempts:     3,
	MaxConnsPerEndpoint: 512,
	WakeEvery:           time.Second,
	ClusterDomain:       "cluster.local",
}

func (o *Options) setDefaults() {
	d := Defaults
	o.ReadinessTimeout = cmp.Or(o.ReadinessTimeout, d.ReadinessTimeout)
	o.QueueLimit = cmp.Or(o.QueueLimit, d.QueueLimit)
	o.RetryAfter = cmp.Or(o.RetryAfter, d.RetryAfter)
	o.DialTimeout = cmp.Or(o.DialTimeout, d.DialTimeout)
	o.DeadPeerTimeout = cmp.Or(o.DeadPeerTimeout, d.DeadPeerTimeout)
	o.BadEndpointFor = cmp.Or(o.BadEndpointFor, d.BadEndpointFor)
	o.MaxDialAttempts = cmp.Or(o.MaxDialAttempts, d.MaxDialAttempts)
	o.MaxConnsPerEndpoint = cmp.Or(o.MaxConnsPerEndpoint, d.MaxConnsPerEndpoint)
	o.WakeEvery = cmp.Or(o.WakeEvery, d.WakeEvery)
	o.ClusterDomain = cmp.Or(o.ClusterDomain, d.ClusterDomain)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registry == nil {
		o.Registry = queue.NewRegistry(o.Now)
	}
	if o.SessionKeys == nil {
		k := sessioncookie.RandomKeys()
		o.SessionKeys = func() *sessioncookie.Keys { return k }
	}
}

// ParseTrustedProxies reads a comma-separated list of CIDR ranges and addresses for
// Options.TrustedProxies (h1.ParseTrustedProxies).
func ParseTrustedProxies(list string) ([]netip.Prefix, error) { return h1.ParseTrustedProxies(list) }

// Server is the engine's server (see engine.Server): the proxy and admin ports.
type Server = engine.Server
