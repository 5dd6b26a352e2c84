//go:build e2e

package realnodes

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// chartNamespace is where the chart goes; the local cluster's KEDA and RBAC proof use the same one.
const chartNamespace = localcluster.Namespace

// scalerAddress is the chart's default scaler address (its Service's DNS name), which KEDA resolves
// through the cluster's DNS.
const scalerAddress = "httpscale-scaler." + chartNamespace + ".svc." + localcluster.ClusterDomain + ":9090"

// TestChartOnRealNodes installs charts/httpscale with its default values, our own images and only the
// overrides this cluster needs, on the real nodes: every component becomes Ready through its own
// probes, and a request to an app at zero replicas is held by a real interceptor pod, wakes the app
// through KEDA (as processes) and the scaler pod, and is answered with the cold-start header.
func TestChartOnRealNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("real nodes need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	progress := logWriter{t}
	name := os.Getenv("HTTPSCALE_CHART_CLUSTER_NAME")
	if name == "" {
		name = "chartreal-e2e"
	}
	cfg := localcluster.Default(name, repoRoot()).WithRealNodes()
	cfg.SampleAppPort = 0 // the sample app runs as real pods here, not as a process
	// cfg.KEDA stays true: KEDA's operator and metrics adapter run as processes in the namespace.

	if err := cfg.Down(progress); err != nil {
		t.Fatalf("tearing down a previous cluster %s: %v", name, err)
	}
	if err := cfg.ResolveTools(progress); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := cfg.Up(ctx, progress); err != nil {
		t.Fatal(err)
	}
	upTime := time.Since(t0)
	t.Cleanup(func() {
		if t.Failed() {
			_, _ = cfg.KubectlRun(context.Background(), "", "get", "pods", "-A", "-o", "wide")
			for _, c := range []string{"operator", "interceptor", "scaler"} {
				out, _ := cfg.KubectlRun(context.Background(), "", "-n", chartNamespace, "logs", "-l", "app.kubernetes.io/component="+c, "--tail=30", "--all-containers", "--prefix")
				t.Logf("logs of %s pods:\n%s", c, out)
			}
			cfg.DumpLogs(progress, 30)
		}
		if err := cfg.Down(progress); err != nil {
			t.Errorf("tearing down: %v", err)
		}
	})

	// Images: the release builder, amd64 only, tagged with the chart's appVersion so the chart's
	// default tag applies; pushed by the builder's own push to the registry in the namespace.
	appVersion := chartAppVersion(t)
	t0 = time.Now()
	tool := imagesTool(ctx, t)
	layouts := filepath.Join(t.TempDir(), "images") // OCI layouts, removed with the test
	digests := buildImages(ctx, t, tool, layouts, appVersion)
	buildTime := time.Since(t0)
	t0 = time.Now()
	registry := cfg.RegistryHost() + "/httpscale"
	pushImages(ctx, t, cfg, tool, layouts, registry, appVersion)
	pushTime := time.Since(t0)
	for c, d := range digests {
		t.Logf("image %s/%s:%s %s", registry, c, appVersion, d)
	}

	t0 = time.Now()
	helmInstall(ctx, t, cfg, registry)
	for _, c := range []string{"operator", "interceptor", "scaler"} {
		if _, err := cfg.KubectlRun(ctx, "", "-n", chartNamespace, "wait", "--for=condition=Available", "deployment/httpscale-"+c, "--timeout=5m"); err != nil {
			t.Fatal(err)
		}
	}
	for c, want := range map[string]int{"operator": 2, "interceptor": 2, "scaler": 1} {
		checkPods(ctx, t, cfg, c, want, digests[c])
	}
	readyTime := time.Since(t0)
	checkOperatorHA(ctx, t, cfg)

	cs := checkColdStart(ctx, t, cfg)

	t.Logf("timings: cluster up (real nodes, KEDA) %.1fs, image build %.1fs, push %.1fs, helm install -> all pods Ready %.1fs, cold start first request -> answered %s, KEDA back to zero %s",
		upTime.Seconds(), buildTime.Seconds(), pushTime.Seconds(), readyTime.Seconds(), cs.first.Round(time.Millisecond), cs.toZero.Round(time.Millisecond))
	t.Logf("%d wakes from zero, request -> answered: p50 %s, p99 %s, max %s", len(cs.wakes),
		percentile(cs.wakes, 50).Round(time.Millisecond), percentile(cs.wakes, 99).Round(time.Millisecond), slices.Max(cs.wakes).Round(time.Millisecond))
}

