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
