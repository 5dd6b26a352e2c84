package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Host is an HTTP host the app serves: an exact lowercase DNS name (shop.example.com), a wildcard on the
// leftmost label (*.example.com matches a.example.com and a.b.example.com, not example.com; the most
// specific wildcard wins), or * for every host. Matching is case-insensitive and ignores a :port in the
// request's Host header.
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:XValidation:rule=`self == '*' || self.matches(r'^(\*\.)?[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*$')`,message="host must be a lowercase DNS name (shop.example.com), a wildcard on the leftmost label (*.example.com), or * for all hosts; no scheme, port, path or upper-case letters"
type Host string

// PathPrefix is a URL path prefix matched on whole segments: /api matches /api and /api/v1, not /apis.
// +kubebuilder:validation:MaxLength=1024
// +kubebuilder:validation:XValidation:rule=`self.startsWith('/') && !self.matches(r'[?#\s]')`,message="path prefix must start with / and contain no query (?), fragment (#) or whitespace"
type PathPrefix string

// Duration is a Go duration string such as 500ms, 30s, 2m or 1h30m.
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:MaxLength=32
// +kubebuilder:validation:XValidation:rule=`self.matches(r'^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')`,message="must be a positive duration such as 500ms, 30s, 2m or 1h30m"
type Duration string

