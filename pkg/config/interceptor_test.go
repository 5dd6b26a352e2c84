package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func parseInterceptor(t *testing.T, args ...string) (*Interceptor, error) {
	t.Helper()
	var c Interceptor
	fs := flag.NewFlagSet("interceptor", flag.ContinueOnError)
	c.Bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c, c.Validate()
}

func TestInterceptorDefaultsAndEnvironment(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "edge")
	t.Setenv("NODE_NAME", "node-1")
	t.Setenv("HTTPSCALE_QUEUE_LIMIT", "7")
	t.Setenv("HTTPSCALE_DRAIN_DELAY", "1s")
	c, err := parseInterceptor(t, "--readiness-timeout=30s")
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "edge" || c.NodeName != "node-1" || c.QueueLimit != 7 || c.DrainDelay != time.Second ||
		c.ReadinessTimeout != 30*time.Second || c.ProxyAddr != ":8080" || c.AdminAddr != ":9090" ||
		c.MetricsAddr != "0" || !c.ZoneAware {
		t.Errorf("unexpected configuration: %+v", c)
	}
}

func TestInterceptorValidateReportsEveryProblem(t *testing.T) {
	_, err := parseInterceptor(t, "--queue-limit=0", "--proxy-bind-address=nope", "--readiness-timeout=0s", "--drain-delay=-1s")
	if err == nil {
		t.Fatal("invalid configuration accepted")
	}
	for _, want := range []string{"--queue-limit", "--proxy-bind-address", "--readiness-timeout", "--drain-delay"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

func TestInterceptorTLSFlags(t *testing.T) {
	c, err := parseInterceptor(t, "--namespace=edge", "--tls-bind-address=:8443", "--tls-default-secret=fleet-tls")
	if err != nil {
		t.Fatal(err)
	}
	if key, err := c.TLSDefaultSecretKey(); err != nil || key != "edge/fleet-tls" {
		t.Errorf("default Secret %q, %v; want edge/fleet-tls (a bare name is in --namespace)", key, err)
	}
	c, err = parseInterceptor(t, "--tls-bind-address=:8443", "--tls-default-secret=certs/fleet-tls")
	if key, _ := c.TLSDefaultSecretKey(); err != nil || key != "certs/fleet-tls" {
		t.Errorf("default Secret %q, %v; want certs/fleet-tls", key, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tls-default-secret=fleet-tls"}, "--tls-default-secret needs --tls-bind-address"},
		{[]string{"--tls-bind-address=:8443", "--tls-default-secret=Fleet_TLS"}, "the Secret name must be a DNS subdomain"},
		{[]string{"--tls-bind-address=8443"}, "--tls-bind-address"},
		{[]string{"--tls-bind-address=:8443", "--standalone=routes.yaml"}, "works with Kubernetes only"},
	} {
		if _, err := parseInterceptor(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
}

func TestInterceptorHoldLimitsAndAdminAuth(t *testing.T) {
	c, err := parseInterceptor(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxHeldRequests != DefaultMaxHeldRequests || c.MaxHeldBytes != 256<<20 || c.MaxHeaderBytes != 32<<10 ||
		c.MaxQueueLimit != 10000 || c.MaxReadinessTimeout != 10*time.Minute || c.MaxRequestTimeout != time.Hour ||
		c.MemoryLimit != 0 || c.AdminAuth.Mode != AdminAuthNone || c.ResponseHeaderTimeout != 5*time.Minute || c.RequestTimeout != 0 {
		t.Errorf("defaults: %+v %+v, response-header timeout %s, request timeout %s", c.HoldLimits, c.AdminAuth, c.ResponseHeaderTimeout, c.RequestTimeout)
	}
	// A cap below the built-in response-header timeout lowers it (the proxy caps it) rather than
	// failing the start; a timeout the administrator chose above the cap fails (below).
	if _, err := parseInterceptor(t, "--max-request-timeout=1m"); err != nil {
		t.Errorf("--max-request-timeout=1m with the default response-header timeout: %v", err)
	}
	t.Setenv("HTTPSCALE_MEMORY_LIMIT", "536870912") // what the downward API gives: bytes
	c, err = parseInterceptor(t, "--max-held-bytes=1Gi", "--max-header-bytes=16Ki", "--admin-auth=token",
		"--admin-allowed-service-accounts=httpscale-system/httpscale-scaler, httpscale-system/httpscale-operator")
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxHeldBytes != 1<<30 || c.MaxHeaderBytes != 16<<10 || c.MemoryLimit != 512<<20 ||
		len(c.AdminAuth.AllowedServiceAccounts) != 2 || c.AdminAuth.AllowedServiceAccounts[1] != "httpscale-system/httpscale-operator" {
		t.Errorf("parsed: %+v %+v", c.HoldLimits, c.AdminAuth)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-header-bytes=1Ki"}, "--max-header-bytes"},
		{[]string{"--max-held-requests=-1"}, "--max-held-requests"},
		{[]string{"--queue-limit=20000"}, "above --max-queue-limit"},
		{[]string{"--readiness-timeout=1h"}, "above --max-readiness-timeout"},
		{[]string{"--request-timeout=2h"}, "above --max-request-timeout"},
		{[]string{"--response-header-timeout=2h"}, "--response-header-timeout 2h0m0s is above"},
		{[]string{"--admin-auth=maybe"}, "--admin-auth"},
		{[]string{"--admin-auth=token"}, "must name the fleet's scaler and operator"},
		{[]string{"--admin-auth=token", "--admin-allowed-service-accounts=scaler"}, "is not namespace/name"},
		{[]string{"--admin-auth=token", "--admin-allowed-service-accounts=a/b", "--standalone=routes.yaml"}, "needs Kubernetes"},
	} {
		if _, err := parseInterceptor(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want an error mentioning %q", tc.args, err, tc.want)
		}
	}
	var n int64
	for _, bad := range []string{"lots", "1.5", "-1Ki"} {
		if err := (bytesFlag{&n}).Set(bad); err == nil && bad != "-1Ki" {
			t.Errorf("byte count %q accepted", bad)
		}
	}
	if err := (bytesFlag{&n}).Set("-1Ki"); err != nil || n >= 0 {
		t.Errorf("-1Ki: %d %v (parsed; Validate refuses it)", n, err)
	}
}

func TestInterceptorTrustedProxies(t *testing.T) {
	c, err := parseInterceptor(t)
	if err != nil || c.TrustedProxies != "" {
		t.Fatalf("default --trusted-proxies %q, %v; want empty (trust nobody)", c.TrustedProxies, err)
	}
	t.Setenv("HTTPSCALE_TRUSTED_PROXIES", "10.0.0.0/8, fd00::/8")
	if c, err = parseInterceptor(t); err != nil || c.TrustedProxies != "10.0.0.0/8, fd00::/8" {
		t.Errorf("from the environment: %q, %v", c.TrustedProxies, err)
	}
	for _, arg := range []string{"--trusted-proxies=10.0.0.1/8", "--trusted-proxies=ingress-nginx"} {
		if _, err := parseInterceptor(t, arg); err == nil || !strings.Contains(err.Error(), "--trusted-proxies") {
			t.Errorf("%s: got %v, want an error naming --trusted-proxies", arg, err)
		}
	}
}
