package scaling

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// LoadTLS returns the server TLS configuration for a certificate and key file and, when caFile is not
// empty, a CA bundle that client certificates must chain to (KEDA's mutual TLS). The certificate and
// the CA bundle are re-read on a handshake after a file changed, so a rotated Secret (a new CA
// included) takes effect without a restart.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if caFile == "" {
		return cfg, nil
	}
	ca := &caReloader{file: caFile}
	if _, err := ca.load(); err != nil {
		return nil, err
	}
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		pool, err := ca.load()
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.GetConfigForClient = nil
		c.ClientCAs = pool
		return c, nil
	}
	return cfg, nil
}

// caReloader keeps the client CA pool of a file, read again when the file's modification time
// changes; a file that cannot be read or holds no certificate keeps the last good pool.
type caReloader struct {
	file string

	mu      sync.Mutex
	pool    *x509.CertPool
	modTime time.Time
}

func (c *caReloader) load() (*x509.CertPool, error) {
	st, statErr := os.Stat(c.file)
	c.mu.Lock()
	defer c.mu.Unlock()
	if statErr == nil && c.pool != nil && !st.ModTime().After(c.modTime) {
		return c.pool, nil
	}
	pool, err := readCAPool(c.file)
	if statErr != nil || err != nil {
		if c.pool != nil {
			return c.pool, nil // keep the last good pool while a rotation is half-written
		}
		return nil, errors.Join(statErr, err)
	}
	c.pool, c.modTime = pool, st.ModTime()
	return pool, nil
}

func readCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading client CA %s: %w", file, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client CA %s holds no PEM certificate", file)
	}
	return pool, nil
}

type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex
	cert    *tls.Certificate
	modTime time.Time
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	cert, err := r.load()
	if err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.cert != nil {
			return r.cert, nil // keep serving the last good certificate while a rotation is half-written
		}
		return nil, err
	}
	return cert, nil
}

// load returns the cached certificate unless a file is newer than it.
func (r *certReloader) load() (*tls.Certificate, error) {
	var newest time.Time
	for _, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("reading TLS file: %w", err)
		}
		if st.ModTime().After(newest) {
			newest = st.ModTime()
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cert != nil && !newest.After(r.modTime) {
		return r.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS certificate %s and key %s: %w", r.certFile, r.keyFile, err)
	}
	r.cert, r.modTime = &cert, newest
	return r.cert, nil
}
