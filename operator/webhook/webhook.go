// Package webhook is the operator's admission webhooks for HTTPScaledObjects (validating, and
// mutating to put the fleet's finalizer on new objects) and the self-managed serving certificate they
// are reached with (generated, stored in a Secret, rotated, and trusted through the webhook
// configurations' caBundle), or a certificate cert-manager mounts.
package webhook

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/tenancy"
	"github.com/httpscale/httpscale/pkg/config"
)

// Options configure the webhook server and its certificate.
type Options struct {
	// BindAddress is host:port the webhook serves on; "0" disables the webhook.
	BindAddress string
	// SelfManagedCerts makes the operator create, store, rotate and publish its own certificate. When
	// false the certificate is read from CertDir (tls.crt, tls.key), e.g. mounted from cert-manager, and
	// reloaded when the files change.
	SelfManagedCerts bool
	CertDir          string
	// Namespace, ServiceName and SecretName: where the webhook Service and the certificate Secret live.
	Namespace, ServiceName, SecretName string
	// WebhookConfigurationName is the ValidatingWebhookConfiguration whose caBundle is kept current.
	WebhookConfigurationName string
	// ExtraDNSNames and IPs are added to the Service's names in the serving certificate.
	ExtraDNSNames []string
	IPs           []net.IP
	// CAValidity and CertValidity are certificate lifetimes; each is renewed two thirds into it.
	CAValidity, CertValidity time.Duration
	// Location is the operator's zone for schedule rules without a timeZone (nil: UTC).
	Location *time.Location
	// Finalizer, when set, is put on new objects of Fleet in WatchNamespaces (all when empty) by the
	// mutating webhook at MutatePath (FinalizerOnCreate); empty serves no mutating webhook.
	Finalizer, Fleet string
	WatchNamespaces  []string
	// Now is the certificate clock; nil means time.Now.
	Now func() time.Time
	// ClusterDomain completes the cluster DNS names only their namespace may claim.
	ClusterDomain string
	// MaxEntryBytes is the per-object budget of a routing entry's stored form; zero checks none.
	MaxEntryBytes int
}

// OptionsFrom builds Options from the operator's configuration.
func OptionsFrom(c config.Webhook, namespace string) Options {
	return Options{
		BindAddress:              c.BindAddress,
		SelfManagedCerts:         c.SelfManagedCerts,
		CertDir:                  c.CertDir,
		Namespace:                namespace,
		ServiceName:              c.ServiceName,
		SecretName:               c.SecretName,
		WebhookConfigurationName: c.ConfigurationName,
		CAValidity:               c.CAValidity,
		CertValidity:             c.CertValidity,
		Location:                 time.Local,
	}
}

// Setup adds the webhook server (and, when self-managed, the CertManager) to mgr as Runnables that run
// on every replica, and a readiness check named "webhook" that passes once the server answers TLS. It
// returns the CertManager (nil when certificates are not self-managed or the webhook is disabled).
func Setup(mgr manager.Manager, o Options, log logr.Logger) (*CertManager, error) {
	if o.BindAddress == "0" {
		return nil, nil
	}
	host, portStr, err := net.SplitHostPort(o.BindAddress)
	if err != nil {
		return nil, fmt.Errorf("webhook bind address %q: %w", o.BindAddress, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port <= 0 {
		return nil, fmt.Errorf("webhook bind address %q: want a port number above 0", o.BindAddress)
	}
	serverOpts := ctrlwebhook.Options{Host: host, Port: port, CertDir: o.CertDir}
	var certs *CertManager
	if o.SelfManagedCerts {
		certs = &CertManager{
			Client:                   mgr.GetClient(),
			Reader:                   mgr.GetAPIReader(),
			Namespace:                o.Namespace,
			SecretName:               o.SecretName,
			WebhookConfigurationName: o.WebhookConfigurationName,
			DNSNames:                 append(ServiceDNSNames(o.ServiceName, o.Namespace), o.ExtraDNSNames...),
			IPs:                      o.IPs,
			CAValidity:               o.CAValidity,
			CertValidity:             o.CertValidity,
			Now:                      o.Now,
			Log:                      log.WithName("certs"),
		}
		serverOpts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.GetCertificate = certs.GetCertificate }}
		if err := mgr.Add(certs); err != nil {
			return nil, fmt.Errorf("adding webhook certificate manager: %w", err)
		}
	}
	server := ctrlwebhook.NewServer(serverOpts)
	// Host ownership reads the cache through tenancy's indexes (registered once per manager, by
	// whichever of the webhook and the controller comes first).
	if err := tenancy.IndexFields(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, err
	}
	fleet := o.Fleet
	if fleet == "" {
		fleet = v1.DefaultFleet
	}
	ten := &Tenancy{Client: mgr.GetClient(), Decider: tenancy.Decider{ClusterDomain: o.ClusterDomain}, Policies: &tenancy.PolicyCache{},
		Fleet: fleet, MaxEntryBytes: o.MaxEntryBytes}
	hook := admission.WithValidator[*v1.HTTPScaledObject](mgr.GetScheme(), Validator{Location: o.Location, Tenancy: ten})
	server.Register(Path, hook)
	server.Register(PolicyPath, admission.WithValidator[*v1.HTTPScalePolicy](mgr.GetScheme(), PolicyValidator{}))
	if o.Finalizer != "" {
		server.Register(MutatePath, &admission.Webhook{Handler: FinalizerOnCreate{Finalizer: o.Finalizer, Fleet: o.Fleet, Namespaces: o.WatchNamespaces}})
	}
	if err := mgr.Add(server); err != nil {
		return nil, fmt.Errorf("adding webhook server: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook", server.StartedChecker()); err != nil {
		return nil, fmt.Errorf("adding webhook readiness check: %w", err)
	}
	return certs, nil
}
