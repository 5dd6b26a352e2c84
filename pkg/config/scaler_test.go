package config

import (
	"flag"
	"strings"
	"testing"
	"time"
)

func parseScaler(t *testing.T, args ...string) (*Scaler, error) {
	t.Helper()
	s := &Scaler{}
	fs := flag.NewFlagSet("scaler", flag.ContinueOnError)
	s.Bind(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return s, s.Validate()
}

func TestScalerDefaults(t *testing.T) {
	s, err := parseScaler(t)
	if err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if s.GRPCAddr != ":9090" || s.Namespace != "httpscale-system" || s.InterceptorAdminPort != "admin" ||
		s.InterceptorSelector != "kubernetes.io/service-name=httpscale-interceptor-admin" ||
		s.PollInterval != 200*time.Millisecond || s.ProbeAddr != ":9191" || s.MetricsAddr != ":9190" || s.DrainDelay != 3*time.Second {
		t.Errorf("unexpected defaults: %+v", s)
	}
}

func TestScalerEnvironmentOverridesDefaults(t *testing.T) {
	t.Setenv("HTTPSCALE_POLL_INTERVAL", "1s")
	t.Setenv("POD_NAMESPACE", "custom")
	s, err := parseScaler(t)
	if err != nil {
		t.Fatal(err)
	}
	if s.PollInterval != time.Second || s.Namespace != "custom" {
		t.Errorf("poll interval %s namespace %q, want 1s custom", s.PollInterval, s.Namespace)
	}
}

func TestScalerValidateRejects(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--poll-interval=0s"}, "--poll-interval must be positive"},
		{[]string{"--stale-grace=500ms"}, "--stale-grace 500ms must be at least"},
		{[]string{"--tls-cert-file=a.crt"}, "must be set together"},
		{[]string{"--tls-client-ca-file=ca.crt"}, "needs --tls-cert-file"},
		{[]string{"--interceptor-admin-selector=a=b=c"}, "--interceptor-admin-selector"},
		{[]string{"--grpc-bind-address=9090"}, "--grpc-bind-address"},
		{[]string{"--drain-delay=-1s"}, "--drain-delay must not be negative"},
	} {
		_, err := parseScaler(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}
