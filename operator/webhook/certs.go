package webhook

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// Keys of the serving-certificate Secret (type kubernetes.io/tls plus the CA that signs the certificate).
const (
	KeyCert   = "tls.crt"
	KeyKey    = "tls.key"
	KeyCA     = "ca.crt" // the CA bundle: the current CA first, then earlier CAs that have not expired
	KeyCAKey  = "ca.key"
	skew      = time.Hour // certificates start this long before "now" to tolerate clock skew
	renewFrac = 3         // renew when 1/renewFrac of a certificate's lifetime is left
)

// certConfig says what the serving certificate must cover and how long certificates live.
type certConfig struct {
	DNSNames     []string
	IPs          []net.IP
	CAValidity   time.Duration
	CertValidity time.Duration
}

// renewAt is when a certificate is replaced: two thirds into its lifetime.
func renewAt(c *x509.Certificate) time.Time {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Add(-life / renewFrac)
}

// rotate returns the Secret data that should be stored at now, given the stored data (nil or partial on
// first start): it creates a CA and a serving certificate when missing or unusable, replaces the
// serving certificate two thirds into its lifetime or when the names it must cover change, and replaces
// the CA two thirds into its lifetime while keeping the old CA in the bundle until it expires, so
// clients holding the old bundle keep working. next is when rotate must run again.
func rotate(now time.Time, data map[string][]byte, cfg certConfig) (out map[string][]byte, next time.Time, changed bool, err error) {
	out = map[string][]byte{}
	caCerts := parseCerts(data[KeyCA])
	caKey, keyErr := parseKey(data[KeyCAKey])
	var ca *x509.Certificate
	if len(caCerts) > 0 && keyErr == nil && publicKeyMatches(caCerts[0], caKey) && now.Before(renewAt(caCerts[0])) {
		ca = caCerts[0]
	}
	var bundle []*x509.Certificate
	if ca == nil {
		changed = true
		ca, caKey, err = newCA(now, cfg.CAValidity)
		if err != nil {
			return nil, time.Time{}, false, err
		}
		bundle = append(bundle, ca)
	}
	for _, c := range caCerts {
		if now.Before(c.NotAfter) && !slices.ContainsFunc(bundle, c.Equal) {
			bundle = append(bundle, c)
		} else if !now.Before(c.NotAfter) {
			changed = true // an expired CA leaves the bundle
		}
	}

	leaf, leafOK := currentLeaf(now, data, ca, cfg)
	leafCert, leafKey := data[KeyCert], data[KeyKey]
	if !leafOK {
		changed = true
		leafCert, leafKey, leaf, err = newServingCert(now, ca, caKey, cfg)
		if err != nil {
			return nil, time.Time{}, false, err
		}
	}
	out[KeyCert], out[KeyKey] = leafCert, leafKey
	out[KeyCA] = encodeCerts(bundle)
	out[KeyCAKey], err = encodeKey(caKey)
	if err != nil {
		return nil, time.Time{}, false, err
	}
	if !bytes.Equal(out[KeyCA], data[KeyCA]) || !bytes.Equal(out[KeyCAKey], data[KeyCAKey]) {
		changed = true
	}
	next = renewAt(leaf)
	if r := renewAt(ca); r.Before(next) {
		next = r
	}
	return out, next, changed, nil
}

// currentLeaf returns the stored serving certificate if it is signed by ca, matches its key, covers
// every name and is not due for renewal.
func currentLeaf(now time.Time, data map[string][]byte, ca *x509.Certificate, cfg certConfig) (*x509.Certificate, bool) {
	if _, err := tls.X509KeyPair(data[KeyCert], data[KeyKey]); err != nil {
		return nil, false
	}
	certs := parseCerts(data[KeyCert])
	if len(certs) == 0 {
		return nil, false
	}
	leaf := certs[0]
	if leaf.CheckSignatureFrom(ca) != nil || !now.Before(renewAt(leaf)) || now.Before(leaf.NotBefore) {
		return nil, false
	}
	for _, n := range cfg.DNSNames {
		if !slices.Contains(leaf.DNSNames, n) {
			return nil, false
		}
	}
	for _, ip := range cfg.IPs {
		if !slices.ContainsFunc(leaf.IPAddresses, ip.Equal) {
			return nil, false
		}
	}
	return leaf, true
}

func newCA(now time.Time, validity time.Duration) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("httpscale-operator-webhook-ca@%d", now.Unix())},
		NotBefore:             now.Add(-skew),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	return ca, key, nil
}

func newServingCert(now time.Time, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cfg certConfig) (certPEM, keyPEM []byte, leaf *x509.Certificate, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generating serving key: %w", err)
	}
	notAfter := now.Add(cfg.CertValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	cn := "httpscale-operator-webhook"
	if len(cfg.DNSNames) > 0 {
		cn = cfg.DNSNames[0]
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     cfg.DNSNames,
		IPAddresses:  cfg.IPs,
		NotBefore:    now.Add(-skew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("signing serving certificate: %w", err)
	}
	leaf, err = x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parsing serving certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, leaf, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(fmt.Sprintf("reading random serial number: %v", err))
	}
	return n
}

func parseCerts(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, c)
		}
	}
}

func encodeCerts(certs []*x509.Certificate) []byte {
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return buf.Bytes()
}

func parseKey(data []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(data)
	if b == nil {
		return nil, errors.New("no PEM key")
	}
	k, err := x509.ParseECPrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parsing EC key: %w", err)
	}
	return k, nil
}

func encodeKey(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("encoding EC key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func publicKeyMatches(c *x509.Certificate, k *ecdsa.PrivateKey) bool {
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	return ok && pub.Equal(&k.PublicKey)
}
