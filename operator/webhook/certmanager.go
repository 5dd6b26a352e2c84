package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// +kubebuilder:rbac:groups="",namespace=httpscale-system,resources=secrets,verbs=get;create;update
// Only the release's own webhook configurations (the chart prefixes the name per fleet): update on
// every MutatingWebhookConfiguration would let a compromised operator re-point another product's
// (a sidecar injector, say) at itself.
// +kubebuilder:rbac:groups=admissionregistration.k8s.io,resources=validatingwebhookconfigurations;mutatingwebhookconfigurations,resourceNames=httpscale-operator-webhook,verbs=get;update

// CertManager keeps the webhook's serving certificate: it creates a CA and a certificate for the
// webhook Service's DNS names, stores them in a Secret in the install namespace (shared by all operator
// replicas), renews them two thirds into their lifetime, writes the CA bundle into the
// ValidatingWebhookConfiguration, and serves the current certificate to the webhook server through
// GetCertificate. It runs on every replica (no leader election): each serves the webhook. Creating and
// updating the Secret uses optimistic concurrency, so replicas agree on one certificate.
type CertManager struct {
	// Client writes the Secret and the ValidatingWebhookConfiguration.
	Client client.Client
	// Reader reads them without a cache (so the operator needs no Secret watch).
	Reader client.Reader
	// Namespace and SecretName locate the Secret.
	Namespace, SecretName string
	// WebhookConfigurationName is the ValidatingWebhookConfiguration whose caBundle is kept current.
	WebhookConfigurationName string
	// DNSNames and IPs the serving certificate covers.
	DNSNames []string
	IPs      []net.IP
	// CAValidity and CertValidity are certificate lifetimes.
	CAValidity, CertValidity time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	Log logr.Logger

	current atomic.Pointer[tls.Certificate]
}

// ServiceDNSNames returns the names a client may use for a Service: name, name.namespace,
// name.namespace.svc and name.namespace.svc.cluster.local.
func ServiceDNSNames(service, namespace string) []string {
	return []string{service, service + "." + namespace, service + "." + namespace + ".svc", service + "." + namespace + ".svc.cluster.local"}
}

// GetCertificate serves the current certificate (tls.Config.GetCertificate). It fails until the first
// successful Sync.
func (m *CertManager) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := m.current.Load(); c != nil {
		return c, nil
	}
	return nil, errors.New("webhook serving certificate not loaded yet")
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every replica serves the webhook.
func (m *CertManager) NeedLeaderElection() bool { return false }

