package h1

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
)

// The forwarding header rules, the same on every path: the event loops apply them line by line
// while they write a request head (Request.Write), the net/http path to the forwarded request's
// header map (ForwardRequestHeaders, from the ReverseProxy's Rewrite):
//
//   - hop-by-hop headers (HopHeaders) and every header the Connection header names are removed
//     both ways; an inbound "Te: trailers" is passed on as "Te: trailers", an upgrade request's
//     as "Connection: Upgrade" and its Upgrade;
//   - header names containing "_" are not forwarded (nginx's underscores_in_headers off): a backend
//     that maps "_" to "-" would read "Transfer_Encoding" as Transfer-Encoding;
//   - Forwarded is dropped. What the other forwarding headers say depends on the peer (Peer: the
//     connection's address, TrustedProxies). From a trusted proxy (an ingress in front knows the
//     original client, host and scheme) X-Forwarded-For gets the peer's address appended to the
//     inbound chain, and X-Forwarded-Host, X-Forwarded-Proto, X-Forwarded-Port and X-Real-Ip are
//     passed on, the first two set to the request's Host and scheme when absent. From any other
//     peer (by default every peer) nothing it says is believed: X-Forwarded-For is the peer's
//     address alone, X-Forwarded-Host the Host the interceptor saw, X-Forwarded-Proto the scheme
//     it served (http, or https on the TLS port), and its X-Forwarded-Port and X-Real-Ip are
//     dropped;
//   - no User-Agent is added when the client sent none.

// HopHeaders are removed from forwarded requests and responses (RFC 9110 section 7.6.1), with
// every header the Connection header names; the same list httputil.ReverseProxy uses.
var HopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// IsHopHeader reports whether name is one of HopHeaders, case-insensitively.
func IsHopHeader[T string | []byte](name T) bool {
	for _, h := range HopHeaders {
		if EqualFold(name, h) {
			return true
		}
	}
	return false
}

// droppedRequestHeader reports whether a request header named name is never forwarded as it is
// (the headers the Connection header names aside): hop-by-hop, Forwarded, or a name with "_".
func droppedRequestHeader(name string) bool {
	return strings.IndexByte(name, '_') >= 0 || IsHopHeader(name) || EqualFold(name, "Forwarded")
}

// proxyHeader reports whether a request header named name is one that only a proxy sets (besides
// X-Forwarded-For): passed on from a trusted peer only.
func proxyHeader(name string) bool {
	return EqualFold(name, "X-Forwarded-Host") || EqualFold(name, "X-Forwarded-Proto") ||
		EqualFold(name, "X-Forwarded-Port") || EqualFold(name, "X-Real-Ip")
}

// ForwardRequestHeaders applies the rules to out, the header of the request going upstream, given
// in, the header the client sent (in may be out itself), the peer it came from and the request's
// Host. Applying it twice for an untrusted peer changes nothing (for a trusted one, its address
// would be appended twice).
func ForwardRequestHeaders(out, in http.Header, p Peer, host string) {
	var prior, xfHost, xfProto []string
	if p.Trusted {
		prior, xfHost, xfProto = in["X-Forwarded-For"], in["X-Forwarded-Host"], in["X-Forwarded-Proto"]
	}
	teTrailers := AnyHasToken(in["Te"], "trailers")
	upgrade := ""
	if AnyHasToken(in["Connection"], "upgrade") {
		upgrade = in.Get("Upgrade")
	}
	RemoveHopByHop(out)
	for k := range out {
		if droppedRequestHeader(k) || !p.Trusted && proxyHeader(k) {
			delete(out, k)
		}
	}
	if teTrailers {
		out["Te"] = []string{"trailers"}
	}
	if upgrade != "" { // the ReverseProxy relays the upgrade (a WebSocket); the event loops take none
		out["Connection"] = []string{"Upgrade"}
		out["Upgrade"] = []string{upgrade}
	}
	if p.IP != "" {
		var b strings.Builder
		forwardedFor(&b, prior, p.IP)
		out["X-Forwarded-For"] = []string{b.String()}
	} else {
		delete(out, "X-Forwarded-For")
	}
	if len(xfHost) > 0 {
		out["X-Forwarded-Host"] = xfHost
	} else {
		out["X-Forwarded-Host"] = []string{host}
	}
	if len(xfProto) > 0 {
		out["X-Forwarded-Proto"] = xfProto
	} else {
		out["X-Forwarded-Proto"] = []string{p.Scheme()}
	}
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = []string{""} // an empty value keeps Request.Write from adding Go's
	}
}

// Rewrite is the net/http path's ReverseProxy rewrite: the forwarded request keeps the client's
// Host and target (RoundTrip sets the endpoint), with the forwarding rules applied to its header
// for the peer it came from (trusted when in t; TLS when it arrived over TLS). The ReverseProxy
// removed the hop-by-hop headers and the inbound X-Forwarded-For/-Host/-Proto before it.
func (t TrustedProxies) Rewrite(pr *httputil.ProxyRequest) {
	pr.Out.URL.Scheme = "http"
	// The target goes out as the client sent it, as on the event loops (and as nginx passes it):
	// the ReverseProxy drops the query parameters it cannot parse ("a=1;b=2", "%zz") before
	// Rewrite, which would make the backend see another request than the client sent.
	pr.Out.URL.RawQuery = pr.In.URL.RawQuery
	ForwardRequestHeaders(pr.Out.Header, pr.In.Header, t.Peer(pr.In.RemoteAddr, pr.In.TLS != nil), pr.In.Host)
}

// SetURLTarget makes u, a forwarded request's URL, carry target (origin form, as the engine's
// Rewriter returns it) as the net/http path sends it: the path as written (RawPath, Path its
// decoding; url.URL.EscapedPath keeps it when it is a valid encoding, as Request.SetTarget requires
// of the event loops) and the query as written.
func SetURLTarget(u *url.URL, target string) {
	path, query, hasQuery := strings.Cut(target, "?")
	decoded, err := url.PathUnescape(path)
	if err != nil {
		decoded = path // a Rewriter returns a valid target; keep what it wrote
	}
	u.Path, u.RawPath, u.RawQuery, u.ForceQuery = decoded, path, query, hasQuery && query == ""
}

// forwardedFor writes the forwarded X-Forwarded-For value: the chain a trusted peer sent (prior,
// its header lines in order; nil from any other peer), then the peer's address.
func forwardedFor(w Writer, prior []string, ip string) {
	for _, v := range prior {
		_, _ = w.WriteString(v)
		_, _ = w.WriteString(", ")
	}
	_, _ = w.WriteString(ip)
}

// ClientIP is the address X-Forwarded-For gets for a client connected from remoteAddr (host:port):
// its host, or "" when it has none.
func ClientIP(remoteAddr string) string {
	ip, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return ""
	}
	return ip
}

// RemoveHopByHop removes the hop-by-hop headers of a request or response, and those its Connection
// header names.
func RemoveHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range HopHeaders {
		delete(h, k)
	}
}

// Replayable reports whether a request without a body may be sent again after its upstream
// connection failed before any response byte: only when a second copy cannot repeat a side effect
// (the upstream may have processed the first before closing), net/http's rule. idempotencyKey: the
// request has an Idempotency-Key or X-Idempotency-Key header.
func Replayable(method string, idempotencyKey bool) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return idempotencyKey
}

// MaxReplays is how often a replayable request is sent again on another connection after its
// pooled one turned out closed by the upstream (see Replayable).
const MaxReplays = 2
