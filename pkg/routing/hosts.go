package routing

import (
	"strings"
)

// Host patterns as routing matches them: an exact name, "*.d" (every name below d at any depth, not d
// itself) or "*" (every host). The functions below compare patterns with one another, for the
// ownership rules between namespaces (which namespace may route which hosts); none is on the hot path.

// IsWildcardHost reports whether h is "*" or "*.d".
func IsWildcardHost(h string) bool { return h == "*" || strings.HasPrefix(h, "*.") }

// HostCovers reports whether every name host matches is also matched by pattern: "*" covers every
// host, "*.d" covers the names below d and the wildcards "*.d" and "*.x.d", and an exact name covers
// only itself. Both are canonical (lowercase, no trailing dot).
func HostCovers(pattern, host string) bool {
	switch {
	case pattern == "*":
		return true
	case host == "*":
		return false
	case strings.HasPrefix(pattern, "*."):
		d := pattern[2:]
		base := host
		if strings.HasPrefix(host, "*.") {
			base = host[2:]
			if base == d {
				return true
			}
		}
		return strings.HasSuffix(base, "."+d)
	default:
		return pattern == host
	}
}

// HostsOverlap reports whether some name is matched by both patterns.
func HostsOverlap(a, b string) bool { return HostCovers(a, b) || HostCovers(b, a) }

// HostSpecificity orders patterns by routing precedence: an exact name is more specific than any
// wildcard, a wildcard with more labels more specific than one with fewer, and "*" the least.
func HostSpecificity(h string) int {
	switch {
	case h == "*":
		return 0
	case strings.HasPrefix(h, "*."):
		return 1 + strings.Count(h, ".")
	default:
		return 1 << 20
	}
}

// CoveringWildcards returns the bases d of the wildcards "*.d" that cover host, most specific
// first: "a.b.example.com" and "*.b.example.com" give "b.example.com", "example.com" and "com".
// "*" is not included.
func CoveringWildcards(host string) []string {
	name := host
	if strings.HasPrefix(host, "*.") {
		name = host[2:]
		out := []string{name}
		return append(out, parentDomains(name)...)
	}
	if host == "*" {
		return nil
	}
	return parentDomains(name)
}

// parentDomains returns the proper suffixes of name after each dot, longest first.
func parentDomains(name string) []string {
	var out []string
	for i := strings.IndexByte(name, '.'); i >= 0; {
		out = append(out, name[i+1:])
		j := strings.IndexByte(name[i+1:], '.')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return out
}
