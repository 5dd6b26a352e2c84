package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/sessioncookie"
)

// Session persistence (Entry.Session): the response to a client's request carries a cookie whose
// value names the endpoint that answered it (pkg/sessioncookie), and a later request of that client
// goes to the endpoint its cookie names when that endpoint is one of the app's ready endpoints right
// now and not marked bad. Nothing is kept per client: the app's endpoint set maps every valid value
// back to its endpoint (sessionIndex, computed once per set and key set), and a value that is not
// in it (forged, altered, another app's, a gone pod's) is simply not found, so it can only ever
// lead to an endpoint the request could have been balanced to anyway. The choice happens in Pick
// and the cookie is added in Responded, on every engine path.

// maxSessionValues is how many values of the session cookie a request may have looked at: a
// browser sends one per Path it holds (a host's "/" and "/shop" cookies of the same name).
const maxSessionValues = 2

// sessionCookie is an app's Set-Cookie, computed once per app state.
type sessionCookie struct {
	name  string
	attrs string // "; Path=/shop; Max-Age=3600; HttpOnly; SameSite=Lax"
}

func newSessionCookie(e *routing.Entry) *sessionCookie {
	s := e.Session
	path := e.CookiePath()
	if strings.ContainsAny(path, ";,") {
		path = "/" // a ";" would end the attribute (path prefixes may hold one)
	}
	attrs := "; Path=" + path
	if s.MaxAge > 0 {
		attrs += "; Max-Age=" + strconv.FormatInt(s.MaxAge, 10)
	}
	return &sessionCookie{name: s.Cookie, attrs: attrs + "; HttpOnly; SameSite=Lax"}
}

// header returns the Set-Cookie value naming the endpoint whose value is v; Secure when the client
// reached the fleet over HTTPS (otherwise a browser would drop the cookie).
func (s *sessionCookie) header(v string, secure bool) string {
	if secure {
		return s.name + "=" + v + s.attrs + "; Secure"
	}
	return s.name + "=" + v + s.attrs
}

// readSession keeps the request's values of the app's session cookie (at most maxSessionValues,
// each well-formed; see sessioncookie.Find) and whether it came over HTTPS to a proxy in front
// (X-Forwarded-Proto; a request to the TLS port is noted by Rewrite). A client that claims https
// itself only makes its own cookie Secure.
func (x *exchange) readSession(h engine.Header) {
	if h == nil {
		return
	}
	n := 0
	sessioncookie.Find(h.Values("Cookie"), x.app.session.name, maxSessionValues, func(v string) bool {
		x.cookies[n] = v
		n++
		return n == maxSessionValues
	})
	if p := h.Values("X-Forwarded-Proto"); len(p) > 0 {
		x.secure = strings.EqualFold(strings.TrimSpace(p[0]), "https")
	}
}

// sessionIndex maps the session cookie values of one endpoint set of one app, under every key, to
// the endpoints (indexes into zoneView.all), and holds each endpoint's value under the signing key.
// Immutable.
type sessionIndex struct {
	keys    *sessioncookie.Keys
	app     string
	byValue map[string]sessionHit
	signed  map[string]string // endpoint address → value under the signing key
}

type sessionHit struct {
	i       int
	signing bool // the value is the signing key's: the client's cookie needs no renewal
}

// sessions returns the session index of v for app under keys, computed on the first request that
// needs it after the endpoint set (or the keys) changed: one HMAC per endpoint and key.
func (v *zoneView) sessions(keys *sessioncookie.Keys, app string) *sessionIndex {
	if s := v.session.Load(); s != nil && s.keys == keys && s.app == app {
		return s
	}
	s := &sessionIndex{keys: keys, app: app,
		byValue: make(map[string]sessionHit, len(v.all)*keys.Len()), signed: make(map[string]string, len(v.all))}
	for k := keys.Len() - 1; k >= 0; k-- { // the signing key last: its values win a (2^-128) tie
		for i := range v.all {
			val := keys.Value(k, app, v.all[i].addr)
			s.byValue[val] = sessionHit{i: i, signing: k == 0}
			if k == 0 {
				s.signed[v.all[i].addr] = val
			}
		}
	}
	v.session.Store(s)
	return s
}

// sticky returns the endpoint of view that the request's session cookie names, when it is ready
// (in view) and not marked bad; nil sends the request to the balanced choice.
func (x *exchange) sticky(view *zoneView, now time.Time) *candidate {
	if x.cookies[0] == "" || x.backend != x.app.target {
		return nil
	}
	idx := view.sessions(x.p.opts.SessionKeys(), x.app.key)
	for _, v := range x.cookies {
		if v == "" {
			break
		}
		hit, ok := idx.byValue[v]
		if !ok {
			continue
		}
		c := &view.all[hit.i]
		if x.backend.isBad(c.addr, now) {
			continue // it refused connections moments ago: balance, and re-pin to the one that answers
		}
		if hit.signing {
			x.pinned = c.addr
		}
		return c
	}
	return nil
}

// setSessionCookie adds the cookie naming the endpoint that answered, unless the request's own
// cookie already named it under the signing key. Only the app's own routes get one (not its
// ignored paths, which are a load balancer's health checks), and only when a pod was chosen.
func (x *exchange) setSessionCookie(h http.Header) {
	s, c := x.app.session, x.cand
	if s == nil || c == nil || c.addr == x.pinned || x.kind != routing.RouteApp || x.backend != x.app.target || x.direct() {
		return
	}
	view := x.backend.candidates(x.set, x.p.appZone(x.app))
	if v, ok := view.sessions(x.p.opts.SessionKeys(), x.app.key).signed[c.addr]; ok {
		h.Add("Set-Cookie", s.header(v, x.secure))
	}
}
