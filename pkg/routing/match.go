package routing

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
)

// linearPrefixLimit is the number of distinct non-root path prefixes on one host up to which Match
// scans them in order (a few string comparisons) instead of looking up each segment boundary of the
// request path in a map. Both give the same answer; this only picks the cheaper walk.
const linearPrefixLimit = 8

// hostRoutes are the routes of one host level ("shop.example.com", "*.example.com" or "*").
type hostRoutes struct {
	// ns is the namespace of every entry routing this host, "" when they are of several (only in
	// tables written before hosts belonged to one namespace).
	ns       string
	root     *prefixRoutes            // routes for "/" (and entries without path prefixes)
	linear   []prefixRoutes           // non-root prefixes, longest first; set when few
	byPrefix map[string]*prefixRoutes // non-root prefixes; set when many
}

// prefixRoutes are the routes of one host level and path prefix, most header matches first, then in
// entry key order.
type prefixRoutes struct {
	prefix string
	rules  []rule
}

type rule struct {
	headers []headerMatch
	entry   *Entry
	kind    RouteKind
	static  *StaticRoute // for RouteStatic
	rewrite *PathRewrite // nil: forwarded unrewritten
}

// Header is what Match reads of a request's headers: the values of one header, looked up by its
// canonical MIME name ("X-Tenant"). http.Header implements it; the interceptor's HTTP/1.1 fast path
// implements it over the request's raw header lines so that it needs no header map.
type Header interface {
	Values(key string) []string
}

var _ Header = http.Header(nil)

type headerMatch struct {
	name     string // canonical MIME form, as net/http stores request headers
	value    string
	hasValue bool
}

func compileHeaders(hs []HeaderMatch) []headerMatch {
	if len(hs) == 0 {
		return nil
	}
	out := make([]headerMatch, len(hs))
	for i, h := range hs {
		out[i] = headerMatch{name: h.Name}
		if h.Value != nil {
			out[i].value, out[i].hasValue = *h.Value, true
		}
	}
	return out
}

func newHostRoutes(byPrefix map[string][]rule) *hostRoutes {
	hr := &hostRoutes{}
	var others []prefixRoutes
	for prefix, rules := range byPrefix {
		// Rules were appended in key order; a stable sort keeps it among equal header counts.
		slices.SortStableFunc(rules, func(a, b rule) int { return cmp.Compare(len(b.headers), len(a.headers)) })
		pr := prefixRoutes{prefix: prefix, rules: rules}
		if prefix == "/" {
			hr.root = &pr
			continue
		}
		others = append(others, pr)
	}
	if len(others) <= linearPrefixLimit {
		slices.SortFunc(others, func(a, b prefixRoutes) int {
			return cmp.Or(cmp.Compare(len(b.prefix), len(a.prefix)), strings.Compare(a.prefix, b.prefix))
		})
		hr.linear = others
		return hr
	}
	hr.byPrefix = make(map[string]*prefixRoutes, len(others))
	for i := range others {
		hr.byPrefix[others[i].prefix] = &others[i]
	}
	return hr
}

// Match returns the entry that serves a request, or false if none does.
//
// host is the request's Host (r.Host): it is matched case-insensitively, without its :port and
// trailing dot; IP literals (including bracketed IPv6 such as "[::1]:8080") match only "*" routes.
// path is the decoded request path (r.URL.Path), matched as given (Match does not clean it); "" is
// treated as "/". header is the request header with canonical keys, as net/http provides it.
//
// Precedence: the exact host, then wildcards from the most specific (*.b.example.com before
// *.example.com for a.b.example.com), then "*". Within one host level the longest matching path prefix
// wins, then the route with the most header matches, then the entry first in namespace/name order. If
// nothing on a level matches the path and headers, the next less specific level is tried, but only a
// level of the same namespace as the most specific level that routes the host: a request for a host
// one namespace routes never reaches another namespace's wildcard or catch-all because of a path or
// header that namespace does not route (the host is one namespace's, see docs/security.md). An
// entry's ignored paths and static routes are path prefixes like the others (see MatchRoute).
//
// Cost: independent of the number of entries — one map lookup for the exact host, one per remaining
// label for wildcards (skipped when the table has none), then a walk over that host's routes for
// the request's path segments. No allocation unless host contains upper-case letters. Safe for
// concurrent use. The returned entry is shared and must not be modified.
func (t *Table) Match(host, path string, header Header) (*Entry, bool) {
	r := t.match(host, path, header)
	if r == nil {
		return nil, false
	}
	return r.entry, true
}

// MatchRoute is Match that also tells which kind of route matched (the app's path prefix, an ignored
// path or a static route; see RouteKind). Ignored paths and static routes are routes like path
// prefixes: the longest matching prefix wins, whatever its kind. Same cost as Match.
func (t *Table) MatchRoute(host, path string, header Header) (Route, bool) {
	r := t.match(host, path, header)
	if r == nil {
		return Route{}, false
	}
	return Route{Entry: r.entry, Kind: r.kind, Static: r.static, Rewrite: r.rewrite}, true
}

