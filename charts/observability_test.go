package charts_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/httpscale/httpscale/pkg/testenv"
)

var promtoolBin struct {
	once sync.Once
	path string
	err  error
}

// promtool returns Prometheus' rule checker: $PROMTOOL when set, else the one hack/tools.sh builds from
// the Go module proxy and caches.
func promtool(t *testing.T) string {
	t.Helper()
	promtoolBin.once.Do(func() {
		if promtoolBin.path = os.Getenv("PROMTOOL"); promtoolBin.path != "" {
			return
		}
		cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "tools.sh"), "promtool")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if promtoolBin.err = cmd.Run(); promtoolBin.err != nil {
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		promtoolBin.path = filepath.Join(lines[len(lines)-1], "promtool")
	})
	if promtoolBin.err != nil {
		t.Fatalf("hack/tools.sh promtool: %v", promtoolBin.err)
	}
	return promtoolBin.path
}

func runPromtool(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(promtool(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// ruleGroups renders the chart's PrometheusRule with extra helm args and returns its spec.groups.
func ruleGroups(t *testing.T, args ...string) []any {
	t.Helper()
	m := render(t, "httpscale-system", append([]string{"--set", "metrics.prometheusRule.enabled=true"}, args...)...)
	u, ok := m.find("PrometheusRule", "httpscale").(*unstructured.Unstructured)
	if !ok {
		t.Fatalf("no PrometheusRule httpscale in %v", m.keys())
	}
	groups, found, err := unstructured.NestedSlice(u.Object, "spec", "groups")
	if err != nil || !found {
		t.Fatalf("PrometheusRule spec.groups: %v (found %v)", err, found)
	}
	return groups
}

func writeRules(t *testing.T, path string, groups []any) {
	t.Helper()
	raw, err := yaml.Marshal(map[string]any{"groups": groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The alerts as `helm template` renders them load in Prometheus' own rule checker (expressions and
// annotation templates), and promtool's unit tests (testdata/alerts.test.yaml) show each alert firing
// on the series that should raise it, after its `for`, and not on healthy neighbours.
func TestAlertRulesWithPromtool(t *testing.T) {
	dir := t.TempDir()
	groups := ruleGroups(t)
	writeRules(t, filepath.Join(dir, "full.yaml"), groups)
	out := runPromtool(t, "check", "rules", filepath.Join(dir, "full.yaml"))
	var alerts []string
	var exprs []string
	for _, g := range groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			alerts = append(alerts, rule["alert"].(string))
			exprs = append(exprs, rule["expr"].(string))
			delete(rule, "annotations") // promtool's unit tests compare annotations verbatim
		}
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(alerts)); !strings.Contains(out, want) {
		t.Errorf("promtool check rules: %s, want %q", out, want)
	}
	for _, want := range []string{"HTTPScalePropagationStuck", "HTTPScaleHoldQueueNearLimit", "HTTPScaleSlowColdStarts", "HTTPScaleScalerCannotReachInterceptors"} {
		if !slices.Contains(alerts, want) {
			t.Errorf("no alert %s in %v", want, alerts)
		}
	}
	writeRules(t, filepath.Join(dir, "rules.yaml"), groups)
	tests, err := os.ReadFile(filepath.Join("testdata", "alerts.test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range alerts {
		if !regexp.MustCompile(`alertname: ` + a + `\s+exp_alerts:\s+- exp_labels`).Match(tests) {
			t.Errorf("testdata/alerts.test.yaml has no test in which %s fires", a)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(runPromtool(t, "test", "rules", filepath.Join(dir, "alerts.test.yaml")))
	checkDocumented(t, "alert rules", exprs)

	// Thresholds follow the values.
	for _, g := range ruleGroups(t, "--set", "metrics.prometheusRule.propagationLagSeconds=300,metrics.prometheusRule.alertLabels.team=web") {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			if rule["labels"].(map[string]any)["team"] != "web" {
				t.Errorf("%s: alertLabels not applied: %v", rule["alert"], rule["labels"])
			}
			if rule["alert"] == "HTTPScalePropagationStuck" && !strings.HasSuffix(rule["expr"].(string), "> 300") {
				t.Errorf("propagationLagSeconds=300 not applied: %s", rule["expr"])
			}
		}
	}
}

// Every query of the Grafana dashboard, as `helm template` renders it, is PromQL that Prometheus' parser
// accepts (promtool loads them as recording rules), and the dashboard covers what operators look at.
func TestDashboardQueriesWithPromtool(t *testing.T) {
	m := render(t, "httpscale-system", "--set", "metrics.dashboard.enabled=true")
	cm := get[*corev1.ConfigMap](t, m, "ConfigMap", "httpscale-dashboard")
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v: want grafana_dashboard=1 for Grafana's sidecar", cm.Labels)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["httpscale.json"]), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	// Grafana's variables, as a user's selection fills them in.
	vars := strings.NewReplacer("$namespace", "httpscale-system", "$app", ".*", "$__rate_interval", "1m")
	var rules []any
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			rules = append(rules, map[string]any{"record": fmt.Sprintf("httpscale:dashboard:panel_%d_%s", p.ID, tg.RefID), "expr": vars.Replace(tg.Expr)})
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard.yaml")
	writeRules(t, file, []any{map[string]any{"name": "dashboard", "rules": rules}})
	out := runPromtool(t, "check", "rules", file)
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(rules)); !strings.Contains(out, want) {
		t.Errorf("promtool check rules: %s, want %q", out, want)
	}
	all := strings.Join(exprs, "\n")
	for topic, metric := range map[string]string{
		"requests per app":   "httpscale_interceptor_requests_total",
		"held requests":      "httpscale_interceptor_held",
		"cold starts":        "httpscale_interceptor_cold_starts_total",
		"cold-start waits":   "httpscale_interceptor_cold_start_wait_seconds_bucket",
		"propagation":        "httpscale_operator_propagation_lag_seconds",
		"interceptor memory": `process_resident_memory_bytes{namespace="$namespace", app_kubernetes_io_component="interceptor"}`,
	} {
		if !strings.Contains(all, metric) {
			t.Errorf("the dashboard shows no %s (%s)", topic, metric)
		}
	}
	checkDocumented(t, "the dashboard", exprs)
}

var reMetricName = regexp.MustCompile(`\b(?:httpscale|process|go)_[a-z_]+`)

// checkDocumented fails for every metric exprs use that docs/metrics.md does not list.
func checkDocumented(t *testing.T, what string, exprs []string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range exprs {
		for _, name := range reMetricName.FindAllString(e, -1) {
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
			if !strings.Contains(string(doc), "`"+base+"`") {
				t.Errorf("%s use %s, which docs/metrics.md does not list", what, base)
			}
		}
	}
}

// On a cluster without KEDA's CRDs, `helm install` says so in its notes (the chart looks the CRD up),
// and with them it does not.
func TestNotesWarnWithoutKEDA(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets}
	if _, err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	notes := func() string {
		out, err := runHelm(t, "install", "httpscale", chartDir, "--namespace", "default", "--dry-run=server", "--kubeconfig", kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	const warning = "WARNING: KEDA's CRD scaledobjects.keda.sh is not installed"
	if out := notes(); !strings.Contains(out, warning) {
		t.Errorf("notes without KEDA lack %q:\n%s", warning, out)
	}
	keda, err := testenv.KEDACRDDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(env.Config, envtest.CRDInstallOptions{Paths: []string{keda}, MaxTime: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if out := notes(); strings.Contains(out, warning) {
		t.Errorf("notes with KEDA installed still warn:\n%s", out)
	}
}
