//go:build e2e

// Package realnodes proves the local cluster's opt-in real nodes: a locally built image runs as real
// pods (kubelet, containerd, runc) on both nodes behind a ClusterIP Service that answers inside the
// namespace, Service names resolve through the cluster's DNS (dns_test.go), and teardown gives the host
// back as it was. Run it alone (root; the first run builds the
// node tools):
//
//	go test -tags e2e -count=1 -timeout 60m -v ./e2e/realnodes
package realnodes

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestRealNodesServeADeploymentThroughAClusterIP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("real nodes need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	progress := logWriter{t}
	name := os.Getenv("HTTPSCALE_CLUSTER_NAME")
	if name == "" {
		name = "realnode-e2e"
	}
	cfg := localcluster.Default(name, repoRoot()).WithRealNodes()
	cfg.KEDA = false
	cfg.SampleAppPort = 0

	sysctlsBefore, err := localcluster.ReadHostSysctls()
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Down(progress); err != nil {
		t.Fatalf("tearing down a previous cluster %s: %v", name, err)
	}
	t0 := time.Now()
	if err := cfg.ResolveTools(progress); err != nil {
		t.Fatal(err)
	}
	toolsTime := time.Since(t0)
	t0 = time.Now()
	if err := cfg.Up(ctx, progress); err != nil {
		t.Fatal(err)
	}
	upTime := time.Since(t0)
	t.Cleanup(func() {
		if t.Failed() {
			cfg.DumpLogs(progress, 30)
		}
		if err := cfg.Down(progress); err != nil {
			t.Errorf("tearing down: %v", err)
		}
		after, err := localcluster.ReadHostSysctls()
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(sysctlsBefore, after); diff != "" {
			t.Errorf("host sysctls after teardown differ from before (-before +after):\n%s", diff)
		}
		mounts, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(mounts), " "+cfg.Dir+"/") || strings.Contains(string(mounts), " "+cfg.Dir+" ") {
			t.Errorf("mounts under %s remain after teardown", cfg.Dir)
		}
		for _, n := range cfg.Real {
			if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", "httpscale-"+name+"-"+n.Zone)); err == nil {
				t.Errorf("cgroup of node %s remains after teardown", n.Name)
			}
		}
	})

	image := cfg.RegistryHost() + "/sampleapp:e2e"
	t0 = time.Now()
	bin := filepath.Join(t.TempDir(), "sampleapp")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./e2e/sampleapp")
	build.Dir, build.Env = cfg.RepoRoot, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the sample app: %v: %s", err, out)
	}
	if err := cfg.PushImage(ctx, image, bin); err != nil {
		t.Fatal(err)
	}
	imageTime := time.Since(t0)

	t0 = time.Now()
	if err := cfg.Apply(ctx, sampleAppManifests(cfg, image, "sampleapp", 2, true)); err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.KubectlRun(ctx, "", "-n", "default", "wait", "--for=condition=Available", "deployment/sampleapp", "--timeout=5m"); err != nil {
		t.Fatal(err)
	}
	readyTime := time.Since(t0)

	out, err := cfg.KubectlRun(ctx, "", "-n", "default", "get", "pods", "-l", "app=sampleapp",
		"-o", `jsonpath={range .items[*]}{.spec.nodeName} {.status.podIP}{"\n"}{end}`)
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		nodes[strings.Fields(line)[0]] = true
	}
	for _, n := range cfg.Real {
		if !nodes[n.Name] {
			t.Errorf("no ready sampleapp pod on node %s; pods (node, IP):\n%s", n.Name, out)
		}
	}

	clusterIP, err := cfg.KubectlRun(ctx, "", "-n", "default", "get", "service", "sampleapp", "-o", "jsonpath={.spec.clusterIP}")
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy programs the Service's endpoints up to a sync period after the Deployment turns
	// Available (until then it rejects connections), so ask until both zones have answered, each
	// request on a new connection.
	zones := map[string]int{}
	client := cfg.HTTPClient()
	var lastErr error
	for deadline := time.Now().Add(30 * time.Second); len(zones) < len(cfg.Real) && time.Now().Before(deadline); {
		resp, err := client.Get(fmt.Sprintf("http://%s/hello", clusterIP))
		if err != nil {
			lastErr = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET through ClusterIP %s: %d %s", clusterIP, resp.StatusCode, bytes.TrimSpace(body))
		}
		zones[resp.Header.Get("X-Zone")]++
	}
	if len(zones) < len(cfg.Real) {
		t.Errorf("ClusterIP %s answered only from zones %v in 30s (last error: %v); want one pod per real node", clusterIP, zones, lastErr)
	}
	t.Logf("ClusterIP %s answered 200 from pods by zone: %v", clusterIP, zones)
	t.Run("cluster DNS", func(t *testing.T) { checkClusterDNS(ctx, t, cfg, "sampleapp") })
	t.Logf("timings: tools %.1fs, cluster up with real nodes Ready %.1fs, image build+push %.1fs, Deployment apply->Available %.1fs",
		toolsTime.Seconds(), upTime.Seconds(), imageTime.Seconds(), readyTime.Seconds())
}

// sampleAppManifests is the sample app on the real nodes (replicas of it, with a readiness probe)
// behind a ClusterIP Service, both named name in the default namespace; spread adds a zone topology
// spread so that its pods land on both nodes.
func sampleAppManifests(cfg localcluster.Config, image, name string, replicas int, spread bool) string {
	var zoneArgs, spreadSpec strings.Builder
	for _, n := range cfg.Real {
		fmt.Fprintf(&zoneArgs, "        - --zone=%s=%s\n", n.PodCIDR, n.Zone)
	}
	if spread {
		fmt.Fprintf(&spreadSpec, "      topologySpreadConstraints:\n      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: %s}}}\n", name)
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: %[1]s, namespace: default}
spec:
  replicas: %[2]d
  selector: {matchLabels: {app: %[1]s}}
  template:
    metadata: {labels: {app: %[1]s}}
    spec:
      nodeSelector: {type: real}
%[3]s      terminationGracePeriodSeconds: 1
      containers:
      - name: app
        image: %[4]s
        args:
        - --listen=0.0.0.0:8000
%[5]s        ports: [{containerPort: 8000}]
        readinessProbe:
          httpGet: {path: /ready, port: 8000}
          periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: default}
spec:
  selector: {app: %[1]s}
  ports: [{port: 80, targetPort: 8000}]
`, name, replicas, spreadSpec.String(), image, zoneArgs.String())
}
