package proxy

import (
	"net/http"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Path rewrites (Entry.Rewrites): the route a request matched says whether its path prefix is
// replaced (routing.Route.Rewrite); the exchange computes the forwarded target from the client's
// (routing.PathRewrite.Target) and the engine sends it, with X-Forwarded-Prefix, on every path
// (engine.Rewriter). A rewritten route's request whose decoded path has a "." or ".." segment is
// answered 400 and never forwarded: "/shop/../admin" rewritten from "/shop" to "/internal" would
// reach the app as "/internal/../admin", which it resolves outside the subtree the rewrite names.

// HeaderForwardedPrefix tells the app the path prefix that was replaced (e.g. /shop), so that it
// can build links the client can follow.
const HeaderForwardedPrefix = "X-Forwarded-Prefix"

// Rewrite implements engine.Rewriter: the target with the matched prefix replaced, and the
// X-Forwarded-Prefix it replaced (a client's own is not passed on). Nothing for routes without a
// rewrite (one nil check). It also notes a request that came over TLS, whose session cookie is Secure.
func (x *exchange) Rewrite(r engine.Request) (string, http.Header) {
	if r.TLS {
		x.secure = true // a session cookie set on the answer is Secure (session.go)
	}
	rw := x.rewrite
	if rw == nil {
		return "", nil
	}
	return rw.Target(r.Target), x.app.prefixHeaders[rw]
}

var _ engine.Rewriter = (*exchange)(nil)

// prefixHeaders returns the header fields each rewrite sets on the forwarded request: the prefix
// it replaced; none for "/", whose removal leaves nothing to prefix (a client's is removed then too).
// They are shared by every request of the app and only read.
func prefixHeaders(rws []routing.PathRewrite) map[*routing.PathRewrite]http.Header {
	m := make(map[*routing.PathRewrite]http.Header, len(rws))
	for i := range rws {
		rw := &rws[i]
		if rw.Prefix == "/" {
			m[rw] = http.Header{HeaderForwardedPrefix: nil}
		} else {
			m[rw] = http.Header{HeaderForwardedPrefix: {rw.Prefix}}
		}
	}
	return m
}
