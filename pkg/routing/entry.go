// Package routing is the interceptor's routing table: immutable snapshots matched per request, and their ConfigMap codec.
package routing

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/httpscale/httpscale/pkg/appkey"
)

// Protocols an Entry or Backend can speak to its upstream.
const (
	// ProtocolHTTP is HTTP/1.1 (the default when a Service port has no appProtocol).
	ProtocolHTTP = "http"
	// ProtocolH2C is cleartext HTTP/2 with prior knowledge (appProtocol kubernetes.io/h2c).
	ProtocolH2C = "h2c"
)

// ErrInvalidEntry is wrapped by every error that rejects an Entry (Validate, NewTable).
var ErrInvalidEntry = errors.New("invalid routing entry")

// Entry is everything the interceptor needs to route, hold and forward requests for one app, without
// reading any other object. The operator builds one Entry per HTTPScaledObject; the JSON tags are the
// stored format and must stay stable.
//
// An Entry obtained from a Table (Match, Lookup) is shared by every goroutine using that Table and must
// not be modified; use Clone for a private copy.
type Entry struct {
	// Namespace and Name of the HTTPScaledObject; Key() joins them.
	Namespace string `json:"ns"`
	Name      string `json:"n"`
	// Generation of the HTTPScaledObject this entry was built from.
	Generation int64 `json:"g,omitempty"`

	// Hosts are lowercase exact names (shop.example.com), leftmost-label wildcards (*.example.com) or *.
	Hosts []string `json:"h"`
	// PathPrefixes restrict the entry to these prefixes, matched on whole segments. Empty means every
	// path, exactly like "/". A trailing "/" is insignificant ("/api/" is stored as "/api").
	PathPrefixes []string `json:"p,omitempty"`
	// Headers must all match. Names are case-insensitive (stored in canonical MIME form).
	Headers []HeaderMatch `json:"hd,omitempty"`
	// Ignored are path prefixes (stored like PathPrefixes, each inside one of them) routed to the app
	// on its hosts and headers whose requests never count and never wake it (RouteIgnored).
	Ignored []string `json:"ig,omitempty"`
	// Static are path prefixes on the entry's hosts and headers answered without the app
	// (RouteStatic), sorted by prefix.
	Static []StaticRoute `json:"st,omitempty"`

	// Service, in Namespace, that receives the traffic.
	Service string `json:"svc"`
	// Port is the Service port number; it must be set.
	Port int32 `json:"port"`
	// PortName is the Service port's name, used to pick the EndpointSlice port; may be empty.
	PortName string `json:"pn,omitempty"`
	// TargetPort is the numeric target port when the operator could resolve it; 0 when unknown.
	TargetPort int32 `json:"tp,omitempty"`
	// Protocol is ProtocolHTTP or ProtocolH2C; empty is stored as ProtocolHTTP.
	Protocol string `json:"proto,omitempty"`
	// ClusterIP is the Service's cluster IP as the operator read it from the API; forwarding through
	// the Service's address (ViaService) dials it. Empty in tables of operators that predate it (the
	// interceptor then dials the Service's cluster DNS name) and for a headless Service.
	ClusterIP string `json:"ip,omitempty"`

	// Timeouts override the interceptor's defaults; zero fields use the default.
	Timeouts Timeouts `json:"to,omitzero"`
	// ColdStart controls requests held while the app has no ready endpoint.
	ColdStart ColdStart `json:"cs,omitzero"`

	// ZoneAware overrides the interceptor's global zone-aware routing setting when non-nil.
	ZoneAware *bool `json:"za,omitempty"`
	// ViaService forwards through the Service's ClusterIP instead of to pod IPs.
	ViaService bool `json:"vs,omitempty"`

	// TLSSecret names a kubernetes.io/tls Secret in Namespace whose certificate the interceptors
	// present for Hosts on their TLS port; empty means none (spec.tls unset).
	TLSSecret string `json:"tls,omitempty"`

	// Rewrites replace the matched path prefix before a request is forwarded, one per path prefix
	// at most (spec.pathRewrites). Readers that predate them ignore the key and forward unrewritten.
	Rewrites []PathRewrite `json:"rw,omitempty"`
	// Session keeps a client on one endpoint with a cookie (spec.sessionPersistence); nil: off.
	// Readers that predate it ignore the key.
	Session *Session `json:"ss,omitempty"`
	// ServePort, when set, is the port the interceptors listen on for this app alone (Serve mode):
	// the operator points the app's own Service at it while the app is at zero, and every request
	// arriving there is routed to this entry, whatever its Host (MatchPath). Zero: none. Readers that
	// predate it ignore the key and serve no such port.
	ServePort int32 `json:"sp,omitempty"`
}