func chartAppVersion(t *testing.T) string {
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "charts", "httpscale", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("no appVersion in charts/httpscale/Chart.yaml")
	}
	return string(m[1])
}

// imagesTool builds the hack/images builder once per test.
func imagesTool(ctx context.Context, t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "images")
	cmd := exec.CommandContext(ctx, "go", "-C", filepath.Join(repoRoot(), "hack", "images"), "build", "-o", bin, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building hack/images: %v: %s", err, out)
	}
	return bin
}

// buildImages runs `images build` (as `make images` does, linux/amd64 only) into the OCI layouts under
// out and returns each component's image digest.
func buildImages(ctx context.Context, t *testing.T, tool, out, version string) map[string]string {
	cmd := exec.CommandContext(ctx, tool, "build", "--root", repoRoot(), "--out", out, "--version", version, "--platforms", "linux/amd64")
	stdout, err := cmd.Output()
	if err != nil {
		t.Fatalf("images build: %v: %s", err, exitStderr(err))
	}
	digests := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(stdout)))
	for sc.Scan() {
		// "<out>/<component>:<version> sha256:..."
		f := strings.Fields(sc.Text())
		if len(f) != 2 || !strings.HasPrefix(f[1], "sha256:") {
			continue
		}
		c, _, _ := strings.Cut(filepath.Base(f[0]), ":")
		digests[c] = f[1]
	}
	for _, c := range []string{"operator", "interceptor", "scaler"} {
		if digests[c] == "" {
			t.Fatalf("images build printed no digest for %s:\n%s", c, stdout)
		}
	}
	return digests
}

// pushImages runs `images push` inside the namespace, where the registry listens.
func pushImages(ctx context.Context, t *testing.T, cfg localcluster.Config, tool, layouts, registry, tag string) {
	cmd := cfg.Command(ctx, tool, "push", "--out", layouts, "--registry", registry, "--tag", tag)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("images push: %v: %s", err, out)
	}
	t.Logf("images push:\n%s", strings.TrimSpace(string(out)))
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// chartValues are the only values that differ from the chart's defaults here, each for a reason of
// this cluster, not of the chart.
func chartValues(registry string) string {
	return fmt.Sprintf(`# Our images, built from this commit and pushed to the registry inside the namespace (the tag stays
# the chart's appVersion).
operator: {image: {repository: %[1]s/operator}, nodeSelector: {type: real}}
# nodeSelector type=real: the cluster also has kwok's fake nodes, where no container would run.
interceptor: {image: {repository: %[1]s/interceptor}, nodeSelector: {type: real}}
scaler:
  image: {repository: %[1]s/scaler}
  nodeSelector: {type: real}
`, registry)
}

func helmInstall(ctx context.Context, t *testing.T, cfg localcluster.Config, registry string) {
	tools := exec.CommandContext(ctx, filepath.Join(repoRoot(), "hack", "tools.sh"), "helm")
	out, err := tools.Output()
	if err != nil {
		t.Fatalf("hack/tools.sh helm: %v: %s", err, exitStderr(err))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	helm := filepath.Join(lines[len(lines)-1], "helm")
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(chartValues(registry)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := cfg.Command(ctx, helm, "install", "httpscale", filepath.Join(repoRoot(), "charts", "httpscale"),
		"--namespace", chartNamespace, "--create-namespace", "--kubeconfig", cfg.AdminKubeconfig(), "--values", values)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helm install: %v: %s", err, out)
	}
}

type podInfo struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		PodIP      string `json:"podIP"`
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
		ContainerStatuses []struct {
			ImageID      string `json:"imageID"`
			Ready        bool   `json:"ready"`
			RestartCount int    `json:"restartCount"`
		} `json:"containerStatuses"`
	} `json:"status"`
}

