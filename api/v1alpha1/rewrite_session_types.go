package v1alpha1

// PathRewrite replaces the matched path prefix of a request before the interceptor forwards it, as
// Gateway API's URLRewrite filter with a ReplacePrefixMatch path modifier does. The match is on
// whole segments and a trailing / of the prefix is ignored. With pathPrefix /shop: replacePrefixMatch
// / (or "") forwards /shop/x as /x and /shop as /; /store forwards /shop/x as /store/x and /shop/ as
// /store/. The query string is kept. The app gets X-Forwarded-Prefix with the prefix that was
// replaced.
type PathRewrite struct {
	// PathPrefix is the prefix whose match is replaced: one of spec.pathPrefixes, written the same
	// way (an object without pathPrefixes routes every path and can rewrite /). Ignored paths inside
	// this prefix are rewritten the same way; static routes are never rewritten.
	PathPrefix PathPrefix `json:"pathPrefix"`

	// ReplacePrefixMatch replaces the matched prefix: a path of letters, digits and
	// -._~!$&'()*+,;=:@/ starting with /, or empty. "" and "/" both remove the prefix (/shop/x
	// becomes /x).
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule=`self == '' || (self.startsWith('/') && self.matches(r"^[A-Za-z0-9/._~!$&'()*+,;=:@-]*$"))`,message="replacePrefixMatch must be empty or a path starting with / made of letters, digits and -._~!$&'()*+,;=:@/ (no percent-encoding, query, fragment or spaces)"
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'(^|/)\.\.?(/|$)') && !self.contains('//')`,message="replacePrefixMatch must not contain . or .. segments or //: the app would resolve them to another path than the one written"
	ReplacePrefixMatch string `json:"replacePrefixMatch"`
}

// DefaultSessionCookie is the cookie name of session persistence when cookieName is not set.
const DefaultSessionCookie = "httpscale-session"

// SessionPersistence keeps a client on one pod of the app while that pod is ready: the interceptor
// answers the client's first request with a cookie that names the pod it chose, and sends every
// later request carrying that cookie to the same pod. The interceptor keeps no state: the cookie is
// an opaque value authenticated with the fleet's session key, and it is only ever looked up among
// the app's own ready endpoints, so a forged, altered or foreign cookie picks a pod as if there
// were none. When the named pod is gone, not ready, or refuses the connection, the request goes to
// another pod (preferring the interceptor's zone) and the response carries a new cookie.
type SessionPersistence struct {
	// CookieName is the cookie's name. Give apps that share a host (with overlapping paths) different
	// names. The cookie's Path is the longest path prefix that covers all of spec.pathPrefixes (/ when
	// there is none).
	// +optional
	// +kubebuilder:default=httpscale-session
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[A-Za-z0-9._-]+$')`,message="cookieName must be 1-64 letters, digits, '.', '_' or '-'"
	// +kubebuilder:validation:XValidation:rule=`!self.lowerAscii().startsWith('__host-') && !self.lowerAscii().startsWith('__secure-')`,message="cookieName must not start with __Host- or __Secure-: browsers accept such cookies only with the Secure attribute, which the interceptor sets only for requests that came over HTTPS"
	CookieName string `json:"cookieName,omitempty"`

	// Lifetime is the cookie's Max-Age: after it the client's browser drops the cookie and its next
	// request may go to another pod (the pin is not renewed by use). Unset: a session cookie, kept
	// until the browser closes. At least 1s, at most 9600h (400 days, what browsers keep at most).
	// +optional
	// +kubebuilder:validation:XValidation:rule=`!self.matches(r'^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('9600h'))`,message="sessionPersistence.lifetime must be between 1s and 9600h (400 days)"
	Lifetime *Duration `json:"lifetime,omitempty"`
}

// SessionCookieName returns the cookie name of sp, DefaultSessionCookie when it sets none.
func (sp *SessionPersistence) SessionCookieName() string {
	if sp.CookieName == "" {
		return DefaultSessionCookie
	}
	return sp.CookieName
}