// HTTPScaledObjectSpec says which HTTP traffic belongs to an app, where to send it, and how to scale the
// workload that serves it.
// +kubebuilder:validation:XValidation:rule="has(self.hosts) && size(self.hosts) > 0",message="hosts needs at least one host: shop.example.com, *.example.com or * for all hosts"
// +kubebuilder:validation:XValidation:rule=`!has(self.replicas) || !has(self.replicas.min) || !has(self.replicas.max) || self.replicas.min <= self.replicas.max`,message="replicas.min must not be greater than replicas.max"
// +kubebuilder:validation:XValidation:rule=`!has(self.mode) || self.mode != 'Serve' || !has(self.forwarding) || !has(self.forwarding.viaService) || !self.forwarding.viaService`,message="mode Serve cannot be combined with forwarding.viaService: while the app is at zero its Service leads back to the interceptors; remove forwarding.viaService"
// +kubebuilder:validation:XValidation:rule=`!has(self.mode) || self.mode != 'Serve' || (has(self.scaling) && has(self.scaling.triggers) && size(self.scaling.triggers) > 0) || (has(self.replicas) && has(self.replicas.min) && self.replicas.min >= 1)`,message="mode Serve takes the interceptor out of the path while the app is warm, so the interceptor's counts cannot keep it up: add spec.scaling.triggers that measure the app's traffic (for example prometheus or metrics-api), or set replicas.min to at least 1"
// +kubebuilder:validation:XValidation:rule=`!has(self.pathRewrites) || self.pathRewrites.all(r, (has(self.pathPrefixes) && size(self.pathPrefixes) > 0) ? r.pathPrefix in self.pathPrefixes : r.pathPrefix == '/')`,fieldPath=".pathRewrites",message="each pathRewrites[].pathPrefix must be one of spec.pathPrefixes, written the same way (an object without pathPrefixes can only rewrite /)"
// +kubebuilder:validation:XValidation:rule=`!has(self.pathRewrites) || size(self.pathRewrites) == 0 || !has(self.mode) || self.mode != 'Serve'`,fieldPath=".pathRewrites",message="pathRewrites need mode Proxy: in Serve mode warm traffic reaches the app's pods without the interceptor, so it would arrive unrewritten; rewrite in the ingress in front, or use mode Proxy"
// +kubebuilder:validation:XValidation:rule=`!has(self.sessionPersistence) || !has(self.mode) || self.mode != 'Serve'`,fieldPath=".sessionPersistence",message="sessionPersistence needs mode Proxy: in Serve mode warm traffic reaches the app's pods without the interceptor, which could not keep a client on one pod"
// +kubebuilder:validation:XValidation:rule=`!has(self.sessionPersistence) || !has(self.forwarding) || !has(self.forwarding.viaService) || !self.forwarding.viaService`,fieldPath=".sessionPersistence",message="sessionPersistence cannot be combined with forwarding.viaService: through the Service's address the interceptor cannot choose the pod; remove forwarding.viaService"
type HTTPScaledObjectSpec struct {
	// Hosts whose requests are routed to this app. Exact hosts win over wildcards, more specific wildcards
	// over less specific ones, and * catches whatever no other object claims.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	Hosts []Host `json:"hosts"`

	// PathPrefixes narrows the route to these path prefixes (the longest matching prefix wins across
	// objects). Empty means every path.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	PathPrefixes []PathPrefix `json:"pathPrefixes,omitempty"`

	// Headers narrows the route to requests carrying all of these headers. A header with no value only
	// has to be present. Among routes that match, the one with more header matches wins.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Headers []HeaderMatch `json:"headers,omitempty"`

	// IgnoredPaths are path prefixes of this app (on its hosts and headers, inside its pathPrefixes)
	// whose requests are forwarded while the app has a ready replica but never count toward scaling
	// and never wake it: a load balancer's health checks do not keep the app from scaling to zero. At
	// zero such a request is answered at once with 503, Retry-After and X-Httpscale-Idle: true. They
	// are routes of their own: the longest matching prefix wins across objects, and a prefix another
	// object routes with the same hosts and headers is a conflict (see status).
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	IgnoredPaths []PathPrefix `json:"ignoredPaths,omitempty"`

	// StaticRoutes are path prefixes (on this app's hosts and headers) answered without the app: by
	// the interceptor itself with a fixed response, or by a fixed Service. They never count toward
	// scaling and never wake the app. Matched like pathPrefixes: the longest prefix wins across
	// objects; the same prefix, hosts and headers routed by another object is a conflict.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=pathPrefix
	StaticRoutes []StaticRoute `json:"staticRoutes,omitempty"`

	// ScaleTargetRef names the workload to scale and the Service (and port) that receives its traffic.
	ScaleTargetRef ScaleTargetRef `json:"scaleTargetRef"`

	// Mode chooses the app's entry point. Proxy (the default): callers reach the app through the
	// interceptor Service with one of spec.hosts, and every request passes the interceptor. Serve: the
	// app's own Service (scaleTargetRef.service) is the entry point too; while the app has no ready
	// endpoint the operator points that Service's scaleTargetRef port at the interceptors, which hold
	// the request and wake the app, and once the app is ready traffic goes straight to its pods. In
	// Serve mode the interceptor does not see warm traffic, so spec.scaling.triggers (or replicas.min
	// of at least 1) must keep the app up.
	// +optional
	// +kubebuilder:default=Proxy
	Mode Mode `json:"mode,omitempty"`

	// Scaling adds autoscaler inputs to the interceptor's traffic metrics.
	// +optional
	Scaling *Scaling `json:"scaling,omitempty"`
	// Fleet names the httpscale installation that routes and scales this app: the operator,
	// interceptors and scaler of the Helm release installed with the same `fleet` value. Empty means
	// the default fleet, "default". Only that release's operator writes the object's route, KEDA
	// ScaledObject and status; a fleet no running operator serves is reported in condition Ready
	// (reason FleetNotServed). Changing it moves the app: the old fleet's interceptors stop routing it
	// and the new fleet's start.
	// +optional
	// +kubebuilder:validation:MaxLength=30
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Fleet string `json:"fleet,omitempty"`

	// Replicas bounds the workload's replica count. min 0 enables scale to zero.
	// +optional
	// +kubebuilder:default={}
	Replicas *ReplicaBounds `json:"replicas,omitempty"`

	// ScalingMetric sets what the autoscaler tracks per replica: in-flight requests (concurrency), request
	// rate, or both (each reported separately; the autoscaler takes the larger recommendation).
	// Defaults to a concurrency target of 100.
	// +optional
	// +kubebuilder:default={concurrency: {targetValue: 100}}
	ScalingMetric *ScalingMetric `json:"scalingMetric,omitempty"`

	// ScaledownPeriod is how many seconds the app must receive no traffic before it is scaled to zero
	// (or to replicas.min). Counted from the end of the last request (in flight or held), not from the
	// last scale-up, for concurrency and request-rate metrics alike: the request-rate window does not
	// extend it. The app reaches zero between scaledownPeriod + 2 s (the scaler's active hold) and
	// that plus KEDA's pollingInterval (30 s by default) after its last request ended; after a cold
	// start, not before the scaler's --wake-hold (5 s) has passed since the wake.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	ScaledownPeriod *int32 `json:"scaledownPeriod,omitempty"`

	// Timeouts for requests to this app. Unset fields use the interceptor's global defaults.
	// +optional
	Timeouts *Timeouts `json:"timeouts,omitempty"`

	// ColdStart controls what happens to requests that arrive while the app has no ready replica.
	// +optional
	ColdStart *ColdStart `json:"coldStart,omitempty"`

	// Forwarding controls how interceptors send this app's requests to it.
	// +optional
	Forwarding *Forwarding `json:"forwarding,omitempty"`

	// PathRewrites replace the matched path prefix before a request is forwarded (Gateway API's
	// URLRewrite ReplacePrefixMatch), per path prefix. See PathRewrite.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=pathPrefix
	PathRewrites []PathRewrite `json:"pathRewrites,omitempty"`

	// SessionPersistence keeps a client on one pod of the app with a cookie. See SessionPersistence.
	// +optional
	SessionPersistence *SessionPersistence `json:"sessionPersistence,omitempty"`

	// TLS makes the interceptors terminate TLS for this object's hosts on their TLS port, with the
	// certificate of a Secret in this object's namespace. See TLS.
	// +optional
	TLS *TLS `json:"tls,omitempty"`

	// Schedules set the replica bounds at scheduled times (cron with time zones), to have capacity in
	// place before a known peak. See ScheduleRule.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=name
	Schedules []ScheduleRule `json:"schedules,omitempty"`
}

