package localcluster

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// StateFile is written by Up once the cluster is ready and read by LoadState.
func (c Config) StateFile() string { return c.path("state.json") }

// LoadState reads the configuration a running cluster was started with.
func LoadState(dir string) (Config, error) {
	var c Config
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil {
		return c, fmt.Errorf("reading cluster state: %w", err)
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return c, fmt.Errorf("reading cluster state: %w", err)
	}
	return c, nil
}

// ResolveTools runs hack/tools.sh for the control-plane, kwok and (when enabled) KEDA, real-node and
// CoreDNS binaries, building what is missing, and records their directories.
func (c *Config) ResolveTools(progress io.Writer) error {
	sets := []struct {
		set string
		dst *string
	}{{"cluster", &c.ToolsDir}, {"kwok", &c.KwokDir}}
	if c.KEDA {
		sets = append(sets, struct {
			set string
			dst *string
		}{"keda", &c.KEDADir})
	}
	if c.RealNodes {
		sets = append(sets, struct {
			set string
			dst *string
		}{"node", &c.NodeDir})
	}
	if c.DNS {
		sets = append(sets, struct {
			set string
			dst *string
		}{"dns", &c.DNSDir})
	}
	for _, s := range sets {
		cmd := exec.Command(filepath.Join(c.RepoRoot, "hack", "tools.sh"), s.set)
		cmd.Stderr = progress
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("hack/tools.sh %s: %w", s.set, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		*s.dst = lines[len(lines)-1]
	}
	return nil
}

// Healthy reports whether every recorded process runs, the apiserver answers /readyz and (with DNS)
// CoreDNS reports ready.
func (c Config) Healthy(ctx context.Context) error {
	ps, err := c.Processes()
	if err != nil {
		return err
	}
	if len(ps) == 0 {
		return errors.New("no processes recorded")
	}
	for _, p := range ps {
		if !p.Alive() {
			return fmt.Errorf("%s (pid %d) is not running; see %s", p.Name, p.PID, p.LogFile)
		}
	}
	tok, err := c.adminToken()
	if err != nil {
		return err
	}
	code, body, err := c.get(ctx, c.Server()+"/readyz", tok)
	if err != nil {
		return fmt.Errorf("kube-apiserver /readyz: %w", err)
	}
	if code != 200 {
		return fmt.Errorf("kube-apiserver /readyz: %d %s", code, body)
	}
	if c.DNS {
		code, body, err := c.get(ctx, c.DNSReadyURL(), "")
		if err != nil {
			return fmt.Errorf("CoreDNS ready: %w", err)
		}
		if code != 200 {
			return fmt.Errorf("CoreDNS ready: %d %s", code, strings.TrimSpace(body))
		}
	}
	return nil
}

// Up starts the cluster and waits until nodes are Ready and (with KEDA) the external metrics API is
// Available. On failure it prints the tail of every log to progress, stops what it started and
// returns the error. Tools must have been resolved (ResolveTools).
func (c Config) Up(ctx context.Context, progress io.Writer) (err error) {
	start := time.Now()
	step := func(msg string) { fmt.Fprintf(progress, "[cluster %6.1fs] %s\n", time.Since(start).Seconds(), msg) }
	if os.Geteuid() != 0 {
		return errors.New("the local cluster needs root: it creates a network namespace")
	}
	if ps, _ := c.Processes(); len(ps) > 0 {
		return fmt.Errorf("cluster %q has recorded processes in %s; run down first", c.Name, c.Dir)
	}
	if err := os.RemoveAll(c.Dir); err != nil {
		return err
	}
	if err := os.MkdirAll(c.LogDir(), 0o755); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			fmt.Fprintf(progress, "\nlocal cluster failed: %v\n", err)
			c.DumpLogs(progress, 40)
			_ = c.Down(progress)
		}
	}()

	if c.SampleAppPort != 0 {
		step("building the sample app")
		build := exec.CommandContext(ctx, "go", "build", "-o", c.path("bin", "sampleapp"), "./e2e/sampleapp")
		build.Dir = c.RepoRoot
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building the sample app: %w: %s", err, out)
		}
	}
	local, err := c.localRoutes()
	if err != nil {
		return err
	}
	step(fmt.Sprintf("creating network namespace %s (%v local inside it)", c.NetNS, local))
	if err := createNetNS(c.NetNS, local); err != nil {
		return err
	}
	if err := c.writePKI(); err != nil {
		return fmt.Errorf("writing PKI: %w", err)
	}
	if err := c.writeTokens(); err != nil {
		return fmt.Errorf("writing tokens: %w", err)
	}
	if err := c.writeKwokConfig(); err != nil {
		return err
	}

	step("starting etcd")
	etcd, err := c.StartProcess("etcd", filepath.Join(c.ToolsDir, "etcd"), c.etcdArgs(), nil)
	if err != nil {
		return err
	}
	if err := poll(ctx, "etcd", c.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if err := alive(etcd); err != nil {
			return false, err
		}
		code, body, err := c.get(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", c.EtcdPort), "")
		return err == nil && code == 200 && strings.Contains(body, `"true"`), err
	}); err != nil {
		return err
	}

	step("starting kube-apiserver")
	apiserver, err := c.StartProcess("kube-apiserver", filepath.Join(c.ToolsDir, "kube-apiserver"), c.apiserverArgs(), nil)
	if err != nil {
		return err
	}
	tok, err := c.adminToken()
	if err != nil {
		return err
	}
	if err := poll(ctx, "kube-apiserver /readyz", c.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if err := alive(apiserver); err != nil {
			return false, err
		}
		code, body, err := c.get(ctx, c.Server()+"/readyz", tok)
		if err == nil && code != 200 {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err == nil, err
	}); err != nil {
		return err
	}

	step("starting kube-controller-manager, kube-scheduler, kwok")
	kc := func(n string) string { return c.path("kubeconfigs", n+".kubeconfig") }
	if _, err := c.StartProcess("kube-controller-manager", filepath.Join(c.ToolsDir, "kube-controller-manager"), c.kcmArgs(kc("kcm")), nil); err != nil {
		return err
	}
	if _, err := c.StartProcess("kube-scheduler", filepath.Join(c.ToolsDir, "kube-scheduler"), []string{
		"--kubeconfig=" + kc("scheduler"), "--authentication-kubeconfig=" + kc("scheduler"),
		"--authorization-kubeconfig=" + kc("scheduler"), "--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.SchedulerPort), "--leader-elect=false",
	}, nil); err != nil {
		return err
	}
	if _, err := c.StartProcess("kwok", filepath.Join(c.KwokDir, "kwok"), []string{
		"--kubeconfig=" + kc("kwok"), "--config=" + c.path("kwok.yaml"),
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		fmt.Sprintf("--server-address=127.0.0.1:%d", c.KwokPort),
	}, nil); err != nil {
		return err
	}

	step("applying namespaces, nodes and CRDs")
	if err := c.Apply(ctx, c.baseManifests()); err != nil {
		return err
	}
	crdDirs := []string{filepath.Join(c.RepoRoot, "config", "crd", "bases")}
	if c.KEDA {
		crdDirs = append(crdDirs, filepath.Join(c.KEDADir, "crds"))
	}
	for _, d := range crdDirs {
		if _, err := c.KubectlRun(ctx, "", "apply", "--server-side", "--force-conflicts", "-f", d); err != nil {
			return err
		}
	}

	// Controllers that start before their CRDs are served log errors and retry; avoid the noise.
	timeout := fmt.Sprintf("--timeout=%ds", int(c.ReadyTimeout.Seconds()))
	if _, err := c.KubectlRun(ctx, "", "wait", "--for=condition=Established", "crd", "--all", timeout); err != nil {
		return err
	}
	if c.DNS {
		step("starting CoreDNS (cluster DNS at " + c.DNSIP + ")")
		if err := c.startDNS(ctx); err != nil {
			return err
		}
	}
	if c.KEDA {
		step("starting KEDA operator and metrics adapter")
		if err := c.startKEDA(ctx); err != nil {
			return err
		}
	}

	if c.RealNodes {
		if err := c.upRealNodes(ctx, step); err != nil {
			return err
		}
	}

	step("waiting for nodes Ready and the default ServiceAccount")
	if _, err := c.KubectlRun(ctx, "", "wait", "--for=condition=Ready", "node", "--all", timeout); err != nil {
		return err
	}
	if err := poll(ctx, "ServiceAccount default/default", c.ReadyTimeout, func(ctx context.Context) (bool, error) {
		_, err := c.KubectlRun(ctx, "", "get", "serviceaccount", "default", "-n", "default")
		return err == nil, err
	}); err != nil {
		return err
	}
	if c.KEDA {
		step("waiting for APIService v1beta1.external.metrics.k8s.io Available")
		if _, err := c.KubectlRun(ctx, "", "wait", "--for=condition=Available", "apiservice/v1beta1.external.metrics.k8s.io", timeout); err != nil {
			return err
		}
	}
	if c.SampleAppPort != 0 {
		step(fmt.Sprintf("starting the sample app on port %d of every pod IP", c.SampleAppPort))
		args := []string{fmt.Sprintf("--listen=0.0.0.0:%d", c.SampleAppPort), "--admin=" + c.SampleAppAdmin()}
		for _, n := range c.Nodes {
			args = append(args, "--zone="+n.PodCIDR+"="+n.Zone)
		}
		if _, err := c.StartProcess("sampleapp", c.path("bin", "sampleapp"), args, nil); err != nil {
			return err
		}
	}
	if err := c.writeHelpers(); err != nil {
		return err
	}
	data, _ := json.MarshalIndent(c, "", "  ")
	if err := os.WriteFile(c.StateFile(), data, 0o644); err != nil {
		return err
	}
	step("cluster ready")
	return nil
}

