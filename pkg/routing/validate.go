package routing

import (
	"cmp"
	"fmt"
	"net/netip"
	"net/textproto"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits mirror the HTTPScaledObject API so that anything the API server accepts fits a Table.
const (
	maxHostLen        = 253
	maxPathPrefixLen  = 1024
	maxHeaderNameLen  = 256
	maxHeaderValueLen = 4096
	maxBodyLen        = 64 << 10
)

// canonical returns a validated deep copy of e in canonical form: hosts lower-cased, sorted and
// deduplicated; path prefixes without trailing "/" (except "/" itself), sorted and deduplicated;
// header names in canonical MIME form, sorted; empty slices and maps as nil; empty protocols as
// ProtocolHTTP. Two entries that route identically therefore encode identically.
func (e *Entry) canonical() (Entry, error) {
	c := e.Clone()
	if err := c.canonicalize(); err != nil {
		return Entry{}, fmt.Errorf("%w %s: %w", ErrInvalidEntry, e.Key(), err)
	}
	return c, nil
}

func (e *Entry) canonicalize() error {
	if !isDNSLabel(e.Namespace, false) {
		return fmt.Errorf("namespace %q is not a DNS label", e.Namespace)
	}
	if !isDNSSubdomain(e.Name) {
		return fmt.Errorf("name %q is not a DNS subdomain", e.Name)
	}
	if e.Generation < 0 {
		return fmt.Errorf("generation %d is negative", e.Generation)
	}
	if len(e.Hosts) == 0 {
		return fmt.Errorf("no hosts")
	}
	for i, h := range e.Hosts {
		h = strings.ToLower(h)
		if err := validateHost(h); err != nil {
			return err
		}
		e.Hosts[i] = h
	}
	e.Hosts = sortedSet(e.Hosts)
	for i, p := range e.PathPrefixes {
		if err := validatePathPrefix(p); err != nil {
			return err
		}
		e.PathPrefixes[i] = trimPrefixSlash(p)
	}
	e.PathPrefixes = sortedSet(e.PathPrefixes)
	if err := e.canonicalizeExtraRoutes(); err != nil {
		return err
	}
	if err := e.canonicalizeRewrites(); err != nil {
		return err
	}
	if s := e.Session; s != nil {
		if err := s.validate(); err != nil {
			return err
		}
		if e.ViaService {
			return fmt.Errorf("session persistence needs forwarding to pods, not via the Service")
		}
	}
	for i := range e.Headers {
		h := &e.Headers[i]
		if err := validateHeaderName(h.Name); err != nil {
			return fmt.Errorf("header match: %w", err)
		}
		h.Name = textproto.CanonicalMIMEHeaderKey(h.Name)
		if h.Value != nil {
			if err := validateHeaderValue(*h.Value); err != nil {
				return fmt.Errorf("header match %s: %w", h.Name, err)
			}
		}
	}
	slices.SortFunc(e.Headers, func(a, b HeaderMatch) int { return cmp.Compare(a.Name, b.Name) })
	for i := 1; i < len(e.Headers); i++ {
		if e.Headers[i].Name == e.Headers[i-1].Name {
			return fmt.Errorf("header %s matched twice", e.Headers[i].Name)
		}
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	target := e.Target()
	if err := target.canonicalize(); err != nil {
		return err
	}
	e.Protocol, e.ClusterIP = target.Protocol, target.ClusterIP
	if e.Timeouts.Readiness < 0 || e.Timeouts.Request < 0 || e.Timeouts.ResponseHeader < 0 {
		return fmt.Errorf("timeouts must not be negative")
	}
	if e.ServePort < 0 || e.ServePort > 65535 {
		return fmt.Errorf("serve port %d is not in 1-65535", e.ServePort)
	}
	if e.TLSSecret != "" && !isDNSSubdomain(e.TLSSecret) {
		return fmt.Errorf("TLS Secret name %q is not a DNS subdomain", e.TLSSecret)
	}
	cs := &e.ColdStart
	if cs.QueueLimit < 0 {
		return fmt.Errorf("queue limit %d is negative", cs.QueueLimit)
	}
	if cs.Fallback != nil {
		if err := cs.Fallback.canonicalize(); err != nil {
			return fmt.Errorf("fallback: %w", err)
		}
	}
	if cs.Placeholder != nil {
		if err := cs.Placeholder.canonicalize(); err != nil {
			return fmt.Errorf("placeholder: %w", err)
		}
	}
	if w := cs.WaitingPage; w != nil {
		if err := w.validate(); err != nil {
			return fmt.Errorf("waiting page: %w", err)
		}
	}
	if p := cs.Probe; p != nil {
		if err := p.validate(); err != nil {
			return fmt.Errorf("cold-start probe: %w", err)
		}
	}
	return nil
}

// maxProbePath bounds a probe's path (the API allows 1024 characters).
const maxProbePath = 4096

func (p *Probe) validate() error {
	switch {
	case p.Off:
		if p.TCP || p.Port != 0 || p.Path != "" {
			return fmt.Errorf("a probe that is off sets nothing else")
		}
		return nil
	case p.Port < 1 || p.Port > 65535:
		return fmt.Errorf("port %d is not in 1-65535", p.Port)
	case p.TCP && p.Path != "":
		return fmt.Errorf("a TCP probe has no path")
	case !p.TCP && (!strings.HasPrefix(p.Path, "/") || len(p.Path) > maxProbePath || strings.ContainsAny(p.Path, " \t\r\n?#")):
		return fmt.Errorf("path %q must start with / and hold no whitespace, query or fragment", p.Path)
	}
	return nil
}

// maxWaitingPageRefresh bounds a waiting page's reload interval (the API allows 1-60 s).
const maxWaitingPageRefresh = 3600

func (w *WaitingPage) validate() error {
	if w.Refresh < 0 || w.Refresh > maxWaitingPageRefresh {
		return fmt.Errorf("refresh %d s is not in 0-%d", w.Refresh, maxWaitingPageRefresh)
	}
	// The API bounds the page in characters (16384); this bound in bytes admits any of them.
	if len(w.HTML) > maxBodyLen {
		return fmt.Errorf("html is %d bytes, more than %d", len(w.HTML), maxBodyLen)
	}
	if !utf8.ValidString(w.HTML) {
		return fmt.Errorf("html is not valid UTF-8")
	}
	return nil
}

func (b *Backend) canonicalize() error {
	if !isDNSLabel(b.Service, true) {
		return fmt.Errorf("service %q is not a DNS-1035 label", b.Service)
	}
	if b.Port < 1 || b.Port > 65535 {
		return fmt.Errorf("service port %d is not in 1-65535", b.Port)
	}
	if b.PortName != "" {
		if !isPortName(b.PortName) {
			return fmt.Errorf("port name %q is not a valid Service port name", b.PortName)
		}
	}
	if b.TargetPort < 0 || b.TargetPort > 65535 {
		return fmt.Errorf("target port %d is not in 0-65535", b.TargetPort)
	}
	if b.ClusterIP != "" {
		ip, err := netip.ParseAddr(b.ClusterIP)
		if err != nil || ip.Zone() != "" || ip.IsUnspecified() {
			return fmt.Errorf("cluster IP %q is not an IP address", b.ClusterIP)
		}
		b.ClusterIP = ip.String()
	}
	switch b.Protocol {
	case "":
		b.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolH2C:
	default:
		return fmt.Errorf("protocol %q is not %q or %q", b.Protocol, ProtocolHTTP, ProtocolH2C)
	}
	return nil
}

func (p *Placeholder) canonicalize() error {
	if p.StatusCode != 0 && (p.StatusCode < 200 || p.StatusCode > 599) {
		return fmt.Errorf("status code %d is not in 200-599", p.StatusCode)
	}
	for name, value := range p.Headers {
		if err := validateHeaderName(name); err != nil {
			return err
		}
		if err := validateHeaderValue(value); err != nil {
			return fmt.Errorf("header %s: %w", name, err)
		}
	}
	if len(p.Headers) == 0 {
		p.Headers = nil
	}
	if len(p.Body) > maxBodyLen {
		return fmt.Errorf("body is %d bytes, more than %d", len(p.Body), maxBodyLen)
	}
	if !utf8.ValidString(p.Body) {
		return fmt.Errorf("body is not valid UTF-8")
	}
	return nil
}

// validateHost accepts a lowercase DNS name, "*." followed by one, or "*".
func validateHost(h string) error {
	if h == "*" {
		return nil
	}
	name := strings.TrimPrefix(h, "*.")
	if len(h) > maxHostLen {
		return fmt.Errorf("host %.40q... is longer than %d characters", h, maxHostLen)
	}
	if name == "" {
		return fmt.Errorf("host %q is empty", h)
	}
	for label := range strings.SplitSeq(name, ".") {
		if !isDNSLabel(label, false) {
			return fmt.Errorf("host %q: labels must be 1-63 letters, digits or inner '-', and only the leftmost may be '*'", h)
		}
	}
	return nil
}

// The name checks below are hand-written equivalents of k8s.io/apimachinery/pkg/util/validation's
// IsDNS1123Label, IsDNS1035Label, IsDNS1123Subdomain and IsValidPortName (which use regular
// expressions and cost a third of decoding a large table). A test keeps them in agreement.

// isDNSLabel reports whether s is an RFC 1123 label (RFC 1035 when letterFirst): 1-63 lowercase
// letters, digits and '-', starting and ending with a letter or digit.
func isDNSLabel(s string, letterFirst bool) bool {
	if len(s) == 0 || len(s) > 63 || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) || letterFirst && !isLower(s[0]) {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if !isAlnum(s[i]) && s[i] != '-' {
			return false
		}
	}
	return true
}

// isDNSSubdomain reports whether s is an RFC 1123 subdomain as Kubernetes object names use it: at
// most 253 characters, dot-separated non-empty labels of lowercase letters, digits and inner '-'.
func isDNSSubdomain(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if len(label) == 0 || !isAlnum(label[0]) || !isAlnum(label[len(label)-1]) {
			return false
		}
		for i := 1; i < len(label)-1; i++ {
			if !isAlnum(label[i]) && label[i] != '-' {
				return false
			}
		}
	}
	return true
}

