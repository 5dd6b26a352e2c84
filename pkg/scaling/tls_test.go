package scaling

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T) testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns PEM certificate and key for a leaf usable as server (127.0.0.1) and client.
func (ca testCA) issue(t *testing.T, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "httpscale-scaler"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:    x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMutualTLSRequiresAClientCertificateFromTheCA(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	srvCert, srvKey := ca.issue(t, 2)
	cliCert, cliKey := ca.issue(t, 3)
	tlsCfg, err := LoadTLS(writeFile(t, dir, "tls.crt", srvCert), writeFile(t, dir, "tls.key", srvKey), writeFile(t, dir, "ca.crt", ca.pem))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	pair, err := tls.X509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	withCert := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}))
	h := startHarness(t, harnessOptions{replicas: 1, server: ServerOptions{TLS: tlsCfg}, dial: []grpc.DialOption{withCert}})
	if h.isActive(appMD) {
		t.Error("active before traffic")
	}

	noCert, err := grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: roots})))
	if err != nil {
		t.Fatal(err)
	}
	defer noCert.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := externalscaler.NewExternalScalerClient(noCert).IsActive(ctx, ref(appMD)); err == nil {
		t.Error("IsActive without a client certificate succeeded, want a TLS error")
	}
}

func TestLoadTLSRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t)
	crt, key := ca.issue(t, 2)
	crtPath, keyPath := writeFile(t, dir, "tls.crt", crt), writeFile(t, dir, "tls.key", key)
	if _, err := LoadTLS(crtPath, filepath.Join(dir, "missing.key"), ""); err == nil {
		t.Error("missing key accepted")
	}
	if _, err := LoadTLS(crtPath, keyPath, writeFile(t, dir, "ca.crt", []byte("not pem"))); err == nil {
		t.Error("CA file without certificates accepted")
	}
	if cfg, err := LoadTLS(crtPath, keyPath, ""); err != nil || cfg.ClientAuth != tls.NoClientCert {
		t.Errorf("server-only TLS: %v, client auth %v; want no error and no client certificate", err, cfg.ClientAuth)
	}
}

// A rotated CA (a regenerated Secret: new CA, new server and client certificates) takes effect on
// the next handshake, without restarting the scaler: KEDA's new client certificate is accepted and
// one from the old CA is refused.
func TestMutualTLSFollowsARotatedCA(t *testing.T) {
	dir := t.TempDir()
	oldCA, newCA := newCA(t), newCA(t)
	srvCert, srvKey := oldCA.issue(t, 2)
	crtPath, keyPath, caPath := writeFile(t, dir, "tls.crt", srvCert), writeFile(t, dir, "tls.key", srvKey), writeFile(t, dir, "ca.crt", oldCA.pem)
	tlsCfg, err := LoadTLS(crtPath, keyPath, caPath)
	if err != nil {
		t.Fatal(err)
	}
	client := func(ca testCA, serial int64) *tls.Config {
		c, k := ca.issue(t, serial)
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(ca.pem)
		return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}}
	}
	h := startHarness(t, harnessOptions{replicas: 1, server: ServerOptions{TLS: tlsCfg}, dial: []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(client(oldCA, 3)))}})
	if h.isActive(appMD) {
		t.Error("active before traffic")
	}
	call := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = externalscaler.NewExternalScalerClient(conn).IsActive(ctx, ref(appMD))
		return err
	}
	// Rotate: files written as the kubelet updates a mounted Secret, with a later modification time.
	srvCert, srvKey = newCA.issue(t, 4)
	later := time.Now().Add(2 * time.Second)
	for path, data := range map[string][]byte{crtPath: srvCert, keyPath: srvKey, caPath: newCA.pem} {
		writeFile(t, dir, filepath.Base(path), data)
		if err := os.Chtimes(path, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if err := call(client(newCA, 5)); err != nil {
		t.Errorf("client certificate of the rotated CA: %v, want accepted", err)
	}
	if err := call(client(oldCA, 6)); err == nil {
		t.Error("client certificate of the old CA accepted after the rotation")
	}
}
