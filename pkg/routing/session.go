package routing

import (
	"fmt"
	"strings"
)

// Session keeps a client on one endpoint of the app with a cookie naming it (the interceptor keeps
// no state). See pkg/sessioncookie for the value.
type Session struct {
	// Cookie is the cookie's name.
	Cookie string `json:"c"`
	// MaxAge is the cookie's lifetime in seconds; 0 makes it a session cookie.
	MaxAge int64 `json:"ma,omitempty"`
}

// Bounds of a Session, as the API's.
const (
	maxCookieNameLen = 64
	maxCookieMaxAge  = 9600 * 3600 // 400 days, what browsers keep at most
)

func (s *Session) validate() error {
	if s.Cookie == "" || len(s.Cookie) > maxCookieNameLen {
		return fmt.Errorf("session cookie name %.40q must be 1-%d characters", s.Cookie, maxCookieNameLen)
	}
	for i := 0; i < len(s.Cookie); i++ {
		if c := s.Cookie[i]; !isAlnum(c) && !('A' <= c && c <= 'Z') && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("session cookie name %q may hold letters, digits, '.', '_' and '-' only", s.Cookie)
		}
	}
	if l := strings.ToLower(s.Cookie); strings.HasPrefix(l, "__host-") || strings.HasPrefix(l, "__secure-") {
		return fmt.Errorf("session cookie name %q needs the Secure attribute", s.Cookie)
	}
	if s.MaxAge < 0 || s.MaxAge > maxCookieMaxAge {
		return fmt.Errorf("session cookie lifetime %d s is not in 0-%d", s.MaxAge, maxCookieMaxAge)
	}
	return nil
}

// CookiePath returns the Path attribute of the canonical entry's session cookie: the longest path,
// on segment boundaries, that covers every one of its path prefixes ("/" without them), so that
// one cookie serves all of the app's routes on a host and none of the paths of the host it does
// not route (/shop and /shop/cart: /shop; /shop and /cart: /).
func (e *Entry) CookiePath() string {
	ps := routePrefixes(e)
	common := ps[0]
	for _, p := range ps[1:] {
		common = commonSegments(common, p)
	}
	return common
}

// commonSegments returns the longest path both a and b (canonical prefixes) lie in: "/" or a prefix
// that ends on a segment boundary of both.
func commonSegments(a, b string) string {
	if a == b {
		return a
	}
	if len(b) < len(a) {
		a, b = b, a
	}
	if prefixMatches(a, b) {
		return a
	}
	end := 0 // the last "/" before which a and b agree
	for i := 0; i < len(a) && a[i] == b[i]; i++ {
		if a[i] == '/' {
			end = i
		}
	}
	if end == 0 {
		return "/"
	}
	return a[:end]
}
