package scaling

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// LoadTLS returns the server TLS configuration for a certificate and key file and, when caFile is not
// empty, a CA bundle that client certificates must chain to (KEDA's mutual TLS). The certificate is
// re-read on a handshake after either file changed, so a rotated Secret takes effect without a
// restart.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	r := &certReloader{certFile: certFile, keyFile: keyFile}
	if _, err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("reading client CA %s: %w", caFile, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", caFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
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
