package h1

import (
	"fmt"
	"net/netip"
	"strings"
)

// Peer is the connection a request arrived on, as the forwarding rules (rules.go) see it.
type Peer struct {
	// IP is the address X-Forwarded-For gets: the connection's remote address without its port,
	// "" when it has none.
	IP string
	// Trusted: the peer is a proxy in TrustedProxies, whose X-Forwarded-* headers are passed on.
	// From any other peer they are replaced by what the interceptor saw.
	Trusted bool
	// TLS: the request arrived over TLS, its scheme is https (else http).
	TLS bool
}

// Scheme is the X-Forwarded-Proto the interceptor sets: the scheme it served the request with.
func (p Peer) Scheme() string {
	if p.TLS {
		return "https"
	}
	return "http"
}

// TrustedProxies are the address ranges of the proxies in front of the interceptor (an ingress
// controller, a load balancer) whose forwarding headers are believed, as nginx's set_real_ip_from
// and Traefik's forwardedHeaders.trustedIPs. Empty trusts nobody.
type TrustedProxies []netip.Prefix

// Peer returns the peer a request from remoteAddr (host:port, as net.Conn.RemoteAddr gives it)
// is; tls: it arrived over TLS.
func (t TrustedProxies) Peer(remoteAddr string, tls bool) Peer {
	ip := ClientIP(remoteAddr)
	return Peer{IP: ip, Trusted: t.Trusts(ip), TLS: tls}
}

// Trusts reports whether ip (an address without port) lies in one of t's ranges. An IPv4 address
// in its IPv6-mapped form (a dual-stack socket's ::ffff:10.0.0.1) is taken as the IPv4 address.
func (t TrustedProxies) Trusts(ip string) bool {
	if len(t) == 0 || ip == "" {
		return false
	}
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	a = a.WithZone("").Unmap()
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// String lists t as ParseTrustedProxies reads it.
func (t TrustedProxies) String() string {
	s := make([]string, len(t))
	for i, p := range t {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// ParseTrustedProxies reads a comma-separated list of CIDR ranges ("10.0.0.0/8", "fd00::/8") and
// single addresses ("192.0.2.7", taken as /32 or /128); blanks around items are ignored and an
// empty list trusts nobody. A range with host bits set ("10.1.2.3/8") is refused: it most often
// means a mistyped mask. IPv6-mapped IPv4 ranges are read as the IPv4 range.
func ParseTrustedProxies(list string) (TrustedProxies, error) {
	var t TrustedProxies
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var p netip.Prefix
		if strings.Contains(item, "/") {
			var err error
			if p, err = netip.ParsePrefix(item); err != nil {
				return nil, fmt.Errorf("%q is not a CIDR range or an IP address: %w", item, err)
			}
			if p != p.Masked() {
				return nil, fmt.Errorf("%q has host bits set: did you mean %s?", item, p.Masked())
			}
		} else {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("%q is not a CIDR range or an IP address: %w", item, err)
			}
			if a.Zone() != "" {
				return nil, fmt.Errorf("%q: an address with a zone cannot be trusted; give the address alone", item)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		t = append(t, p)
	}
	return t, nil
}
