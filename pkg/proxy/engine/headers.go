package engine

import (
	"net"
	"net/http"
	"strings"
)

// The forwarding header rules, for every path (the ReverseProxy's Rewrite, forwardDirect and the
// raw path's byte-level writer, which applies the same predicates while it copies header lines):
//
//   - hop-by-hop headers (hopHeaders) and every header the Connection header names are removed
//     both ways; an inbound "Te: trailers" is passed on as "Te: trailers", an upgrade request's
//     as "Connection: Upgrade" and its Upgrade;
//   - header names containing "_" are not forwarded (nginx's underscores_in_headers off): a backend
//     that maps "_" to "-" would read "Transfer_Encoding" as Transfer-Encoding;
//   - Forwarded is dropped; X-Forwarded-For gets the client's address appended to the inbound
//     chain; X-Forwarded-Host and X-Forwarded-Proto are passed on when present (an ingress in front
//     knows the original host and scheme), else set to the request's Host and "http";
//   - no User-Agent is added when the client sent none.

// hopHeaders are removed from forwarded requests and responses (RFC 9110 section 7.6.1), with
// every header the Connection header names; the same list httputil.ReverseProxy uses.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// droppedRequestHeader reports whether a request header named name is never forwarded as it is
// (the headers the Connection header names aside): hop-by-hop, Forwarded, or a name with "_".
func droppedRequestHeader(name string) bool {
	return strings.IndexByte(name, '_') >= 0 || isHopHeader(name) || asciiEqualFold(name, "Forwarded")
}

// isHopHeader reports whether name is one of hopHeaders, case-insensitively.
func isHopHeader(name string) bool {
	for _, h := range hopHeaders {
		if asciiEqualFold(name, h) {
			return true
		}
	}
	return false
}

// forwardRequestHeaders applies the rules to out, the header of the request going upstream, given
// in, the header the client sent (in may be out itself), the client's address and the request's
// Host. Applying it twice changes nothing.
func forwardRequestHeaders(out, in http.Header, remoteAddr, host string) {
	prior := in["X-Forwarded-For"]
	xfHost, xfProto := in["X-Forwarded-Host"], in["X-Forwarded-Proto"]
	teTrailers := anyHasToken(in["Te"], "trailers")
	upgrade := ""
	if anyHasToken(in["Connection"], "upgrade") {
		upgrade = in.Get("Upgrade")
	}
	removeHopByHop(out)
	for k := range out {
		if droppedRequestHeader(k) {
			delete(out, k)
		}
	}
	if teTrailers {
		out["Te"] = []string{"trailers"}
	}
	if upgrade != "" { // the ReverseProxy relays the upgrade (a WebSocket); the fast paths have none
		out["Connection"] = []string{"Upgrade"}
		out["Upgrade"] = []string{upgrade}
	}
	if ip, _, err := net.SplitHostPort(remoteAddr); err == nil {
		if len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		out["X-Forwarded-For"] = []string{ip}
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
		out["X-Forwarded-Proto"] = []string{"http"}
	}
	if _, ok := out["User-Agent"]; !ok {
		out["User-Agent"] = []string{""} // an empty value keeps Request.Write from adding Go's
	}
}

// removeHopByHop removes the hop-by-hop headers of a request or response.
func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}