// HeaderMatch matches one request header.
type HeaderMatch struct {
	// Name is matched case-insensitively.
	Name string `json:"n"`
	// Value must equal one of the header's values exactly; nil only requires the header to be present.
	Value *string `json:"v,omitempty"`
}

// StaticRoute is a path prefix answered without the app: by Response, or forwarded to Backend
// through its Service address. Exactly one of them is set.
type StaticRoute struct {
	PathPrefix string       `json:"p"`
	Response   *Placeholder `json:"r,omitempty"`
	Backend    *Backend     `json:"b,omitempty"`
}

// Backend is a Service port that requests can be forwarded to.
type Backend struct {
	Service    string `json:"svc"`
	Port       int32  `json:"port"`
	PortName   string `json:"pn,omitempty"`
	TargetPort int32  `json:"tp,omitempty"`
	Protocol   string `json:"proto,omitempty"`
	// ClusterIP is the Service's cluster IP, read from the API by the operator: the address the
	// interceptor dials when it forwards through the Service (a static route, a fallback without
	// ready endpoints, ViaService), so it never resolves a name a tenant chose. Empty in tables of
	// operators that predate it (the Service's cluster DNS name is dialled instead).
	ClusterIP string `json:"ip,omitempty"`
}

// Addr returns the address forwarding through the Service dials: ClusterIP:Port, or, when the
// operator recorded no cluster IP, the Service's cluster DNS name in namespace ns.
func (b *Backend) Addr(ns, clusterDomain string) string {
	port := strconv.Itoa(int(b.Port))
	if b.ClusterIP != "" {
		return net.JoinHostPort(b.ClusterIP, port)
	}
	return net.JoinHostPort(b.Service+"."+ns+".svc."+clusterDomain, port)
}

// Timeouts for one app. Zero means "use the interceptor's default". They are stored as Go duration
// strings ("1.5s"), which round-trip exactly.
type Timeouts struct {
	// Readiness bounds how long a request is held waiting for a ready endpoint.
	Readiness time.Duration
	// Request bounds the whole forwarded request, including the response body.
	Request time.Duration
	// ResponseHeader bounds the wait for response headers once the request is forwarded.
	ResponseHeader time.Duration
}

// ColdStart controls requests that arrive while the app has no ready endpoint.
type ColdStart struct {
	// QueueLimit caps the requests held at once; 0 uses the interceptor's default.
	QueueLimit int32 `json:"ql,omitempty"`
	// Fallback answers held requests once the readiness timeout expires.
	Fallback *Backend `json:"fb,omitempty"`
	// Placeholder is a static answer for held requests once the readiness timeout expires (used when
	// Fallback is nil).
	Placeholder *Placeholder `json:"ph,omitempty"`
	// WaitingPage, when set, answers browser navigations at once while the app is cold instead of
	// holding them. Readers that predate it ignore the key and hold them.
	WaitingPage *WaitingPage `json:"wp,omitempty"`
	// Probe replaces the pods' own readiness probes as the interceptor's cold-start probe, or turns
	// cold-start probes off; nil probes with the pods' readiness probes. Readers that predate it
	// ignore the key.
	Probe *Probe `json:"pr,omitempty"`
}

// Probe is how an interceptor holding requests asks a starting pod whether it can serve: a GET of
// Path on Port (success: 200-399), or with TCP a connection to Port. Off turns probing off.
type Probe struct {
	Off  bool   `json:"off,omitempty"`
	TCP  bool   `json:"tcp,omitempty"`
	Port int32  `json:"port,omitempty"`
	Path string `json:"path,omitempty"`
}

