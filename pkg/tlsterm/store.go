// Package tlsterm terminates TLS for the interceptor: a certificate per routed host chosen by SNI,
// loaded from the kubernetes.io/tls Secrets the routing table names, and the TLS listener.
package tlsterm

import (
	"crypto/tls"
	"errors"
	"fmt"
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

	mu    sync.Mutex
	table []route                     // entries with a TLS Secret, in the table's key order
	certs map[string]*tls.Certificate // loaded certificates by Secret "namespace/name"
	snap  atomic.Pointer[snapshot]
}

// route is one routing entry's hosts and the Secret whose certificate serves them.
type route struct {
	hosts  []string
	secret string // "namespace/name"
}

// snapshot maps server names to certificates, as GetCertificate reads them.
type snapshot struct {
	exact    map[string]*tls.Certificate // lowercase host
	wildcard map[string]*tls.Certificate // ".example.com" for *.example.com
	any      *tls.Certificate            // an object with host "*"
	fallback *tls.Certificate            // the fleet default
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
				routes = append(routes, route{hosts: e.Hosts, secret: k})
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.table = routes
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

// rebuild publishes a new snapshot. Objects sharing a host (on different paths) should name the
// same Secret; when they do not, the first in the table's order with a loaded certificate wins.
// Hosts of an object without a loaded certificate are left to the next rule (a wildcard, *, the
// default).
func (s *Store) rebuild() {
	n := &snapshot{exact: map[string]*tls.Certificate{}, wildcard: map[string]*tls.Certificate{}, fallback: s.certs[s.defaultKey]}
	for _, r := range s.table {
		cert := s.certs[r.secret]
		if cert == nil {
			continue
		}
		for _, h := range r.hosts {
			switch {
			case h == "*":
				if n.any == nil {
					n.any = cert
				}
			case strings.HasPrefix(h, "*."):
				if _, ok := n.wildcard[h[1:]]; !ok {
					n.wildcard[h[1:]] = cert
				}
			default:
				if _, ok := n.exact[h]; !ok {
					n.exact[h] = cert
				}
			}
		}
	}
	s.snap.Store(n)
}

// GetCertificate is tls.Config.GetCertificate: an exact host first, then the most specific wildcard
// (*.example.com serves a.example.com and a.b.example.com, as routing matches hosts), then an
// object with host *, then the default certificate; otherwise the handshake fails with
// ErrNoCertificate. A handshake without SNI (a client dialling an IP address) gets the * object's
// certificate or the default.
func (s *Store) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	n := s.snap.Load()
	name := strings.TrimSuffix(strings.ToLower(hello.ServerName), ".")
	if name != "" {
		if c := n.exact[name]; c != nil {
			return c, nil
		}
		for i := strings.IndexByte(name, '.'); i >= 0; {
			if c := n.wildcard[name[i:]]; c != nil {
				return c, nil
			}
			j := strings.IndexByte(name[i+1:], '.')
			if j < 0 {
				break
			}
			i += 1 + j
		}
	}
	if n.any != nil {
		return n.any, nil
	}
	if n.fallback != nil {
		return n.fallback, nil
	}
	return nil, fmt.Errorf("%w %q", ErrNoCertificate, hello.ServerName)
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
func (s *Store) Config() *tls.Config {
	return &tls.Config{
		GetCertificate: s.GetCertificate,
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
	}
}
