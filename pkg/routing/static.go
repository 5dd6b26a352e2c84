package routing

import (
	"cmp"
	"fmt"
	"iter"
	"slices"
	"strings"
)

// RouteKind says how a matched route's requests are served.
type RouteKind uint8

const (
	// RouteApp is one of the app's path prefixes: counted, held while the app is at zero, forwarded.
	RouteApp RouteKind = iota
	// RouteIgnored is one of the entry's ignored paths: forwarded while the app has a ready endpoint,
	// never counted, never held and never a reason to wake the app.
	RouteIgnored
	// RouteStatic is one of the entry's static routes: answered by its response or forwarded to its
	// backend whatever the app's state, never counted.
	RouteStatic
)

// Route is what Table.MatchRoute found: the entry, the kind of route matched and, for RouteStatic,
// the static route (shared with the table; must not be modified).
type Route struct {
	Entry  *Entry
	Kind   RouteKind
	Static *StaticRoute
	// Rewrite is the path rewrite the request is forwarded with (shared with the table); nil: none.
	Rewrite *PathRewrite
}

// entryRoute is one path prefix an entry claims on each of its hosts.
type entryRoute struct {
	prefix  string
	kind    RouteKind
	static  *StaticRoute
	rewrite *PathRewrite
}

// entryRoutes yields every path prefix the canonical entry e claims: its path prefixes ("/" when it
// has none) except those it also ignores, its ignored paths, then its static routes. Each prefix is
// yielded once (canonicalize rejects a static prefix that repeats another).
func entryRoutes(e *Entry) iter.Seq[entryRoute] {
	return func(yield func(entryRoute) bool) {
		for _, p := range routePrefixes(e) {
			if len(e.Ignored) > 0 && slices.Contains(e.Ignored, p) {
				continue // the ignored route takes the prefix
			}
			if !yield(entryRoute{prefix: p, kind: RouteApp, rewrite: rewriteFor(e, p, RouteApp)}) {
				return
			}
		}
		for _, p := range e.Ignored {
			if !yield(entryRoute{prefix: p, kind: RouteIgnored, rewrite: rewriteFor(e, p, RouteIgnored)}) {
				return
			}
		}
		for i := range e.Static {
			if !yield(entryRoute{prefix: e.Static[i].PathPrefix, kind: RouteStatic, static: &e.Static[i]}) {
				return
			}
		}
	}
}

// canonicalizeExtraRoutes validates and sorts the ignored paths and static routes of an entry whose
// path prefixes are already canonical. An ignored path must lie inside one of the path prefixes (it
// is the app's traffic; it may equal one, and then takes that prefix over); a static route's prefix
// must not repeat any other prefix of the entry.
func (e *Entry) canonicalizeExtraRoutes() error {
	for i, p := range e.Ignored {
		if err := validatePathPrefix(p); err != nil {
			return fmt.Errorf("ignored path: %w", err)
		}
		p = trimPrefixSlash(p)
		if !insidePrefixes(p, e.PathPrefixes) {
			return fmt.Errorf("ignored path %q is not inside any of the path prefixes %q", p, e.PathPrefixes)
		}
		e.Ignored[i] = p
	}
	e.Ignored = sortedSet(e.Ignored)
	for i := range e.Static {
		sr := &e.Static[i]
		if err := validatePathPrefix(sr.PathPrefix); err != nil {
			return fmt.Errorf("static route: %w", err)
		}
		sr.PathPrefix = trimPrefixSlash(sr.PathPrefix)
		switch {
		case (sr.Response == nil) == (sr.Backend == nil):
			return fmt.Errorf("static route %q needs exactly one of a response or a backend", sr.PathPrefix)
		case sr.Response != nil:
			if err := sr.Response.canonicalize(); err != nil {
				return fmt.Errorf("static route %q response: %w", sr.PathPrefix, err)
			}
		default:
			if err := sr.Backend.canonicalize(); err != nil {
				return fmt.Errorf("static route %q backend: %w", sr.PathPrefix, err)
			}
		}
	}
	slices.SortFunc(e.Static, func(a, b StaticRoute) int { return cmp.Compare(a.PathPrefix, b.PathPrefix) })
	for i := range e.Static {
		p := e.Static[i].PathPrefix
		if i > 0 && e.Static[i-1].PathPrefix == p {
			return fmt.Errorf("static route %q is listed twice", p)
		}
		if slices.Contains(routePrefixes(e), p) || slices.Contains(e.Ignored, p) {
			return fmt.Errorf("static route %q is also a path prefix or ignored path of the entry; a prefix is served one way", p)
		}
	}
	if len(e.Static) == 0 {
		e.Static = nil
	}
	return nil
}

// insidePrefixes reports whether the canonical prefix p equals or lies under (on a segment
// boundary) one of the canonical prefixes; no prefixes means every path.
func insidePrefixes(p string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, q := range prefixes {
		if q == "/" || p == q || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

// MatchPath returns the route of the canonical entry e (one from a Table) that serves a request to
// path with header, whatever its host: the entry's header matches must all hold, then its longest
// matching path prefix wins, of whatever kind (path prefix, ignored path, static route). It is how a
// request arriving on the entry's ServePort is routed. Cost: linear in the entry's prefixes and
// header matches. Safe for concurrent use.
func (e *Entry) MatchPath(path string, header Header) (Route, bool) {
	if e == nil {
		return Route{}, false
	}
	for _, h := range e.Headers {
		if header == nil {
			return Route{}, false
		}
		values := header.Values(h.Name)
		if len(values) == 0 || h.Value != nil && !slices.Contains(values, *h.Value) {
			return Route{}, false
		}
	}
	if path == "" {
		path = "/"
	}
	best := Route{}
	bestLen := -1
	for r := range entryRoutes(e) {
		if (r.prefix == "/" || prefixMatches(r.prefix, path)) && len(r.prefix) > bestLen {
			best, bestLen = Route{Entry: e, Kind: r.kind, Static: r.static, Rewrite: r.rewrite}, len(r.prefix)
		}
	}
	return best, bestLen >= 0
}