// Down stops every recorded process, newest first (SIGTERM, SIGKILL after StopTimeout), removes the
// network namespace and, when all of that went well, the cluster's state folder but for LogDir.
func (c Config) Down(progress io.Writer) error {
	ps, err := c.Processes()
	if err != nil {
		return err
	}
	// Real-node state may exist without a state file (an interrupted up); clean it up either way.
	realNodes := c.RealNodes || exists(c.path("nodes")) || exists(c.path("host-sysctls"))
	if realNodes {
		c.drainRealNodes(progress)
	}
	var errs []error
	for i := len(ps) - 1; i >= 0; i-- {
		p := ps[i]
		t0 := time.Now()
		if err := p.Stop(c.StopTimeout); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(progress, "[cluster] stopped %s (pid %d) in %.1fs\n", p.Name, p.PID, time.Since(t0).Seconds())
	}
	if realNodes {
		errs = append(errs, c.cleanupRealNodes(progress)...)
	}
	if err := deleteNetNS(c.NetNS); err != nil {
		errs = append(errs, err)
	}
	_ = os.Remove(c.StateFile())
	if len(errs) == 0 {
		errs = append(errs, pruneState(c.Dir, c.LogDir()))
	}
	if err := errors.Join(errs...); err == nil {
		fmt.Fprintf(progress, "[cluster] %s is down; its state removed, logs kept in %s\n", c.Name, c.LogDir())
	}
	return errors.Join(errs...)
}