// Mode is an app's entry point: Proxy or Serve.
// +kubebuilder:validation:Enum=Proxy;Serve
type Mode string

// Modes.
const (
	// ModeProxy sends every request through the interceptor Service.
	ModeProxy Mode = "Proxy"
	// ModeServe makes the app's own Service the entry point, redirected to the interceptors only while
	// the app has no ready endpoint.
	ModeServe Mode = "Serve"
)

// Serve reports whether the spec asks for Serve mode (an unset mode is Proxy).
func (s *HTTPScaledObjectSpec) Serve() bool { return s.Mode == ModeServe }

// Scaling adds autoscaler inputs to the interceptor's traffic metrics.
type Scaling struct {
	// Triggers are extra KEDA triggers appended to the generated ScaledObject after the interceptor's
	// own trigger. KEDA scales on the largest recommendation and scales to zero only when every trigger
	// is inactive, so a trigger that sees the app's traffic while it is warm keeps it up in Serve mode.
	// They are passed to KEDA as written; KEDA reports errors in them on the ScaledObject.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Triggers []ScalingTrigger `json:"triggers,omitempty"`
}

// ScalingTrigger is one KEDA trigger (see KEDA's scaler documentation for each type's metadata).
type ScalingTrigger struct {
	// Type of the KEDA scaler, for example prometheus, metrics-api or cpu.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="trigger type must be a KEDA scaler type such as prometheus, metrics-api or cpu (lowercase letters, digits and -)"
	Type string `json:"type"`

	// Name of the trigger, unique in the ScaledObject when set.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name,omitempty"`

	// Metadata is the scaler's configuration: at most 64 entries, keys of at most 253 characters,
	// values of at most 4096.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.size() <= 253 && self[k].size() <= 4096)`,message="trigger metadata keys are at most 253 characters and values at most 4096"
	Metadata map[string]string `json:"metadata,omitempty"`

	// MetricType is how the HPA reads the metric: AverageValue (the default), Value or Utilization.
	// +optional
	// +kubebuilder:validation:Enum=AverageValue;Value;Utilization
	MetricType string `json:"metricType,omitempty"`

	// AuthenticationRef names a KEDA TriggerAuthentication in the object's namespace holding the
	// trigger's secrets, or a ClusterTriggerAuthentication where an HTTPScalePolicy allows the
	// namespace to use one (spec.clusterTriggerAuthentication).
	// +optional
	AuthenticationRef *TriggerAuthenticationRef `json:"authenticationRef,omitempty"`
}