func (t *Table) match(host, path string, header Header) *rule {
	if t == nil {
		return nil
	}
	if path == "" {
		path = "/"
	}
	name, ipLiteral := normalizeHost(host)
	// The first level that exists owns the host: a less specific level is tried only when it is of
	// the same namespace (or the owner's level is of several, in an old table).
	owner, owned := "", false
	serves := func(hr *hostRoutes) bool { return !owned || owner == "" || hr.ns == owner }
	if !ipLiteral {
		if hr, _ := t.exact.Get(name); hr != nil {
			owner, owned = hr.ns, true
			if r := hr.match(path, header); r != nil {
				return r
			}
		}
		if t.wildcard.Len() > 0 {
			// Each suffix after a dot is a wildcard's base; the first one is the most specific. The
			// leftmost label must be non-empty: "*.example.com" does not match ".example.com".
			for i := strings.IndexByte(name, '.'); i > 0; {
				if hr, _ := t.wildcard.Get(name[i+1:]); hr != nil && serves(hr) {
					if !owned {
						owner, owned = hr.ns, true
					}
					if r := hr.match(path, header); r != nil {
						return r
					}
				}
				next := strings.IndexByte(name[i+1:], '.')
				if next < 0 {
					break
				}
				i += 1 + next
			}
		}
	}
	if t.any != nil && serves(t.any) {
		if r := t.any.match(path, header); r != nil {
			return r
		}
	}
	return nil
}

// HostNamespace returns the namespace of the entries that route host (its most specific level:
// exact, wildcard or "*"), whatever the path and headers; ok is false when no entry routes it.
// Namespace is "" when entries of several namespaces route it (tables written before hosts belonged
// to one namespace). host is normalized as in Match. Cost: as Match's host lookup.
func (t *Table) HostNamespace(host string) (namespace string, ok bool) {
	if t == nil {
		return "", false
	}
	name, ipLiteral := normalizeHost(host)
	if !ipLiteral {
		if hr, _ := t.exact.Get(name); hr != nil {
			return hr.ns, true
		}
		for _, base := range parentDomains(name) {
			if hr, _ := t.wildcard.Get(base); hr != nil {
				return hr.ns, true
			}
		}
	}
	if t.any != nil {
		return t.any.ns, true
	}
	return "", false
}

func (hr *hostRoutes) match(path string, header Header) *rule {
	if hr.byPrefix == nil {
		for i := range hr.linear {
			pr := &hr.linear[i]
			if prefixMatches(pr.prefix, path) {
				if e := pr.match(header); e != nil {
					return e
				}
			}
		}
	} else {
		// Try path itself, then path cut before each "/", longest first: exactly the prefixes that
		// match on a segment boundary. Stored prefixes never end in "/", so those cuts are skipped.
		for end := len(path); end > 0; {
			if path[end-1] != '/' {
				if pr := hr.byPrefix[path[:end]]; pr != nil {
					if e := pr.match(header); e != nil {
						return e
					}
				}
			}
			end = strings.LastIndexByte(path[:end], '/')
			if end < 0 {
				// A path without a leading "/" (e.g. "*" for OPTIONS) can still match the root.
				break
			}
		}
	}
	if hr.root != nil {
		return hr.root.match(header)
	}
	return nil
}

func (pr *prefixRoutes) match(header Header) *rule {
	for i := range pr.rules {
		if headersMatch(pr.rules[i].headers, header) {
			return &pr.rules[i]
		}
	}
	return nil
}

// prefixMatches reports whether prefix (not "/", no trailing "/") matches path on a segment boundary.
func prefixMatches(prefix, path string) bool {
	return strings.HasPrefix(path, prefix) && (len(path) == len(prefix) || path[len(prefix)] == '/')
}

func headersMatch(want []headerMatch, header Header) bool {
	if len(want) > 0 && header == nil {
		return false
	}
	for i := range want {
		values := header.Values(want[i].name)
		if len(values) == 0 {
			return false
		}
		if want[i].hasValue && !slices.Contains(values, want[i].value) {
			return false
		}
	}
	return true
}

// normalizeHost strips a port, IPv6 brackets and one trailing dot and lower-cases the rest. It
// allocates only when host contains upper-case letters. ipLiteral is true for IPv6 literals, which
// no host route can match.
func normalizeHost(host string) (name string, ipLiteral bool) {
	if strings.HasPrefix(host, "[") {
		if end := strings.IndexByte(host, ']'); end > 0 {
			host = host[1:end]
		}
		return lowerASCII(host), true
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		if strings.IndexByte(host[:i], ':') >= 0 {
			return lowerASCII(host), true // unbracketed IPv6 such as "::1"; there is no port
		}
		host = host[:i]
	}
	host = strings.TrimSuffix(host, ".")
	return lowerASCII(host), false
}

func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
