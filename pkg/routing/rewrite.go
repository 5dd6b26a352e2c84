package routing

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// PathRewrite replaces the matched path prefix of a request before it is forwarded (Gateway API's
// URLRewrite with a ReplacePrefixMatch path modifier). An Entry's rewrites are sorted by Prefix.
type PathRewrite struct {
	// Prefix is one of the entry's path prefixes in canonical form ("/" when it has none).
	Prefix string `json:"p"`
	// Replace replaces the matched prefix; "" and "/" remove it.
	Replace string `json:"r"`
}

// maxReplaceLen mirrors the API's bound on replacePrefixMatch.
const maxReplaceLen = 1024

// Path returns path with rw's prefix replaced, by Gateway API's ReplacePrefixMatch rules: the match
// is on whole segments, a trailing "/" of the prefix or the replacement is insignificant, and the
// rest of the path (a trailing "/" included) is kept:
//
//	/shop/x  /shop  /      → /x        /shop   /shop  /store  → /store
//	/shop/   /shop  ""     → /         /shop/  /shop  /store  → /store/
//	/shop/x  /shop  /a/    → /a/x      /       /      /app    → /app
//
// A result that would start with "//" (a client's "/shop//x" with the prefix removed) starts with
// one "/": a target beginning with "//" reads as a host to some servers. path must match the
// prefix (Table.MatchRoute said so); otherwise it is returned unchanged. Pure; it allocates the
// result when the replacement is not empty.
func (rw *PathRewrite) Path(path string) string {
	rest, ok := cutPrefix(path, rw.Prefix)
	if !ok {
		return path
	}
	return rw.join(rest)
}

// join returns the replacement followed by rest, what follows the prefix (see Path).
func (rw *PathRewrite) join(rest string) string {
	out := trimPrefixSlash(rw.Replace)
	if out == "/" {
		out = ""
	}
	if out == "" {
		out = rest
	} else {
		out += rest
	}
	if out == "" {
		return "/"
	}
	if len(out) > 1 && out[1] == '/' {
		out = "/" + strings.TrimLeft(out, "/")
	}
	return out
}

// cutPrefix returns what follows the canonical prefix in path when prefix matches path on a
// segment boundary: "" for an exact match (or "/" matching "/"), otherwise a rest starting with "/".
func cutPrefix(path, prefix string) (rest string, ok bool) {
	if prefix == "/" {
		if path == "/" {
			return "", true
		}
		return path, strings.HasPrefix(path, "/")
	}
	if !prefixMatches(prefix, path) {
		return "", false
	}
	return path[len(prefix):], true
}

// Target returns the request target (origin form: path and query, as sent on the wire) with the
// prefix replaced; the query is kept as it came. Routes match the decoded path, and the target's
// decoded path is always the rewrite of that path (Path). The rest of the path keeps the client's
// encoding where that holds; where it does not (an encoded "/" next to the prefix) the rewritten
// decoded path is sent re-encoded. An absolute-form target
// ("http://host/path") is rewritten to origin form. A target whose path does not match is returned
// unchanged.
func (rw *PathRewrite) Target(target string) string {
	path, query, hasQuery := strings.Cut(target, "?")
	if !strings.HasPrefix(path, "/") {
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Path == "" {
			return target
		}
		path, query, hasQuery = u.EscapedPath(), u.RawQuery, u.RawQuery != "" || u.ForceQuery
	}
	decoded, err := url.PathUnescape(path) // path itself, without allocating, when nothing is encoded
	if err != nil {
		return target
	}
	if _, ok := cutPrefix(decoded, rw.Prefix); !ok {
		return target
	}
	want := rw.Path(decoded)
	out := ""
	n := len(rw.Prefix)
	if rw.Prefix == "/" {
		n = 0 // the whole path is the rest (see cutPrefix)
	}
	if rest, ok := escapedRest(path, n); ok && (rest == "" || rest[0] == '/') {
		out = rw.join(rest) // the rest as the client encoded it
		if rest == "/" && n == 0 {
			out = want // "/" is the root prefix itself
		}
		if len(out) != len(want) {
			if d, err := url.PathUnescape(out); err != nil || d != want {
				out = "" // an encoded "/" next to the prefix: see below
			}
		}
	}
	if out == "" {
		out = (&url.URL{Path: want}).EscapedPath()
	}
	if hasQuery {
		out += "?" + query
	}
	return out
}

