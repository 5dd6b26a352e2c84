// Package tlsterm terminates TLS for the interceptor: a certificate per routed host chosen by SNI,
// loaded from the kubernetes.io/tls Secrets the routing table names, and the TLS listener.
package tlsterm

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/httpscale/httpscale/pkg/routing"
)

// ErrNoCertificate fails a handshake whose server name no loaded certificate serves and for which
// there is no default certificate.
var ErrNoCertificate = errors.New("no certificate for this server name")

// Store chooses the certificate for each handshake from an immutable snapshot, rebuilt when the
// routing table or a loaded certificate changes. GetCertificate is safe for concurrent use and
// costs a map lookup per label of the server name; SetTable and SetCertificate take a lock and
// rebuild the snapshot in time linear in the table's entries with a TLS Secret.
type Store struct {
	// defaultKey is the fleet default certificate's Secret, "namespace/name", or "".
	defaultKey string

	mu     sync.Mutex
	routes *routing.Table              // the routing table: which namespace owns which name
	table  []route                     // entries with a TLS Secret, in the table's key order
	certs  map[string]*tls.Certificate // loaded certificates by Secret "namespace/name"
	snap   atomic.Pointer[snapshot]
}

// route is one routing entry's hosts and the Secret whose certificate serves them.
type route struct {
	hosts  []string
	ns     string
	secret string // "namespace/name"
}

// snapshot maps server names to certificates, as GetCertificate reads them.
type snapshot struct {
	routes   *routing.Table      // which namespace owns a name (Table.HostNamespace)
	exact    map[string][]nsCert // lowercase host
	wildcard map[string][]nsCert // ".example.com" for *.example.com
	any      []nsCert            // objects with host "*"
	fallback *tls.Certificate    // the fleet default
}

// nsCert is a loaded certificate and the namespace of the object that names it.
type nsCert struct {
	ns   string
	cert *tls.Certificate
}

// NewStore returns an empty store; defaultSecret ("namespace/name", may be empty) names the fleet
// default certificate's Secret.
func NewStore(defaultSecret string) *Store {
	s := &Store{defaultKey: defaultSecret, certs: map[string]*tls.Certificate{}}
	s.snap.Store(&snapshot{})
	return s
}

// SecretKey returns the "namespace/name" the store knows an entry's TLS Secret by, "" when the
// entry names none.
func SecretKey(e *routing.Entry) string {
	if e.TLSSecret == "" {
		return ""
	}
	return e.Namespace + "/" + e.TLSSecret
}

