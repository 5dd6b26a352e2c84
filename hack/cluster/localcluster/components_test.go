package localcluster

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// The processes get the chart's own kubeApi values, in a form the binaries accept.
func TestChartKubeAPIEnvIsTheChartsDefault(t *testing.T) {
	env, err := Config{RepoRoot: testenv.RepoRoot()}.chartKubeAPIEnv()
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range env {
		name, value, _ := strings.Cut(kv, "=")
		t.Setenv(name, value)
	}
	var op config.Operator
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	op.Bind(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := op.Validate(); err != nil {
		t.Fatalf("environment %v rejected by the operator: %v", env, err)
	}
	// The chart's default is no client-side limit, the binaries' default too.
	if op.KubeAPIQPS != -1 || op.KubeAPIBurst != 100 {
		t.Errorf("environment %v gives qps %v burst %d, want the chart's -1 and 100", env, op.KubeAPIQPS, op.KubeAPIBurst)
	}
}

func TestChartKubeAPIEnvFollowsTheValuesFile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "charts", "httpscale")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "values.yaml"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("kubeApi:\n  qps: 7.5\n  burst: 1500000\n")
	env, err := Config{RepoRoot: root}.chartKubeAPIEnv()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"HTTPSCALE_KUBE_API_QPS=7.5", "HTTPSCALE_KUBE_API_BURST=1500000"}; !slices.Equal(env, want) {
		t.Errorf("env %v, want %v", env, want)
	}
	write("logging: {level: info}\n")
	if _, err := (Config{RepoRoot: root}).chartKubeAPIEnv(); err == nil || !strings.Contains(err.Error(), "kubeApi.qps") {
		t.Errorf("values without kubeApi: error %v", err)
	}
}