// DumpLogs writes the last lines of every log file to w.
func (c Config) DumpLogs(w io.Writer, lines int) {
	entries, _ := os.ReadDir(c.LogDir())
	for _, e := range entries {
		path := filepath.Join(c.LogDir(), e.Name())
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		var tail []string
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			tail = append(tail, sc.Text())
			if len(tail) > lines {
				tail = tail[1:]
			}
		}
		f.Close()
		fmt.Fprintf(w, "----- %s (last %d lines) -----\n%s\n", path, len(tail), strings.Join(tail, "\n"))
	}
}

func (c Config) etcdArgs() []string {
	client := fmt.Sprintf("http://127.0.0.1:%d", c.EtcdPort)
	peer := fmt.Sprintf("http://127.0.0.1:%d", c.EtcdPeerPort)
	return []string{
		"--name=default", "--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + client, "--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=default=" + peer,
		// A throwaway cluster: durability is not worth the fsync latency on a busy disk.
		"--unsafe-no-fsync=true",
	}
}

func (c Config) apiserverArgs() []string {
	pki := func(n string) string { return filepath.Join(c.PKIDir(), n) }
	var real []string
	if c.RealNodes {
		// Pods reach the API server through the kubernetes Service, whose endpoint is the advertised
		// HostIP: a local address of the namespace, so their packets arrive over the CNI bridges. It
		// keeps binding HostIP only, not 0.0.0.0, which would take port 6443 from KEDA's adapter on
		// KEDAAdapterIP. kubectl logs/exec reach kubelets at their InternalIP.
		real = []string{
			"--kubelet-preferred-address-types=InternalIP",
			"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + pki("ca.crt"),
		}
	}
	return append([]string{
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", c.EtcdPort),
		"--bind-address=" + c.HostIP, "--advertise-address=" + c.HostIP,
		"--secure-port=" + strconv.Itoa(c.APIServerPort),
		"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + pki("ca.crt"),
		"--token-auth-file=" + pki("tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki("sa.pub"),
		"--service-account-signing-key-file=" + pki("sa.key"),
		"--service-cluster-ip-range=" + c.ServiceCIDR,
		"--allow-privileged=true",
		// Aggregation (front proxy): how the apiserver authenticates to KEDA's metrics adapter.
		"--requestheader-client-ca-file=" + pki("front-proxy-ca.crt"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + pki("front-proxy-client.crt"),
		"--proxy-client-key-file=" + pki("front-proxy-client.key"),
		// No kube-proxy here: reach extension servers at their endpoint address, not the ClusterIP.
		"--enable-aggregator-routing=true",
	}, real...)
}

func (c Config) kcmArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(c.KCMPort), "--leader-elect=false",
		"--service-account-private-key-file=" + filepath.Join(c.PKIDir(), "sa.key"),
		"--root-ca-file=" + filepath.Join(c.PKIDir(), "ca.crt"),
		"--use-service-account-credentials=false",
		"--cluster-name=httpscale-" + c.Name,
		// A quicker HPA loop keeps 1->N scaling visible in tests and the demo.
		"--horizontal-pod-autoscaler-sync-period=5s",
	}
}