func pods(ctx context.Context, t *testing.T, cfg localcluster.Config, ns, selector string) []podInfo {
	out, err := cfg.KubectlRun(ctx, "", "-n", ns, "get", "pods", "-l", selector, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var list struct{ Items []podInfo }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// checkPods: want Ready pods of the component, each on a real node, running the image we pushed.
func checkPods(ctx context.Context, t *testing.T, cfg localcluster.Config, component string, want int, digest string) {
	ps := pods(ctx, t, cfg, chartNamespace, "app.kubernetes.io/component="+component)
	ready := 0
	for _, p := range ps {
		if !strings.HasPrefix(p.Spec.NodeName, "real-") {
			t.Errorf("%s pod %s runs on node %q, want a real node", component, p.Metadata.Name, p.Spec.NodeName)
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Ready {
				ready++
			}
			if !strings.HasSuffix(cs.ImageID, "@"+digest) {
				t.Errorf("%s pod %s runs image %s, want the pushed digest %s", component, p.Metadata.Name, cs.ImageID, digest)
			}
			if cs.RestartCount != 0 {
				t.Errorf("%s pod %s restarted %d times", component, p.Metadata.Name, cs.RestartCount)
			}
		}
	}
	if ready != want {
		t.Errorf("%d %s pods Ready, want %d", ready, component, want)
	}
	t.Logf("%s: %d pods Ready on real nodes, image %s", component, ready, digest)
}

// checkOperatorHA: two operator replicas, one elected leader, and the webhook served with the
// operator's self-managed certificate (the API server rejects an invalid HTTPScaledObject through it).
func checkOperatorHA(ctx context.Context, t *testing.T, cfg localcluster.Config) {
	holder, err := cfg.KubectlRun(ctx, "", "-n", chartNamespace, "get", "lease", "operator.httpscale.dev", "-o", "jsonpath={.spec.holderIdentity}")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods(ctx, t, cfg, chartNamespace, "app.kubernetes.io/component=operator") {
		names = append(names, p.Metadata.Name)
	}
	found := false
	for _, n := range names {
		found = found || strings.HasPrefix(holder, n)
	}
	if !found {
		t.Errorf("leader lease holder %q is none of the operator pods %v", holder, names)
	}
	bad := `apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata: {name: invalid, namespace: default}
spec:
  hosts: [invalid.example]
  scaleTargetRef: {name: app, service: app, port: 80}
  schedules: [{name: never, schedule: "61 8 * * *", targetMinReplicas: 1}]
`
	// Only the webhook judges cron syntax (the CRD's schema cannot); kubectl prints a webhook's
	// Invalid denial by its causes, without the "admission webhook ... denied" prefix.
	_, err = cfg.KubectlRun(ctx, bad, "apply", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), `schedule "61 8 * * *" is not a valid 5-field cron expression`) {
		t.Errorf("an HTTPScaledObject with an invalid cron schedule: got %v, want a denial from the operator's webhook", err)
	}
	ca, err2 := cfg.KubectlRun(ctx, "", "get", "validatingwebhookconfiguration", "httpscale-operator-webhook", "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}")
	if err2 != nil || len(ca) < 100 {
		t.Errorf("webhook caBundle not patched by the operator: %q %v", ca, err2)
	}
	t.Logf("operator: leader %s; webhook (self-managed certificate) denied an invalid object: %v", holder, err)
}

const appHost = "chart.realnodes.test"

// checkColdStart creates the sample app at zero replicas and an HTTPScaledObject for it, sends one
// request through the interceptor Service, waits for KEDA to scale the app back to zero, then wakes it
// wakeCount more times.
func checkColdStart(ctx context.Context, t *testing.T, cfg localcluster.Config) coldStarts {
	bin := filepath.Join(t.TempDir(), "sampleapp")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./e2e/sampleapp")
	build.Dir, build.Env = repoRoot(), append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the sample app: %v: %s", err, out)
	}
	image := cfg.RegistryHost() + "/sampleapp:chart-e2e"
	if err := cfg.PushImage(ctx, image, bin); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Apply(ctx, scaledAppManifests(cfg, image)); err != nil {
		t.Fatal(err)
	}
	// Every interceptor pod routes the host before the first request.
	waitFor(ctx, t, 60*time.Second, "the HTTPScaledObject routed by both interceptors", func() (bool, string) {
		out, err := cfg.KubectlRun(ctx, "", "-n", "default", "get", "hso", "app", "-o", "jsonpath={.status.routing.interceptorsReady}/{.status.routing.interceptorsTotal}")
		return err == nil && out == "2/2", fmt.Sprint(out, err)
	})
	addr, err := cfg.KubectlRun(ctx, "", "-n", "default", "get", "scaledobject", "app", "-o", `jsonpath={.spec.triggers[0].metadata.scalerAddress}`)
	if err != nil || addr != scalerAddress {
		t.Fatalf("ScaledObject app scalerAddress = %q (%v), want %s", addr, err, scalerAddress)
	}
	if got := replicas(ctx, t, cfg); got != "0" {
		t.Fatalf("app replicas before the request = %s, want 0", got)
	}
	proxyIP, err := cfg.KubectlRun(ctx, "", "-n", chartNamespace, "get", "service", "httpscale-interceptor", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		t.Fatal(err)
	}

	client := cfg.HTTPClient()
	client.Timeout = 2 * time.Minute
	url := fmt.Sprintf("http://%s:8080/hello", proxyIP)
	var r coldStarts
	r.first = coldRequest(ctx, t, cfg, client, url)

	// Back to zero by KEDA alone: no traffic for scaledownPeriod (5s), noticed at KEDA's next poll.
	t0 := time.Now()
	scaledToZero(ctx, t, cfg, 2*time.Minute)
	r.toZero = time.Since(t0)
	t.Logf("KEDA scaled the app back to 0 after %s", r.toZero.Round(time.Millisecond))

	r.wakes = wakes(ctx, t, cfg, client, url, wakeCount(t))
	return r
}