// isPortName reports whether s is an IANA service name: 1-15 lowercase letters, digits and '-', at
// least one letter, no leading, trailing or doubled '-'.
func isPortName(s string) bool {
	if len(s) == 0 || len(s) > 15 || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	letter := false
	for i := 0; i < len(s); i++ {
		if !isAlnum(s[i]) && s[i] != '-' {
			return false
		}
		letter = letter || isLower(s[i])
	}
	return letter
}

func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlnum(c byte) bool { return isLower(c) || c >= '0' && c <= '9' }

func validatePathPrefix(p string) error {
	if !strings.HasPrefix(p, "/") {
		return fmt.Errorf("path prefix %q does not start with '/'", p)
	}
	if len(p) > maxPathPrefixLen {
		return fmt.Errorf("path prefix %.40q... is longer than %d bytes", p, maxPathPrefixLen)
	}
	if !utf8.ValidString(p) {
		return fmt.Errorf("path prefix %q is not valid UTF-8", p)
	}
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f || c == '?' || c == '#' {
			return fmt.Errorf("path prefix %q contains a query, fragment, space or control character", p)
		}
	}
	return nil
}

// trimPrefixSlash drops trailing slashes, which are insignificant for segment matching (Gateway API
// PathPrefix semantics): "/api/" matches exactly what "/api" matches.
func trimPrefixSlash(p string) string {
	for len(p) > 1 && p[len(p)-1] == '/' {
		p = p[:len(p)-1]
	}
	return p
}

func validateHeaderName(n string) error {
	if n == "" || len(n) > maxHeaderNameLen {
		return fmt.Errorf("header name %.40q must be 1-%d characters", n, maxHeaderNameLen)
	}
	for i := 0; i < len(n); i++ {
		if !isTokenChar(n[i]) {
			return fmt.Errorf("header name %q is not an HTTP token", n)
		}
	}
	return nil
}

// validateHeaderValue accepts what RFC 9110 allows in a field value (no control characters except
// tab) that is also valid UTF-8, so it survives the JSON encoding unchanged.
func validateHeaderValue(v string) error {
	if len(v) > maxHeaderValueLen {
		return fmt.Errorf("value is longer than %d bytes", maxHeaderValueLen)
	}
	if !utf8.ValidString(v) {
		return fmt.Errorf("value is not valid UTF-8")
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("value contains a control character")
		}
	}
	return nil
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// sortedSet sorts s in place and removes duplicates; an empty result is nil.
func sortedSet(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	slices.Sort(s)
	return slices.Compact(s)
}
