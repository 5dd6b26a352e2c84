package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy"
)

// writeKubeconfig writes a kubeconfig for a server nobody dials (RESTConfig only reads the file).
func writeKubeconfig(t *testing.T, path string) {
	t.Helper()
	const kc = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
}

func parseCommon(t *testing.T, args ...string) (*Common, error) {
	t.Helper()
	var c Common
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	c.bind(fs, ":1", ":2")
	c.loadEnv(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &c, c.validate()
}

// The rate limit reaches the rest.Config whichever source the connection settings come from; a zero
// QPS there would be client-go's hidden 5 requests/s.
func TestRESTConfigAppliesRateLimitToEverySource(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "explicit")
	writeKubeconfig(t, file)

	for _, tc := range []struct {
		name       string
		env        map[string]string
		args       []string
		qps        float32
		burst      int
		kubeconfig string
	}{
		{name: "--kubeconfig, defaults", args: []string{"--kubeconfig=" + file}, qps: -1, burst: 100, kubeconfig: file},
		{name: "$KUBECONFIG, flags", env: map[string]string{"KUBECONFIG": file}, args: []string{"--kube-api-qps=50", "--kube-api-burst=80"}, qps: 50, burst: 80, kubeconfig: file},
		{name: "--kubeconfig, environment", env: map[string]string{"HTTPSCALE_KUBE_API_QPS": "7.5", "HTTPSCALE_KUBE_API_BURST": "9"}, args: []string{"--kubeconfig=" + file}, qps: 7.5, burst: 9, kubeconfig: file},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("KUBECONFIG", "")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			c, err := parseCommon(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if c.Kubeconfig != tc.kubeconfig {
				t.Errorf("kubeconfig %q, want %q", c.Kubeconfig, tc.kubeconfig)
			}
			cfg, err := c.RESTConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != "https://127.0.0.1:1" || cfg.QPS != tc.qps || cfg.Burst != tc.burst {
				t.Errorf("host %s qps %v burst %d, want https://127.0.0.1:1 %v %d", cfg.Host, cfg.QPS, cfg.Burst, tc.qps, tc.burst)
			}
		})
	}
}

// Without --kubeconfig, controller-runtime's loading rules find the connection (in-cluster, $KUBECONFIG,
// ~/.kube/config) and turn client-side limiting off themselves; an explicit setting still wins.
func TestRESTConfigAppliesRateLimitToDefaultLoading(t *testing.T) {
	file := filepath.Join(t.TempDir(), "kubeconfig")
	writeKubeconfig(t, file)
	t.Setenv("KUBECONFIG", file) // read by the loading rules, not through the flag: Kubeconfig stays empty
	for _, c := range []Common{{KubeAPIQPS: 30, KubeAPIBurst: 60}, {KubeAPIQPS: -1, KubeAPIBurst: 100}} {
		cfg, err := c.RESTConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Host != "https://127.0.0.1:1" || cfg.QPS != float32(c.KubeAPIQPS) || cfg.Burst != c.KubeAPIBurst {
			t.Errorf("host %s qps %v burst %d, want https://127.0.0.1:1 %v %d", cfg.Host, cfg.QPS, cfg.Burst, c.KubeAPIQPS, c.KubeAPIBurst)
		}
	}
}