// writeKwokConfig writes kwok's configuration plus the stages that ship with kwok (the "fast" set).
func (c Config) writeKwokConfig() error {
	var b strings.Builder
	b.WriteString(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake
  nodeLeaseDurationSeconds: 40
  nodeLeaseParallelism: 4
  nodePlayStageParallelism: 4
  podPlayStageParallelism: 16
`)
	stages, err := filepath.Glob(filepath.Join(c.KwokDir, "stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no kwok stages in %s (run hack/tools.sh kwok)", c.KwokDir)
	}
	for _, s := range stages {
		data, err := os.ReadFile(s)
		if err != nil {
			return err
		}
		b.WriteString("---\n")
		b.Write(data)
		b.WriteString("\n")
	}
	return os.WriteFile(c.path("kwok.yaml"), []byte(b.String()), 0o644)
}

func (c Config) baseManifests() string {
	var b strings.Builder
	for _, ns := range []string{"keda", "httpscale-system"} {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n", ns)
	}
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Node
metadata:
  name: %[1]s
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: %[1]s
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
    topology.kubernetes.io/region: local
    topology.kubernetes.io/zone: %[2]s
spec:
  podCIDR: %[3]s
  podCIDRs: [%[3]s]
status:
  addresses:
  - type: InternalIP
    address: %[4]s
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
`, n.Name, n.Zone, n.PodCIDR, n.IP)
	}
	return b.String()
}