// escapedRest returns what follows the first n decoded bytes of the escaped path (each %XX decodes
// to one byte), or false when they end inside an escape.
func escapedRest(path string, n int) (string, bool) {
	i := 0
	for ; n > 0 && i < len(path); n-- {
		if path[i] == '%' {
			i += 3
		} else {
			i++
		}
	}
	if n > 0 || i > len(path) {
		return "", false
	}
	return path[i:], true
}

// HasDotSegment reports whether the (decoded) path has a "." or ".." segment. A rewritten request
// with one is refused: after "/shop" → "/internal", "/shop/../admin" would reach the app as
// "/internal/../admin", which it resolves to "/admin", outside the subtree the rewrite names.
func HasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// validateReplace accepts what the API accepts for replacePrefixMatch.
func validateReplace(r string) error {
	if r == "" {
		return nil
	}
	if len(r) > maxReplaceLen || r[0] != '/' {
		return fmt.Errorf("path rewrite replacement %.40q must be empty or a path of at most %d bytes starting with /", r, maxReplaceLen)
	}
	for i := 0; i < len(r); i++ {
		if !replaceByte(r[i]) {
			return fmt.Errorf("path rewrite replacement %q contains %q; use letters, digits and -._~!$&'()*+,;=:@/", r, r[i])
		}
	}
	if strings.Contains(r, "//") || HasDotSegment(r) {
		return fmt.Errorf("path rewrite replacement %q contains //, . or .. segments", r)
	}
	return nil
}

// replaceByte reports whether c may appear in a replacement: a path character that needs no
// percent-encoding (RFC 3986 pchar without pct-encoded, and "/").
func replaceByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,;=:@/", c) >= 0
}

// canonicalizeRewrites validates and sorts the rewrites of an entry whose path prefixes are already
// canonical: each names one of them ("/" when there are none), at most once.
func (e *Entry) canonicalizeRewrites() error {
	prefixes := routePrefixes(e)
	for i := range e.Rewrites {
		rw := &e.Rewrites[i]
		if err := validatePathPrefix(rw.Prefix); err != nil {
			return fmt.Errorf("path rewrite: %w", err)
		}
		rw.Prefix = trimPrefixSlash(rw.Prefix)
		if !slices.Contains(prefixes, rw.Prefix) {
			return fmt.Errorf("path rewrite of %q: not one of the path prefixes %q", rw.Prefix, prefixes)
		}
		if err := validateReplace(rw.Replace); err != nil {
			return err
		}
	}
	slices.SortFunc(e.Rewrites, func(a, b PathRewrite) int { return cmp.Compare(a.Prefix, b.Prefix) })
	for i := 1; i < len(e.Rewrites); i++ {
		if e.Rewrites[i].Prefix == e.Rewrites[i-1].Prefix {
			return fmt.Errorf("path prefix %q is rewritten twice", e.Rewrites[i].Prefix)
		}
	}
	if len(e.Rewrites) == 0 {
		e.Rewrites = nil
	}
	return nil
}

// rewriteFor returns the rewrite of a route of the canonical entry e: for one of its path prefixes,
// that prefix's; for an ignored path, the one of the longest path prefix it lies in (an ignored path
// is the app's own traffic, and reaches the app as the prefix's other requests do). Static routes
// are never rewritten. nil when none applies.
func rewriteFor(e *Entry, prefix string, kind RouteKind) *PathRewrite {
	if len(e.Rewrites) == 0 || kind == RouteStatic {
		return nil
	}
	var best *PathRewrite
	for i := range e.Rewrites {
		rw := &e.Rewrites[i]
		if rw.Prefix == prefix {
			return rw
		}
		if kind == RouteIgnored && (rw.Prefix == "/" || prefixMatches(rw.Prefix, prefix)) && (best == nil || len(rw.Prefix) > len(best.Prefix)) {
			best = rw
		}
	}
	if best != nil && kind == RouteIgnored {
		// A longer path prefix without a rewrite may cover the ignored path: that prefix's requests
		// are not rewritten, and neither are its ignored paths.
		for _, p := range routePrefixes(e) {
			if len(p) > len(best.Prefix) && (p == prefix || prefixMatches(p, prefix)) {
				return nil
			}
		}
	}
	return best
}