// WaitingPage is the self-refreshing page browsers get while the app wakes.
type WaitingPage struct {
	// Refresh is the seconds between reloads; 0 uses DefaultWaitingPageRefresh.
	Refresh int32 `json:"rs,omitempty"`
	// HTML replaces the built-in page when not empty.
	HTML string `json:"html,omitempty"`
}

// DefaultWaitingPageRefresh is the reload interval of a waiting page that sets none, in seconds.
const DefaultWaitingPageRefresh = 2

// Placeholder is a static response.
type Placeholder struct {
	// StatusCode of the response; 0 lets the interceptor choose (503).
	StatusCode int32             `json:"code,omitempty"`
	Headers    map[string]string `json:"hd,omitempty"`
	Body       string            `json:"body,omitempty"`
}

// Key returns "namespace/name", the entry's identity in a Table.
func (e *Entry) Key() string { return appkey.New(e.Namespace, e.Name).String() }

// Target returns the entry's destination as a Backend, so callers can treat it and a fallback alike.
func (e *Entry) Target() Backend {
	return Backend{Service: e.Service, Port: e.Port, PortName: e.PortName, TargetPort: e.TargetPort, Protocol: e.Protocol, ClusterIP: e.ClusterIP}
}

// Clone returns a deep copy that shares no memory with e.
func (e *Entry) Clone() Entry {
	c := *e
	c.Hosts = slices.Clone(e.Hosts)
	c.PathPrefixes = slices.Clone(e.PathPrefixes)
	if e.Headers != nil {
		c.Headers = make([]HeaderMatch, len(e.Headers))
		for i, h := range e.Headers {
			c.Headers[i] = HeaderMatch{Name: h.Name, Value: clonePtr(h.Value)}
		}
	}
	c.Ignored = slices.Clone(e.Ignored)
	if e.Static != nil {
		c.Static = make([]StaticRoute, len(e.Static))
		for i, sr := range e.Static {
			c.Static[i] = StaticRoute{PathPrefix: sr.PathPrefix, Response: sr.Response.clone(), Backend: clonePtr(sr.Backend)}
		}
	}
	c.ZoneAware = clonePtr(e.ZoneAware)
	c.ColdStart.Fallback = clonePtr(e.ColdStart.Fallback)
	c.ColdStart.Placeholder = e.ColdStart.Placeholder.clone()
	c.ColdStart.WaitingPage = clonePtr(e.ColdStart.WaitingPage)
	c.Rewrites = slices.Clone(e.Rewrites)
	c.Session = clonePtr(e.Session)
	c.ColdStart.Probe = clonePtr(e.ColdStart.Probe)
	return c
}

func (p *Placeholder) clone() *Placeholder {
	if p == nil {
		return nil
	}
	cp := *p
	cp.Headers = maps.Clone(p.Headers)
	return &cp
}

// Validate reports whether NewTable would accept e. The returned error wraps ErrInvalidEntry and names
// the offending field. Not for the hot path.
func (e *Entry) Validate() error {
	_, err := e.canonical()
	return err
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

type timeoutsJSON struct {
	Readiness      string `json:"ready,omitempty"`
	Request        string `json:"req,omitempty"`
	ResponseHeader string `json:"resp,omitempty"`
}

// MarshalJSON encodes the timeouts as duration strings, omitting zero ones.
func (t Timeouts) MarshalJSON() ([]byte, error) {
	return json.Marshal(timeoutsJSON{
		Readiness:      durationString(t.Readiness),
		Request:        durationString(t.Request),
		ResponseHeader: durationString(t.ResponseHeader),
	})
}

// UnmarshalJSON decodes what MarshalJSON produced.
func (t *Timeouts) UnmarshalJSON(b []byte) error {
	var j timeoutsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var out Timeouts
	for _, f := range []struct {
		name string
		s    string
		d    *time.Duration
	}{
		{"ready", j.Readiness, &out.Readiness},
		{"req", j.Request, &out.Request},
		{"resp", j.ResponseHeader, &out.ResponseHeader},
	} {
		if f.s == "" {
			continue
		}
		d, err := time.ParseDuration(f.s)
		if err != nil {
			return fmt.Errorf("timeout %s: %w", f.name, err)
		}
		*f.d = d
	}
	*t = out
	return nil
}

func durationString(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}