// TriggerAuthenticationRef names a KEDA TriggerAuthentication.
type TriggerAuthenticationRef struct {
	// Name of the TriggerAuthentication.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// Kind is TriggerAuthentication (the default, in the object's namespace) or
	// ClusterTriggerAuthentication.
	// +optional
	// +kubebuilder:validation:Enum=TriggerAuthentication;ClusterTriggerAuthentication
	Kind string `json:"kind,omitempty"`
}

// TLS names the certificate the interceptors present for an object's hosts.
//
// On their TLS port the interceptors choose a certificate by the client's SNI: an exact host of some
// object first, then the most specific wildcard host (*.example.com, as routing matches it), then an
// object with host *, then the fleet's default certificate (chart value interceptor.tls.defaultSecret);
// with none of these the handshake fails. An object whose Secret is missing or invalid serves no
// certificate (condition TLSReady is False) and its hosts fall through to the next rule; other objects
// are unaffected. The certificate is reloaded without a restart when the Secret changes.
type TLS struct {
	// SecretName is a Secret of type kubernetes.io/tls in this object's namespace, holding tls.crt (the
	// PEM certificate chain, leaf first) and tls.key. The operator lets the interceptors read exactly
	// this Secret and no other.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="tls.secretName must be the name of a Secret in this namespace: a non-empty lowercase DNS name"
	SecretName string `json:"secretName"`
}

// Forwarding controls how interceptors send an app's requests to it.
type Forwarding struct {
	// ZoneAware makes an interceptor prefer the app's ready endpoints in its own zone (honouring
	// EndpointSlice topology hints), falling back to every zone when its zone has none. Unset uses the
	// interceptor's global setting (--zone-aware).
	// +optional
	ZoneAware *bool `json:"zoneAware,omitempty"`

	// ViaService forwards through the Service's cluster address instead of straight to ready pod IPs.
	// Direct-to-pod (the default) avoids waiting for the Service's programming after a scale from zero.
	// +optional
	ViaService bool `json:"viaService,omitempty"`
}