// wakeCount is how many timed wakes follow the first: HTTPSCALE_CHART_WAKES, or 5 in `make test`
// (each waits for KEDA's 30 s poll to report the app idle). The figures in docs/benchmarks.md are
// from HTTPSCALE_CHART_WAKES=20.
func wakeCount(t *testing.T) int {
	v := os.Getenv("HTTPSCALE_CHART_WAKES")
	if v == "" {
		return 5
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("HTTPSCALE_CHART_WAKES=%q: want a positive whole number", v)
	}
	return n
}

// coldStarts: the first request's time to an answer, the time KEDA took to scale back to zero, and the
// times of the repeated wakes.
type coldStarts struct {
	first, toZero time.Duration
	wakes         []time.Duration
}

// percentile returns the nearest-rank percentile p (0-100] of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}

// coldRequest sends one request for appHost while the app has no pods and checks that the interceptor
// held it until a real pod was Ready and the app answered; it returns the time to the answer.
func coldRequest(ctx context.Context, t *testing.T, cfg localcluster.Config, client *http.Client, url string) time.Duration {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = appHost
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s with Host %s: %v", url, appHost, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("cold request: %d %s", resp.StatusCode, body)
	}
	var ans struct {
		PodIP string `json:"podIP"`
		Host  string `json:"host"`
		Path  string `json:"path"`
	}
	if err := json.Unmarshal(body, &ans); err != nil || ans.Host != appHost || ans.Path != "/hello" {
		t.Errorf("cold request body %q (%v), want the sample app's answer for %s/hello", body, err, appHost)
	}
	if got := resp.Header.Get("X-Httpscale-Cold-Start"); got != "true" {
		t.Errorf("X-Httpscale-Cold-Start = %q, want true (the request was not held)", got)
	}
	if got := replicas(ctx, t, cfg); got == "0" || got == "" {
		t.Errorf("app replicas after the cold request = %q, want >= 1", got)
	}
	var onReal bool
	for _, p := range pods(ctx, t, cfg, "default", "app=app") {
		onReal = onReal || (strings.HasPrefix(p.Spec.NodeName, "real-") && p.Status.PodIP == ans.PodIP)
	}
	if !onReal {
		t.Errorf("the answer came from pod IP %s, which is no app pod on a real node", ans.PodIP)
	}
	t.Logf("cold start: %s answered by pod %s after %s (interceptor wait %s)", appHost, ans.PodIP, took.Round(time.Millisecond), resp.Header.Get("X-Httpscale-Cold-Start-Wait"))
	return took
}

