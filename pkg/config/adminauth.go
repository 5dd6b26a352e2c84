package config

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/httpscale/httpscale/pkg/admin"
)

// Admin-port authentication modes (--admin-auth).
const (
	AdminAuthNone  = "none"
	AdminAuthToken = "token"
)

// AdminAuth configures who may call the interceptor's admin port (see admin.Auth).
type AdminAuth struct {
	// Mode is AdminAuthNone (anyone who can reach the port) or AdminAuthToken (ServiceAccount
	// tokens reviewed by the API server).
	Mode string
	// Audience the peers' tokens must be bound to.
	Audience string
	// AllowedServiceAccounts ("namespace/name") may call every path: the fleet's scaler and operator.
	AllowedServiceAccounts []string
}

// Bind registers the flags on fs.
func (a *AdminAuth) Bind(fs *flag.FlagSet) {
	fs.StringVar(&a.Mode, "admin-auth", AdminAuthNone, `Who may call the admin port's /status /counts /wake /metrics: "token" (ServiceAccount tokens reviewed by the API server; the probes stay open) or "none".`)
	fs.StringVar(&a.Audience, "admin-token-audience", admin.DefaultTokenAudience, "Audience the peers' ServiceAccount tokens must be bound to (--admin-auth=token).")
	fs.Func("admin-allowed-service-accounts", "Comma-separated ServiceAccounts (namespace/name) that may call the admin port (--admin-auth=token): the fleet's scaler and operator.", func(v string) error {
		a.AllowedServiceAccounts = nil
		for sa := range strings.SplitSeq(v, ",") {
			if sa = strings.TrimSpace(sa); sa != "" {
				a.AllowedServiceAccounts = append(a.AllowedServiceAccounts, sa)
			}
		}
		return nil
	})
}

// Validate reports every invalid setting; standalone tells whether the interceptor runs without
// Kubernetes (no API server to review tokens).
func (a *AdminAuth) Validate(standalone bool) error {
	switch a.Mode {
	case AdminAuthNone:
		return nil
	case AdminAuthToken:
	default:
		return fmt.Errorf("--admin-auth %q: want %q or %q", a.Mode, AdminAuthToken, AdminAuthNone)
	}
	var errs []error
	if standalone {
		errs = append(errs, errors.New("--admin-auth=token needs Kubernetes to review tokens; drop it or --standalone"))
	}
	if a.Audience == "" {
		errs = append(errs, errors.New("--admin-token-audience must not be empty with --admin-auth=token"))
	}
	if len(a.AllowedServiceAccounts) == 0 {
		errs = append(errs, errors.New("--admin-allowed-service-accounts must name the fleet's scaler and operator with --admin-auth=token"))
	}
	for _, sa := range a.AllowedServiceAccounts {
		ns, name, ok := strings.Cut(sa, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			errs = append(errs, fmt.Errorf("--admin-allowed-service-accounts: %q is not namespace/name", sa))
		}
	}
	return errors.Join(errs...)
}