// HeaderMatch matches one request header.
type HeaderMatch struct {
	// Name of the header, matched case-insensitively.
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[A-Za-z0-9!#$%&*+.^_|~-]+$')`,message="header name must be a non-empty HTTP token such as X-Tenant (letters, digits and !#$%&*+.^_|~-)"
	Name string `json:"name"`

	// Value the header must have (exact, case-sensitive). Omit to match any value as long as the header
	// is present.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value *string `json:"value,omitempty"`
}

// ScaleTargetRef names the workload to scale and the Service that fronts it.
// +kubebuilder:validation:XValidation:rule="has(self.port) != has(self.portName)",message="set exactly one of scaleTargetRef.port or scaleTargetRef.portName"
type ScaleTargetRef struct {
	// APIVersion of the workload. Any kind with a /scale subresource works (Deployment, StatefulSet,
	// Argo Rollout, ...).
	// +optional
	// +kubebuilder:default="apps/v1"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion,omitempty"`

	// Kind of the workload.
	// +optional
	// +kubebuilder:default="Deployment"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind,omitempty"`

	// Name of the workload, in the HTTPScaledObject's namespace.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')`,message="scaleTargetRef.name must be the name of the workload to scale: a non-empty lowercase DNS name"
	Name string `json:"name"`

	// Service that receives the app's traffic, in the HTTPScaledObject's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z]([-a-z0-9]*[a-z0-9])?$')`,message="scaleTargetRef.service must be the name of the app's Service: a non-empty lowercase DNS label"
	Service string `json:"service"`

	// Port of the Service to send traffic to. Set this or portName.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// PortName of the Service port to send traffic to. Set this or port.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="portName must be a Service port name (lowercase letters, digits and -)"
	PortName *string `json:"portName,omitempty"`
}

// ReplicaBounds bounds the replica count the autoscaler may choose.
type ReplicaBounds struct {
	// Min replicas. 0 lets the app scale to zero when idle.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	Min *int32 `json:"min,omitempty"`

	// Max replicas.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	Max *int32 `json:"max,omitempty"`
}

// Replica bounds when spec.replicas leaves them out (the API defaults above; objects read without
// defaulting, e.g. in the webhook, get the same values through Bounds).
const (
	DefaultMinReplicas int32 = 0
	DefaultMaxReplicas int32 = 100
)

// DefaultFleet is the fleet of objects that name none, and of an install that sets no fleet.
const DefaultFleet = "default"

// FleetName returns the fleet that serves the object: Fleet, or DefaultFleet when it is empty.
func (s *HTTPScaledObjectSpec) FleetName() string {
	if s.Fleet == "" {
		return DefaultFleet
	}
	return s.Fleet
}

// Bounds returns the spec's min and max replicas, defaults filled in.
func (s *HTTPScaledObjectSpec) Bounds() (minReplicas, maxReplicas int32) {
	minReplicas, maxReplicas = DefaultMinReplicas, DefaultMaxReplicas
	if r := s.Replicas; r != nil {
		if r.Min != nil {
			minReplicas = *r.Min
		}
		if r.Max != nil {
			maxReplicas = *r.Max
		}
	}
	return minReplicas, maxReplicas
}

// ScalingMetric chooses the per-replica targets the autoscaler tracks.
// +kubebuilder:validation:XValidation:rule="has(self.concurrency) || has(self.requestRate)",message="scalingMetric needs at least one of concurrency or requestRate"
type ScalingMetric struct {
	// Concurrency targets in-flight plus held requests per replica.
	// +optional
	Concurrency *ConcurrencyMetric `json:"concurrency,omitempty"`

	// RequestRate targets requests per second per replica, averaged over a sliding window.
	// +optional
	RequestRate *RequestRateMetric `json:"requestRate,omitempty"`
}

// ConcurrencyMetric targets concurrent requests per replica.
type ConcurrencyMetric struct {
	// TargetValue is the number of concurrent requests one replica should handle.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	TargetValue int32 `json:"targetValue,omitempty"`
}

// RequestRateMetric targets a request rate per replica.
// +kubebuilder:validation:XValidation:rule=`!has(self.window) || !has(self.granularity) || !self.window.matches(r'^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$') || !self.granularity.matches(r'^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$') || duration(self.granularity) <= duration(self.window)`,message="requestRate.granularity must not be longer than requestRate.window"
type RequestRateMetric struct {
	// TargetValue is the requests per second one replica should handle.
	// +kubebuilder:validation:Minimum=1
	TargetValue int32 `json:"targetValue"`

	// Window is the sliding window the rate is averaged over.
	// +optional
	// +kubebuilder:default="1m"
	Window Duration `json:"window,omitempty"`

	// Granularity is the size of the buckets the window is made of.
	// +optional
	// +kubebuilder:default="1s"
	Granularity Duration `json:"granularity,omitempty"`
}

// Timeouts for requests to one app. Each unset field uses the interceptor's global default.
type Timeouts struct {
	// Readiness is how long a request may be held while the app has no ready replica before it is
	// answered by the fallback, the placeholder, or 504.
	// +optional
	Readiness *Duration `json:"readiness,omitempty"`

	// Request bounds the whole request once forwarded, including the response body (unset: the
	// interceptor's --request-timeout, which is none by default; a positive duration, 0 is rejected).
	// WebSockets are not bounded by it once upgraded.
	// +optional
	Request *Duration `json:"request,omitempty"`

	// ResponseHeader bounds the wait for the app's response headers once the request is forwarded.
	// +optional
	ResponseHeader *Duration `json:"responseHeader,omitempty"`
}

// ColdStart controls requests that arrive while the app has no ready replica.
type ColdStart struct {
	// QueueLimit caps how many requests may be held for this app at once; more are answered 503 with
	// Retry-After. Unset uses the interceptor's global default.
	// +optional
	// +kubebuilder:validation:Minimum=1
	QueueLimit *int32 `json:"queueLimit,omitempty"`

	// Fallback is a Service that answers held requests once the readiness timeout expires.
	// +optional
	Fallback *FallbackService `json:"fallback,omitempty"`

	// Placeholder is a static response for held requests once the readiness timeout expires (used when no
	// fallback is set).
	// +optional
	Placeholder *Placeholder `json:"placeholder,omitempty"`

	// WaitingPage answers browser navigations (GET or HEAD accepting text/html) to the app at zero at
	// once with a page that reloads itself until the app is up, instead of holding them; the request
	// still wakes the app. Other requests are held as usual.
	// +optional
	WaitingPage *WaitingPage `json:"waitingPage,omitempty"`

	// Probe says how interceptors find out that a starting pod can serve, so that held requests are
	// forwarded the moment it can rather than at the kubelet's next readiness probe. Unset runs the
	// pods' own readiness probes. See ColdStartProbe.
	// +optional
	Probe *ColdStartProbe `json:"probe,omitempty"`
}

// WaitingPage is the page browsers get while the app wakes: status 503 with Retry-After and a
// Refresh header, never cached.
type WaitingPage struct {
	// Enabled turns the waiting page on.
	Enabled bool `json:"enabled"`

	// RefreshSeconds is how long the browser waits before asking again.
	// +optional
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60
	RefreshSeconds int32 `json:"refreshSeconds,omitempty"`

	// HTML replaces the built-in page (served as text/html; charset=utf-8). The Refresh header reloads
	// it whatever it contains. At most 16384 characters.
	// +optional
	// +kubebuilder:validation:XValidation:rule=`self.size() <= 16384`,message="waitingPage.html is too long: keep the page to 16384 characters at most (inline small styles, link larger assets), or leave html empty for the built-in page"
	HTML string `json:"html,omitempty"`
}

// FallbackService is a Service in the HTTPScaledObject's namespace that serves requests the app could
// not serve in time.
// +kubebuilder:validation:XValidation:rule="has(self.port) != has(self.portName)",message="set exactly one of fallback.port or fallback.portName"
type FallbackService struct {
	// Service name.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z]([-a-z0-9]*[a-z0-9])?$')`,message="fallback.service must be the name of a Service: a non-empty lowercase DNS label"
	Service string `json:"service"`

	// Port of the Service. Set this or portName.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port *int32 `json:"port,omitempty"`

	// PortName of the Service port. Set this or port.
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="portName must be a Service port name (lowercase letters, digits and -)"
	PortName *string `json:"portName,omitempty"`
}

// Placeholder is a static response served when the app is not ready in time.
type Placeholder struct {
	// StatusCode of the response.
	// +optional
	// +kubebuilder:default=503
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=599
	StatusCode int32 `json:"statusCode,omitempty"`

	// Headers added to the response (values of at most 4096 characters).
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.matches(r'^[A-Za-z0-9!#$%&*+.^_|~-]+$') && k.size() <= 256)`,message="placeholder header names must be HTTP tokens such as Content-Type"
	// +kubebuilder:validation:XValidation:rule=`self.all(k, self[k].size() <= 4096)`,message="placeholder header values are at most 4096 characters"
	Headers map[string]string `json:"headers,omitempty"`

	// Body of the response.
	// +optional
	// +kubebuilder:validation:MaxLength=65536
	Body string `json:"body,omitempty"`
}

// StaticRoute is a path prefix answered without the app, by a fixed response or a fixed Service.
// +kubebuilder:validation:XValidation:rule="has(self.response) != has(self.service)",message="a static route needs exactly one of response (answered by the interceptor) or service (forwarded to a fixed Service)"
type StaticRoute struct {
	// PathPrefix the route answers, matched on whole segments like pathPrefixes.
	PathPrefix PathPrefix `json:"pathPrefix"`

	// Response is answered by the interceptor itself.
	// +optional
	Response *StaticResponse `json:"response,omitempty"`

	// Service receives the requests, through its cluster address (it is not scaled by this object).
	// +optional
	Service *StaticService `json:"service,omitempty"`
}

// StaticResponse is a fixed answer.
type StaticResponse struct {
	// StatusCode of the response.
	// +optional
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=200
	// +kubebuilder:validation:Maximum=599
	StatusCode int32 `json:"statusCode,omitempty"`

	// Headers added to the response (values of at most 4096 characters).
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	// +kubebuilder:validation:XValidation:rule=`self.all(k, k.matches(r'^[A-Za-z0-9!#$%&*+.^_|~-]+$') && k.size() <= 256)`,message="static response header names must be HTTP tokens such as Content-Type"
	// +kubebuilder:validation:XValidation:rule=`self.all(k, self[k].size() <= 4096)`,message="static response header values are at most 4096 characters"
	Headers map[string]string `json:"headers,omitempty"`

	// Body of the response.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Body string `json:"body,omitempty"`
}

// StaticService is a Service in the HTTPScaledObject's namespace, reached through its cluster address.
type StaticService struct {
	// Name of the Service.
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z]([-a-z0-9]*[a-z0-9])?$')`,message="staticRoutes service.name must be the name of a Service: a non-empty lowercase DNS label"
	Name string `json:"name"`

	// Port of the Service.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// HTTPScaledObjectStatus reports what the operator made of the object.
type HTTPScaledObjectStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Valid, Conflict, RoutingPropagated, ScaledObjectReady, TLSReady when spec.tls
	// is set, and Serving in Serve mode.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// TargetWorkload is the resolved workload, as Kind/name.
	// +optional
	TargetWorkload string `json:"targetWorkload,omitempty"`

	// TargetService is the resolved Service and target port, as name:port.
	// +optional
	TargetService string `json:"targetService,omitempty"`

	// Routing reports which interceptors serve a routing table containing this object.
	// +optional
	Routing *RoutingStatus `json:"routing,omitempty"`

	// Schedules reports each schedule rule's next execution and recent history.
	// +optional
	// +listType=map
	// +listMapKey=ruleName
	Schedules []ScheduleStatus `json:"schedules,omitempty"`

	// LastColdStart breaks the app's latest cold start down step by step (see ColdStartStatus).
	// +optional
	LastColdStart *ColdStartStatus `json:"lastColdStart,omitempty"`
}