// scaledToZero waits until the app has no pods and no endpoints, so the next request is a cold one.
func scaledToZero(ctx context.Context, t *testing.T, cfg localcluster.Config, within time.Duration) {
	t.Helper()
	waitFor(ctx, t, within, "app at zero replicas with no pods and no ready endpoints", func() (bool, string) {
		r := replicas(ctx, t, cfg)
		n := len(pods(ctx, t, cfg, "default", "app=app"))
		eps, err := readyEndpoints(ctx, cfg)
		return r == "0" && n == 0 && err == nil && eps == 0, fmt.Sprintf("replicas %s, pods %d, ready endpoints %d %v", r, n, eps, err)
	})
}

// readyEndpoints counts the ready endpoints of the Service app (a jsonpath filter fails on slices
// without endpoints).
func readyEndpoints(ctx context.Context, cfg localcluster.Config) (int, error) {
	out, err := cfg.KubectlRun(ctx, "", "-n", "default", "get", "endpointslices", "-l", "kubernetes.io/service-name=app", "-o", "json")
	if err != nil {
		return 0, err
	}
	var list struct {
		Items []struct {
			Endpoints []struct {
				Conditions struct {
					Ready *bool `json:"ready"`
				} `json:"conditions"`
			} `json:"endpoints"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return 0, err
	}
	n := 0
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				n++
			}
		}
	}
	return n, nil
}

// wakes measures n more cold starts. Between them the app goes back to zero the quick way: once KEDA
// reports the ScaledObject inactive (no request in flight or held), the test scales the Deployment to 0
// itself instead of waiting for KEDA's polling interval and cooldown.
func wakes(ctx context.Context, t *testing.T, cfg localcluster.Config, client *http.Client, url string, n int) []time.Duration {
	var ds []time.Duration
	for range n {
		waitFor(ctx, t, 60*time.Second, "KEDA reporting the app inactive", func() (bool, string) {
			out, err := cfg.KubectlRun(ctx, "", "-n", "default", "get", "scaledobject", "app", "-o", `jsonpath={.status.conditions[?(@.type=="Active")].status}`)
			return err == nil && out == "False", fmt.Sprint(out, err)
		})
		if _, err := cfg.KubectlRun(ctx, "", "-n", "default", "scale", "deployment", "app", "--replicas=0"); err != nil {
			t.Fatal(err)
		}
		scaledToZero(ctx, t, cfg, 60*time.Second)
		ds = append(ds, coldRequest(ctx, t, cfg, client, url))
	}
	return ds
}

func replicas(ctx context.Context, t *testing.T, cfg localcluster.Config) string {
	out, err := cfg.KubectlRun(ctx, "", "-n", "default", "get", "deployment", "app", "-o", "jsonpath={.spec.replicas}")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func waitFor(ctx context.Context, t *testing.T, d time.Duration, what string, ok func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(d); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
		var done bool
		if done, last = ok(); done {
			return
		}
	}
	t.Fatalf("%s: not within %s (last: %s)", what, d, last)
}

// scaledAppManifests: the sample app at zero replicas on the real nodes, with a readiness probe,
// behind a Service, and an HTTPScaledObject (min 0) routing appHost to it.
func scaledAppManifests(cfg localcluster.Config, image string) string {
	return sampleAppManifests(cfg, image, "app", 0, false) + fmt.Sprintf(`---
apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata: {name: app, namespace: default}
spec:
  hosts: [%s]
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: app, service: app, port: 80}
  replicas: {min: 0, max: 2}
  scaledownPeriod: 5
`, appHost)
}
