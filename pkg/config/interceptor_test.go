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