// SetTable takes the hosts and Secrets of t's entries. A nil table clears them.
func (s *Store) SetTable(t *routing.Table) {
	var routes []route
	if t != nil {
		for e := range t.All() {
			if k := SecretKey(e); k != "" {
				routes = append(routes, route{hosts: e.Hosts, ns: e.Namespace, secret: k})
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.routes, s.table = t, routes
	s.rebuild()
}

// SetCertificate stores the certificate loaded from the Secret key ("namespace/name"); nil forgets
// it (the Secret is gone or invalid).
func (s *Store) SetCertificate(key string, cert *tls.Certificate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cert == nil {
		if _, ok := s.certs[key]; !ok {
			return
		}
		delete(s.certs, key)
	} else {
		s.certs[key] = cert
	}
	s.rebuild()
}

// rebuild publishes a new snapshot. Objects sharing a host (on different paths, so of one
// namespace) should name the same Secret; when they do not, the first in the table's order with a
// loaded certificate wins. Hosts of an object without a loaded certificate are left to the next rule
// of the same namespace (its wildcard, its *), then the default.
func (s *Store) rebuild() {
	n := &snapshot{routes: s.routes, exact: map[string][]nsCert{}, wildcard: map[string][]nsCert{}, fallback: s.certs[s.defaultKey]}
	for _, r := range s.table {
		cert := s.certs[r.secret]
		if cert == nil {
			continue
		}
		c := nsCert{ns: r.ns, cert: cert}
		for _, h := range r.hosts {
			switch {
			case h == "*":
				n.any = append(n.any, c)
			case strings.HasPrefix(h, "*."):
				n.wildcard[h[1:]] = append(n.wildcard[h[1:]], c)
			default:
				n.exact[h] = append(n.exact[h], c)
			}
		}
	}
	s.snap.Store(n)
}

// GetCertificate is tls.Config.GetCertificate: an exact host first, then the most specific wildcard
// (*.example.com serves a.example.com and a.b.example.com, as routing matches hosts), then an
// object with host *, then the default certificate; otherwise the handshake fails with
// ErrNoCertificate. Only a certificate of the namespace that owns the name (the namespace of the
// most specific routing-table level that routes it, see routing.Table.HostNamespace) serves it: a
// name one namespace routes never gets another namespace's wildcard or catch-all certificate. A
// handshake without SNI (a client dialling an IP address) gets the * object's certificate or the
// default.
func (s *Store) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := s.snap.Load().lookup(hello.ServerName); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("%w %q", ErrNoCertificate, hello.ServerName)
}

// lookup is GetCertificate's choice for a server name on this snapshot, nil when there is none.
func (n *snapshot) lookup(serverName string) *tls.Certificate {
	name := strings.TrimSuffix(strings.ToLower(serverName), ".")
	owner, owned := n.routes.HostNamespace(name)
	// pick returns the first certificate of the owner's namespace (any namespace when no object
	// routes the name, or when an old table mixes namespaces on it).
	pick := func(cs []nsCert) *tls.Certificate {
		for _, c := range cs {
			if !owned || owner == "" || c.ns == owner {
				return c.cert
			}
		}
		return nil
	}
	if name != "" {
		if c := pick(n.exact[name]); c != nil {
			return c
		}
		for i := strings.IndexByte(name, '.'); i >= 0; {
			if c := pick(n.wildcard[name[i:]]); c != nil {
				return c
			}
			j := strings.IndexByte(name[i+1:], '.')
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	if c := pick(n.any); c != nil {
		return c
	}
	return n.fallback
}

// Serves reports whether a connection whose handshake named serverName (SNI) may carry a request
// for host (the Host header or :authority, a port allowed): when serverName is empty (a client
// dialling an address) or equals host, or when both names get the same certificate, as a wildcard
// certificate shared by several apps (HTTP/2 clients reuse a connection for every name its
// certificate covers). Otherwise the client was shown a certificate chosen for another app and the
// request is misdirected. Both names are looked up in one snapshot, so a certificate rotated
// since the handshake changes nothing.
func (s *Store) Serves(serverName, host string) bool {
	if serverName == "" {
		return true
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if strings.EqualFold(strings.TrimSuffix(serverName, "."), strings.TrimSuffix(host, ".")) {
		return true
	}
	n := s.snap.Load()
	c := n.lookup(serverName)
	return c != nil && c == n.lookup(host)
}

// Secrets returns the Secrets the store needs: every entry's and the default's, "namespace/name".
func (s *Store) Secrets() map[string]struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	want := map[string]struct{}{}
	for _, r := range s.table {
		want[r.secret] = struct{}{}
	}
	if s.defaultKey != "" {
		want[s.defaultKey] = struct{}{}
	}
	return want
}

// Config returns the server TLS configuration: certificates from the store, TLS 1.2 or later, ALPN
// h2 and http/1.1.
//
// A handshake for a name no certificate serves fails with the unrecognized_name alert ("tls:
// unrecognized name" at the client), which tells the client what is wrong, rather than
// internal_error.
func (s *Store) Config() *tls.Config {
	return &tls.Config{
		// crypto/tls answers unrecognized_name when GetCertificate returns neither a certificate
		// nor an error and the configuration has no static certificate.
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.snap.Load().lookup(hello.ServerName), nil
		},
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
	}
}