func TestRateLimitValidation(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" means valid
	}{
		{[]string{"--kube-api-qps=-1"}, ""},
		{[]string{"--kube-api-qps=0.5", "--kube-api-burst=1"}, ""},
		{[]string{"--kube-api-qps=0"}, "--kube-api-qps 0: want a positive number"},
		{[]string{"--kube-api-qps=-5"}, "--kube-api-qps -5: want a positive number"},
		{[]string{"--kube-api-qps=NaN"}, "--kube-api-qps NaN"},
		{[]string{"--kube-api-burst=0"}, "--kube-api-burst 0: want at least 1"},
	} {
		_, err := parseCommon(t, tc.args...)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v rejected: %v", tc.args, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

// A variable that does not parse is a startup error naming it, not a silent fall back to the default.
func TestInvalidEnvironmentIsAnError(t *testing.T) {
	t.Setenv("HTTPSCALE_QUEUE_LIMIT", "1k")
	t.Setenv("HTTPSCALE_ZONE_AWARE", "yes please")
	t.Setenv("HTTPSCALE_DRAIN_DELAY", "5")
	t.Setenv("HTTPSCALE_KUBE_API_QPS", "fast")
	_, err := parseInterceptor(t, "--queue-limit=10") // a flag does not excuse a broken variable
	if err == nil {
		t.Fatal("invalid environment accepted")
	}
	for _, want := range []string{
		`HTTPSCALE_QUEUE_LIMIT="1k" (sets --queue-limit): want an integer`,
		`HTTPSCALE_ZONE_AWARE="yes please" (sets --zone-aware): want true or false`,
		`HTTPSCALE_DRAIN_DELAY="5" (sets --drain-delay): want a duration`,
		`HTTPSCALE_KUBE_API_QPS="fast" (sets --kube-api-qps): want a number`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "--queue-limit 0") || strings.Contains(err.Error(), "--kube-api-qps 0") {
		t.Errorf("error %q also complains about the zero a failed parse left behind", err)
	}
}

func TestEnvironmentValidatedLikeFlags(t *testing.T) {
	t.Setenv("HTTPSCALE_QUEUE_LIMIT", "0")
	_, err := parseInterceptor(t)
	if err == nil || !strings.Contains(err.Error(), "--queue-limit 0: want at least 1") {
		t.Errorf("HTTPSCALE_QUEUE_LIMIT=0: error %v", err)
	}
}

func TestFallbackVariables(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "from-pod")
	t.Setenv("NODE_NAME", "node-a")
	c, err := parseInterceptor(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "from-pod" || c.NodeName != "node-a" {
		t.Errorf("namespace %q node %q, want from-pod node-a", c.Namespace, c.NodeName)
	}
	t.Setenv("HTTPSCALE_NAMESPACE", "explicit")
	if c, _ = parseInterceptor(t); c.Namespace != "explicit" {
		t.Errorf("HTTPSCALE_NAMESPACE does not win over POD_NAMESPACE: %q", c.Namespace)
	}
}

// The interceptor's defaults are the proxy library's, defined once.
func TestInterceptorDefaultsArePkgProxys(t *testing.T) {
	c, err := parseInterceptor(t)
	if err != nil {
		t.Fatal(err)
	}
	d := proxy.Defaults
	if c.ReadinessTimeout != d.ReadinessTimeout || c.QueueLimit != d.QueueLimit || c.RetryAfter != d.RetryAfter ||
		c.DialTimeout != d.DialTimeout || c.MaxConnsPerEndpoint != d.MaxConnsPerEndpoint || c.ClusterDomain != d.ClusterDomain ||
		c.UpstreamDeadPeerTimeout != d.DeadPeerTimeout {
		t.Errorf("interceptor defaults %+v differ from proxy.Defaults %+v", c, d)
	}
	if c.RetryAfter != 5*time.Second || c.QueueLimit != 1000 {
		t.Errorf("retry-after %s queue-limit %d, want the documented 5s and 1000", c.RetryAfter, c.QueueLimit)
	}
}

func TestUpstreamDeadPeerTimeout(t *testing.T) {
	for _, v := range []string{"1s", "-1s"} {
		_, err := parseInterceptor(t, "--upstream-dead-peer-timeout="+v)
		if err == nil || !strings.Contains(err.Error(), "--upstream-dead-peer-timeout "+v+": want 0 (off) or at least 2s") {
			t.Errorf("--upstream-dead-peer-timeout=%s: error %v, want 0 (off) or at least 2s", v, err)
		}
	}
	for _, v := range []string{"0s", "2s", "1m"} {
		if _, err := parseInterceptor(t, "--upstream-dead-peer-timeout="+v); err != nil {
			t.Errorf("--upstream-dead-peer-timeout=%s rejected: %v", v, err)
		}
	}
}

func TestRetryAfterBelowOneSecondRejected(t *testing.T) {
	for _, v := range []string{"0s", "500ms", "-1s"} {
		_, err := parseInterceptor(t, "--retry-after="+v)
		if err == nil || !strings.Contains(err.Error(), "--retry-after "+v) || !strings.Contains(err.Error(), "want at least 1s") {
			t.Errorf("--retry-after=%s: error %v, want at least 1s", v, err)
		}
	}
	if _, err := parseInterceptor(t, "--retry-after=1s"); err != nil {
		t.Errorf("--retry-after=1s rejected: %v", err)
	}
}