// Start implements manager.Runnable: it syncs at once, then again when a certificate is due for
// renewal, at least hourly (to pick up another replica's rotation and repair a reset caBundle), and
// with backoff after errors.
func (m *CertManager) Start(ctx context.Context) error {
	backoff := time.Second
	for {
		next, err := m.Sync(ctx)
		wait := time.Hour
		if err != nil {
			m.Log.Error(err, "syncing webhook serving certificate", "retryIn", backoff)
			wait, backoff = backoff, min(2*backoff, time.Minute)
		} else {
			backoff = time.Second
			if d := next.Sub(m.now()); d < wait {
				wait = max(d, time.Second)
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (m *CertManager) now() time.Time {
	if m.Now != nil {
		return m.Now()
	}
	return time.Now()
}

// Sync makes the Secret, the webhook configuration's caBundle and the served certificate current, and
// returns when it must run next.
func (m *CertManager) Sync(ctx context.Context) (time.Time, error) {
	for attempt := 0; ; attempt++ {
		next, err := m.sync(ctx)
		if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 3 {
			continue // another replica wrote first: start over from what it wrote
		}
		return next, err
	}
}

func (m *CertManager) sync(ctx context.Context) (time.Time, error) {
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.SecretName}
	secret := &corev1.Secret{}
	err := m.Reader.Get(ctx, key, secret)
	found := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("reading Secret %s: %w", key, err)
	}
	data, next, changed, err := rotate(m.now(), secret.Data, certConfig{DNSNames: m.DNSNames, IPs: m.IPs, CAValidity: m.CAValidity, CertValidity: m.CertValidity})
	if err != nil {
		return time.Time{}, err
	}
	// Trust the new CA bundle (which still holds the previous CA) before any replica serves a certificate
	// signed by a new CA.
	// Without the configuration (chart not installed yet) nothing calls the webhook: carry on, and retry.
	vwcErr := m.patchCABundle(ctx, data[KeyCA])
	if vwcErr != nil && !apierrors.IsNotFound(vwcErr) {
		return time.Time{}, vwcErr
	}
	if changed {
		if !found {
			secret = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.SecretName, Labels: map[string]string{"app.kubernetes.io/managed-by": "httpscale-operator"}},
				Type:       corev1.SecretTypeTLS,
				Data:       data,
			}
			if err := m.Client.Create(ctx, secret); err != nil {
				return time.Time{}, fmt.Errorf("creating Secret %s: %w", key, err)
			}
		} else {
			secret.Data = data
			if err := m.Client.Update(ctx, secret); err != nil {
				return time.Time{}, fmt.Errorf("updating Secret %s: %w", key, err)
			}
		}
		m.Log.Info("webhook serving certificate written", "secret", key.String(), "renewAt", next)
	}
	cert, err := tls.X509KeyPair(data[KeyCert], data[KeyKey])
	if err != nil {
		return time.Time{}, fmt.Errorf("loading webhook serving certificate: %w", err)
	}
	m.current.Store(&cert)
	return next, vwcErr
}

// patchCABundle writes bundle into every webhook of the ValidatingWebhookConfiguration and of the
// MutatingWebhookConfiguration of the same name. The mutating one is optional (an install without
// it gets the finalizer from the routing controller instead).
func (m *CertManager) patchCABundle(ctx context.Context, bundle []byte) error {
	if m.WebhookConfigurationName == "" {
		return nil
	}
	key := types.NamespacedName{Name: m.WebhookConfigurationName}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := m.Reader.Get(ctx, key, vwc); err != nil {
		return fmt.Errorf("reading ValidatingWebhookConfiguration %s (is the chart installed with the webhook enabled?): %w", m.WebhookConfigurationName, err)
	}
	vcfgs := make([]*admissionregistrationv1.WebhookClientConfig, len(vwc.Webhooks))
	for i := range vwc.Webhooks {
		vcfgs[i] = &vwc.Webhooks[i].ClientConfig
	}
	if setCABundle(bundle, vcfgs) {
		if err := m.Client.Update(ctx, vwc); err != nil {
			return fmt.Errorf("writing caBundle of ValidatingWebhookConfiguration %s: %w", m.WebhookConfigurationName, err)
		}
		m.Log.Info("webhook caBundle updated", "validatingWebhookConfiguration", m.WebhookConfigurationName)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := m.Reader.Get(ctx, key, mwc); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", m.WebhookConfigurationName, err)
	}
	mcfgs := make([]*admissionregistrationv1.WebhookClientConfig, len(mwc.Webhooks))
	for i := range mwc.Webhooks {
		mcfgs[i] = &mwc.Webhooks[i].ClientConfig
	}
	if setCABundle(bundle, mcfgs) {
		if err := m.Client.Update(ctx, mwc); err != nil {
			return fmt.Errorf("writing caBundle of MutatingWebhookConfiguration %s: %w", m.WebhookConfigurationName, err)
		}
		m.Log.Info("webhook caBundle updated", "mutatingWebhookConfiguration", m.WebhookConfigurationName)
	}
	return nil
}

// setCABundle puts bundle into every client configuration and reports whether any changed.
func setCABundle(bundle []byte, cfgs []*admissionregistrationv1.WebhookClientConfig) (changed bool) {
	for _, c := range cfgs {
		if !bytes.Equal(c.CABundle, bundle) {
			c.CABundle = bundle
			changed = true
		}
	}
	return changed
}