// RoutingStatus proves (or disproves) that the interceptor fleet routes this object's current spec.
type RoutingStatus struct {
	// TableVersion is the routing-table version that first contained this object's current generation.
	// +optional
	TableVersion string `json:"tableVersion,omitempty"`

	// InterceptorsReady counts the ready interceptor replicas that serve TableVersion or a later table
	// that still contains this generation.
	InterceptorsReady int32 `json:"interceptorsReady"`

	// InterceptorsTotal counts the ready interceptor replicas.
	InterceptorsTotal int32 `json:"interceptorsTotal"`
}

// HTTPScaledObject routes HTTP traffic for one app through the interceptor fleet and scales the app's
// workload on that traffic, down to zero.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=hso,categories=httpscale
// +kubebuilder:printcolumn:name="Hosts",type=string,JSONPath=`.spec.hosts`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.scaleTargetRef.name`
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.replicas.min`
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.replicas.max`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Propagated",type=string,JSONPath=`.status.conditions[?(@.type=="RoutingPropagated")].status`
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Path",type=string,JSONPath=`.status.conditions[?(@.type=="Serving")].reason`
// +kubebuilder:printcolumn:name="Fleet",type=string,priority=1,JSONPath=`.spec.fleet`
// +kubebuilder:printcolumn:name="Interceptors",type=integer,priority=1,JSONPath=`.status.routing.interceptorsReady`
// +kubebuilder:printcolumn:name="Table",type=string,priority=1,JSONPath=`.status.routing.tableVersion`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type HTTPScaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   HTTPScaledObjectSpec   `json:"spec"`
	Status HTTPScaledObjectStatus `json:"status,omitempty"`
}

// HTTPScaledObjectList is a list of HTTPScaledObjects.
// +kubebuilder:object:root=true
type HTTPScaledObjectList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []HTTPScaledObject `json:"items"`
}

func init() {
	SchemeBuilder.Register(&HTTPScaledObject{}, &HTTPScaledObjectList{})
}
