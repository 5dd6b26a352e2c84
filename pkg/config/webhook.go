package config

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Webhook configures the operator's validating admission webhook and its serving certificate.
type Webhook struct {
	// BindAddress serves the webhook; "0" disables it.
	BindAddress string
	// SelfManagedCerts: the operator generates, stores, rotates and publishes its own certificate.
	// Set false when cert-manager provides the certificate in CertDir.
	SelfManagedCerts bool
	// CertDir holds tls.crt and tls.key when certificates are not self-managed.
	CertDir string
	// ServiceName is the webhook Service (the certificate covers its DNS names).
	ServiceName string
	// SecretName stores the self-managed CA and certificate in the install namespace.
	SecretName string
	// ConfigurationName is the ValidatingWebhookConfiguration (and the MutatingWebhookConfiguration of the
	// same name, if any) whose caBundle is kept current.
	ConfigurationName string
	// CAValidity and CertValidity are certificate lifetimes (renewed two thirds in).
	CAValidity, CertValidity time.Duration
}

// Bind registers the webhook flags on fs (Operator.Bind reads the environment).
func (w *Webhook) Bind(fs *flag.FlagSet) {
	fs.StringVar(&w.BindAddress, "webhook-bind-address", ":9443", `Address the admission webhooks (validating, and mutating for the finalizer) serve on; "0" disables them.`)
	fs.BoolVar(&w.SelfManagedCerts, "webhook-self-managed-certs", true, "Generate, rotate and publish the webhook's serving certificate; false reads it from --webhook-cert-dir (cert-manager).")
	fs.StringVar(&w.CertDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs", "Folder with tls.crt and tls.key when certificates are not self-managed.")
	fs.StringVar(&w.ServiceName, "webhook-service-name", "httpscale-operator-webhook", "Service the API server reaches the webhook through.")
	fs.StringVar(&w.SecretName, "webhook-secret-name", "httpscale-operator-webhook-tls", "Secret in the install namespace holding the self-managed CA and certificate.")
	fs.StringVar(&w.ConfigurationName, "webhook-configuration-name", "httpscale-operator-webhook", "ValidatingWebhookConfiguration, and MutatingWebhookConfiguration of the same name if it exists, whose caBundle is kept current.")
	fs.DurationVar(&w.CAValidity, "webhook-ca-validity", 10*365*24*time.Hour, "Lifetime of the self-managed CA.")
	fs.DurationVar(&w.CertValidity, "webhook-cert-validity", 365*24*time.Hour, "Lifetime of the self-managed serving certificate.")
}

// Validate reports every invalid webhook setting.
func (w *Webhook) Validate() error {
	if w.BindAddress == "0" {
		return nil
	}
	errs := []error{validateAddr("webhook-bind-address", w.BindAddress)}
	if w.SelfManagedCerts {
		for name, v := range map[string]string{"webhook-service-name": w.ServiceName, "webhook-secret-name": w.SecretName, "webhook-configuration-name": w.ConfigurationName} {
			if v == "" {
				errs = append(errs, fmt.Errorf("--%s must not be empty with self-managed certificates", name))
			}
		}
		if w.CertValidity < time.Hour || w.CAValidity < w.CertValidity {
			errs = append(errs, fmt.Errorf("--webhook-cert-validity (%s) must be at least 1h and no longer than --webhook-ca-validity (%s)", w.CertValidity, w.CAValidity))
		}
	} else if w.CertDir == "" {
		errs = append(errs, errors.New("--webhook-cert-dir must not be empty when certificates are not self-managed"))
	}
	return errors.Join(errs...)
}

// Schedules configures scheduled scaling.
type Schedules struct {
	// StartingDeadline is how late an execution missed while the operator was down may still be applied.
	StartingDeadline time.Duration
}

// Bind registers the schedule flags on fs.
func (s *Schedules) Bind(fs *flag.FlagSet) {
	fs.DurationVar(&s.StartingDeadline, "schedule-starting-deadline", time.Hour, "How late a schedule execution missed while the operator was down may still be applied; later ones are recorded as missed.")
}

// Validate reports an invalid schedule setting.
func (s *Schedules) Validate() error {
	if s.StartingDeadline < 10*time.Second {
		return fmt.Errorf("--schedule-starting-deadline must be at least 10s (reconciles can start a few seconds late), got %s", s.StartingDeadline)
	}
	return nil
}