// startKEDA runs KEDA's operator and metrics adapter as processes and registers the adapter as the
// external metrics API: a selector-less Service, manual Endpoints at the adapter's address, and an
// APIService trusting the cluster CA. With DNS they resolve Service names as pods of namespace keda do
// (StartProcessWithClusterDNS): the ScaledObjects httpscale writes name the scaler by its Service.
func (c Config) startKEDA(ctx context.Context) error {
	ca, err := os.ReadFile(filepath.Join(c.PKIDir(), "ca.crt"))
	if err != nil {
		return err
	}
	reg := fmt.Sprintf(`---
apiVersion: v1
kind: Service
metadata: {name: keda-metrics-apiserver, namespace: keda}
spec:
  ports: [{name: https, port: 443, targetPort: %[2]d}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: keda-metrics-apiserver, namespace: keda}
subsets:
- addresses: [{ip: %[1]s}]
  ports: [{name: https, port: %[2]d}]
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1beta1.external.metrics.k8s.io}
spec:
  service: {name: keda-metrics-apiserver, namespace: keda, port: 443}
  group: external.metrics.k8s.io
  version: v1beta1
  caBundle: %[3]s
  groupPriorityMinimum: 100
  versionPriority: 100
`, c.KEDAAdapterIP, c.KEDAAdapterPort, base64.StdEncoding.EncodeToString(ca))
	if err := c.Apply(ctx, reg); err != nil {
		return err
	}
	if _, err := c.StartKEDAOperator(); err != nil {
		return err
	}
	kc, certs, env := c.kedaEnv()
	_, err = c.StartProcessWithClusterDNS("keda-adapter", "keda", filepath.Join(c.KEDADir, "keda-adapter"), []string{
		"--secure-port=" + strconv.Itoa(c.KEDAAdapterPort), "--bind-address=" + c.KEDAAdapterIP,
		"--cert-dir=" + certs, "--tls-cert-file=" + filepath.Join(certs, "tls.crt"),
		"--tls-private-key-file=" + filepath.Join(certs, "tls.key"),
		"--lister-kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		fmt.Sprintf("--metrics-service-address=127.0.0.1:%d", c.KEDAGRPCPort),
		fmt.Sprintf("--port=%d", c.KEDAPortBase+2),
		"--zap-log-level=info",
	}, env)
	return err
}

// kedaEnv returns the kubeconfig, certificate directory and environment KEDA's processes run with.
func (c Config) kedaEnv() (kubeconfig, certs string, env []string) {
	kubeconfig = c.path("kubeconfigs", "keda.kubeconfig")
	certs = filepath.Join(c.PKIDir(), "keda")
	return kubeconfig, certs, []string{"KUBECONFIG=" + kubeconfig, "WATCH_NAMESPACE=", "KEDA_CLUSTER_OBJECT_NAMESPACE=keda", "POD_NAMESPACE=keda"}
}

// StartKEDAOperator starts KEDA's operator process (Up does; a fault scenario that stopped it starts it
// again the same way).
func (c Config) StartKEDAOperator() (*Process, error) {
	_, certs, env := c.kedaEnv()
	return c.StartProcessWithClusterDNS("keda-operator", "keda", filepath.Join(c.KEDADir, "keda"), []string{
		"--leader-elect=false", "--enable-cert-rotation=false", "--enable-webhook-patching=false",
		"--enable-apiservice-patching=false", "--cert-dir=" + certs,
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", c.KEDAPortBase),
		fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", c.KEDAPortBase+1),
		fmt.Sprintf("--metrics-service-bind-address=127.0.0.1:%d", c.KEDAGRPCPort),
		"--zap-log-level=info", "--zap-encoder=console",
	}, env)
}

// writeHelpers writes <dir>/bin/kubectl (kubectl as administrator inside the namespace) and
// <dir>/bin/netns-exec (any command inside the namespace) for people trying the cluster by hand.
func (c Config) writeHelpers() error {
	dir := c.path("bin")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	scripts := map[string]string{
		"kubectl":    fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s %s --kubeconfig %s \"$@\"\n", c.NetNS, c.Kubectl(), c.AdminKubeconfig()),
		"netns-exec": fmt.Sprintf("#!/bin/sh\nexec ip netns exec %s \"$@\"\n", c.NetNS),
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			return err
		}
	}
	return nil
}
