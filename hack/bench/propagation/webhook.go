package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/operator/webhook"
)

// benchWebhook is the operator's webhook server as the chart installs it (the validating webhook,
// failure policy Fail, and optionally the mutating one that puts the finalizer on new objects,
// Ignore), reached
// by the API server at addr on loopback with a certificate this process makes for 127.0.0.1.
type benchWebhook struct {
	addr, certDir string
	caPEM         []byte
	mutating      bool // also the finalizer webhook
}

func newBenchWebhook(mutating bool) (*benchWebhook, error) {
	dir, err := os.MkdirTemp("", "propagation-webhook-")
	if err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "propagation bench webhook"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("webhook certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := os.WriteFile(filepath.Join(dir, "tls.crt"), certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "tls.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, err
	}
	return &benchWebhook{addr: freeAddr(), certDir: dir, caPEM: certPEM, mutating: mutating}, nil
}

// args are the operator's flags that serve the webhook with this certificate.
func (b *benchWebhook) args() []string {
	return []string{"--webhook-bind-address=" + b.addr, "--webhook-self-managed-certs=false", "--webhook-cert-dir=" + b.certDir}
}

// register waits until the operator's readiness (which includes its webhook server) passes on
// health, then installs the webhook configurations for the objects in namespaces.
func (b *benchWebhook) register(ctx context.Context, k8s client.Client, health string, namespaces []string) error {
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + health + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("operator not ready with its webhook after a minute (last: %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rules := func(ops ...admissionregistrationv1.OperationType) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{Operations: ops, Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"httpscale.dev"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"httpscaledobjects"}}}}
	}
	clientConfig := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + b.addr + path), CABundle: b.caPEM}
	}
	selector := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: namespaces}}}
	none := admissionregistrationv1.SideEffectClassNone
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "propagation-bench"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "httpscaledobjects.httpscale.dev", ClientConfig: clientConfig(webhook.Path), NamespaceSelector: selector,
			Rules:         rules(admissionregistrationv1.Create, admissionregistrationv1.Update),
			FailurePolicy: ptr.To(admissionregistrationv1.Fail), SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](10),
		}}}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "propagation-bench"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "finalizers.httpscaledobjects.httpscale.dev", ClientConfig: clientConfig(webhook.MutatePath), NamespaceSelector: selector,
			Rules:         rules(admissionregistrationv1.Create),
			FailurePolicy: ptr.To(admissionregistrationv1.Ignore), SideEffects: &none, AdmissionReviewVersions: []string{"v1"}, TimeoutSeconds: ptr.To[int32](3),
			ReinvocationPolicy: ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
		}}}
	configs := []client.Object{validating}
	if b.mutating {
		configs = append(configs, mutating)
	}
	for _, obj := range configs {
		if err := k8s.Create(ctx, obj); err != nil {
			return fmt.Errorf("installing the bench's webhook configuration: %w", err)
		}
	}
	if !b.mutating {
		return nil
	}
	// The mutating webhook fails open: prove that it answers (a dry run is admitted like a create).
	for {
		probe := newObject(1<<30, namespaces[0])
		if err := k8s.Create(ctx, probe, client.DryRunAll); err != nil {
			return fmt.Errorf("dry-run create through the webhooks: %w", err)
		}
		if len(probe.Finalizers) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the mutating webhook put no finalizer on a dry-run create within a minute")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (b *benchWebhook) cleanup() { os.RemoveAll(b.certDir) }
