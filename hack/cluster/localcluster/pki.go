package localcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// ca is a certificate authority held in memory while the PKI is written.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(cn string) (*ca, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return &ca{cert: cert, key: key}, pemBlock("CERTIFICATE", der), nil
}

// issue signs a leaf certificate usable as server and client (KEDA's gRPC link needs both).
func (c *ca) issue(cn string, orgs, dns []string, ips []string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn, Organization: orgs},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pemBlock("CERTIFICATE", der), pemBlock("EC PRIVATE KEY", kder), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// writePKI writes every key and certificate the cluster needs into PKIDir:
//
//	ca.crt/key             cluster CA; signs serving certificates (apiserver, KEDA)
//	apiserver.crt/key      kube-apiserver serving certificate
//	sa.key/sa.pub          service-account token signing key
//	front-proxy-ca.crt     aggregation: the CA of the client certificate the apiserver shows to extension servers
//	front-proxy-client.crt/key
//	apiserver-kubelet-client.crt/key, kubelet-<zone>.crt/key   real nodes only
//	keda/{ca.crt,tls.crt,tls.key}   KEDA operator <-> adapter mutual TLS and the adapter's serving certificate
//
// The httpscale operator's webhook certificate is not here: the operator issues its own, as installed.
func (c Config) writePKI() error {
	dir := c.PKIDir()
	for _, d := range []string{dir, filepath.Join(dir, "keda")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	files := map[string][]byte{}
	clusterCA, caPEM, err := newCA("httpscale-local-ca")
	if err != nil {
		return fmt.Errorf("creating cluster CA: %w", err)
	}
	files["ca.crt"] = caPEM
	files["ca.key"] = pemKey(clusterCA.key)
	_, svcNet, err := net.ParseCIDR(c.ServiceCIDR)
	if err != nil {
		return fmt.Errorf("service CIDR %q: %w", c.ServiceCIDR, err)
	}
	firstSvc := append(net.IP(nil), svcNet.IP.To4()...)
	firstSvc[3]++
	crt, key, err := clusterCA.issue("kube-apiserver", nil,
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"},
		[]string{c.HostIP, "127.0.0.1", firstSvc.String()})
	if err != nil {
		return err
	}
	files["apiserver.crt"], files["apiserver.key"] = crt, key

	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	files["sa.key"] = pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey))
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	files["sa.pub"] = pemBlock("PUBLIC KEY", pub)

	fpCA, fpPEM, err := newCA("front-proxy-ca")
	if err != nil {
		return err
	}
	files["front-proxy-ca.crt"] = fpPEM
	if files["front-proxy-client.crt"], files["front-proxy-client.key"], err = fpCA.issue("front-proxy-client", nil, nil, nil); err != nil {
		return err
	}

	if c.RealNodes {
		// kube-apiserver -> kubelet (logs, exec) authenticates as an administrator; each kubelet
		// serves with a certificate for its node address.
		if files["apiserver-kubelet-client.crt"], files["apiserver-kubelet-client.key"], err = clusterCA.issue(
			"kube-apiserver-kubelet-client", []string{"system:masters"}, nil, nil); err != nil {
			return err
		}
		for _, n := range c.Real {
			if files["kubelet-"+n.Zone+".crt"], files["kubelet-"+n.Zone+".key"], err = clusterCA.issue(
				"system:node:"+n.Name, []string{"system:nodes"}, []string{n.Name}, []string{n.IP}); err != nil {
				return err
			}
		}
	}

	files["keda/ca.crt"] = caPEM
	if files["keda/tls.crt"], files["keda/tls.key"], err = clusterCA.issue("keda", nil,
		[]string{"localhost", "keda-operator.keda.svc", "keda-operator.keda.svc.cluster.local",
			"keda-metrics-apiserver.keda.svc", "keda-metrics-apiserver.keda.svc.cluster.local"},
		[]string{"127.0.0.1", c.KEDAAdapterIP}); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func pemKey(k *ecdsa.PrivateKey) []byte {
	der, _ := x509.MarshalECPrivateKey(k)
	return pemBlock("EC PRIVATE KEY", der)
}
