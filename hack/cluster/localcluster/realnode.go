package localcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Real nodes (Config.RealNodes): each node is a kubelet with a containerd of its own (private root,
// state, socket, CNI configuration and cgroup root), both entered into the harness's network namespace
// with nsenter. The nodes share one bridge (nodesBridge) carrying their addresses; each node's pods sit
// on a CNI bridge of its own with the node's pod CIDR. One kube-proxy serves both nodes: they share the
// namespace and so its iptables rules. Images come from a go-containerregistry registry on
// localhost:RegistryPort inside the namespace, including the sandbox image built from hack/tools/pause.

// nodesBridge carries the real nodes' addresses: kubelet refuses loopback node IPs and this kernel
// has no dummy links, so an empty bridge holds them.
const nodesBridge = "hsnodes"

// PauseImage is the sandbox image every real node's containerd uses.
func (c Config) PauseImage() string { return c.RegistryHost() + "/pause:httpscale" }

// RegistryHost is the host:port of the local image registry, as image references name it.
func (c Config) RegistryHost() string { return fmt.Sprintf("localhost:%d", c.RegistryPort) }

func (c Config) nodePath(n RealNode, elem ...string) string {
	return c.path(append([]string{"nodes", n.Zone}, elem...)...)
}

func (c Config) containerdSocket(n RealNode) string { return c.nodePath(n, "containerd.sock") }

// cgroupRoot is the node's own cgroup parent, so the two kubelets never share kubepods.
func (c Config) cgroupRoot(n RealNode) string { return "/httpscale-" + c.Name + "-" + n.Zone }

// cniNetwork names the node's CNI network; CNI's result cache outside the state dir is keyed by it.
func (c Config) cniNetwork(n RealNode) string { return "httpscale-" + c.Name + "-" + n.Zone }

// createNodesNetwork adds the bridge holding the node addresses and a default route through it, so
// kubelet finds a node address and ClusterIPs (DNATed by kube-proxy) have a route.
func (c Config) createNodesNetwork() error {
	ns := c.NetNS
	steps := [][]string{
		{"ip", "-n", ns, "link", "add", nodesBridge, "type", "bridge"},
	}
	for _, n := range c.Real {
		steps = append(steps, []string{"ip", "-n", ns, "addr", "add", n.IP + "/24", "dev", nodesBridge})
	}
	steps = append(steps,
		[]string{"ip", "-n", ns, "link", "set", nodesBridge, "up"},
		[]string{"ip", "-n", ns, "route", "add", "default", "dev", nodesBridge},
	)
	return runAll(steps)
}

// upRealNodes starts the registry, pushes the pause image, then per node containerd and kubelet, then
// kube-proxy, and waits until both nodes are Ready.
func (c Config) upRealNodes(ctx context.Context, step func(string)) error {
	step("real nodes: network, registry and pause image")
	if err := c.createNodesNetwork(); err != nil {
		return err
	}
	if err := os.WriteFile(c.path("resolv.conf"), []byte(c.nodeResolvConf()), 0o644); err != nil {
		return err
	}
	reg, err := c.StartProcess("registry", filepath.Join(c.NodeDir, "registry"), []string{"-port=" + strconv.Itoa(c.RegistryPort)}, nil)
	if err != nil {
		return err
	}
	if err := poll(ctx, "image registry", c.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if err := alive(reg); err != nil {
			return false, err
		}
		code, _, err := c.get(ctx, fmt.Sprintf("http://127.0.0.1:%d/v2/", c.RegistryPort), "")
		return err == nil && code == 200, err
	}); err != nil {
		return err
	}
	if err := c.PushImage(ctx, c.PauseImage(), filepath.Join(c.NodeDir, "pause")); err != nil {
		return err
	}
	if err := saveHostSysctls(c.path("host-sysctls")); err != nil {
		return err
	}
	for _, n := range c.Real {
		step("real node " + n.Name + ": containerd and kubelet")
		if err := c.startNode(ctx, n); err != nil {
			return err
		}
	}
	step("real nodes: kube-proxy")
	if err := c.startKubeProxy(); err != nil {
		return err
	}
	step("waiting for real nodes Ready")
	for _, n := range c.Real {
		if err := poll(ctx, "node "+n.Name+" registered", c.ReadyTimeout, func(ctx context.Context) (bool, error) {
			_, err := c.KubectlRun(ctx, "", "get", "node", n.Name)
			return err == nil, err
		}); err != nil {
			return err
		}
	}
	timeout := fmt.Sprintf("--timeout=%ds", int(c.ReadyTimeout.Seconds()))
	for _, n := range c.Real {
		if _, err := c.KubectlRun(ctx, "", "wait", "--for=condition=Ready", "node/"+n.Name, timeout); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) startNode(ctx context.Context, n RealNode) error {
	for _, d := range []string{"containerd", "cni", "certs.d/" + c.RegistryHost(), "kubelet", "pod-logs", "volume-plugins"} {
		if err := os.MkdirAll(c.nodePath(n, d), 0o755); err != nil {
			return err
		}
	}
	if err := createCgroup(c.cgroupRoot(n)); err != nil {
		return err
	}
	files := map[string]string{
		"containerd.toml":                             c.containerdConfig(n),
		"cni/10-httpscale.conflist":                   c.cniConfig(n),
		"certs.d/" + c.RegistryHost() + "/hosts.toml": fmt.Sprintf("server = \"http://%[1]s\"\n\n[host.\"http://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n", c.RegistryHost()),
		"kubelet.yaml":                                c.kubeletConfig(n),
	}
	for name, body := range files {
		if err := os.WriteFile(c.nodePath(n, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if err := c.startContainerd(ctx, n); err != nil {
		return err
	}
	_, err := c.startKubelet(n)
	return err
}

// startContainerd starts the containerd of node n and waits until it accepts connections on its socket.
func (c Config) startContainerd(ctx context.Context, n RealNode) error {
	// containerd finds containerd-shim-runc-v2 on PATH.
	env := []string{"PATH=" + c.NodeDir + ":" + os.Getenv("PATH")}
	ctrd, err := c.startNodeProcess("containerd-"+n.Zone, filepath.Join(c.NodeDir, "containerd"),
		[]string{"--config=" + c.nodePath(n, "containerd.toml")}, env)
	if err != nil {
		return err
	}
	// Dialled, not just found: a containerd that was killed leaves its socket file behind.
	return poll(ctx, "containerd of "+n.Name, c.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if err := alive(ctrd); err != nil {
			return false, err
		}
		conn, err := net.DialTimeout("unix", c.containerdSocket(n), time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil, nil
	})
}

// startKubelet starts the kubelet of node n (its containerd must run).
func (c Config) startKubelet(n RealNode) (*Process, error) {
	env := []string{"PATH=" + c.NodeDir + ":" + os.Getenv("PATH")}
	return c.startNodeProcess("kubelet-"+n.Zone, filepath.Join(c.NodeDir, "kubelet"), []string{
		"--config=" + c.nodePath(n, "kubelet.yaml"),
		"--kubeconfig=" + c.path("kubeconfigs", n.Name+".kubeconfig"),
		"--root-dir=" + c.nodePath(n, "kubelet"),
		"--cert-dir=" + c.nodePath(n, "kubelet", "pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP,
		"--node-labels=type=real,topology.kubernetes.io/region=local,topology.kubernetes.io/zone=" + n.Zone,
	}, env)
}

// containerdConfig is a containerd 2.x (version 3) configuration with every path private to the node.
// restrict_oom_score_adj: the sandbox lacks CAP_SYS_RESOURCE, so runc cannot lower a pod's
// oom_score_adj (every sandbox failed with "can't get final child's PID from pipe" without it).
func (c Config) containerdConfig(n RealNode) string {
	d := func(elem ...string) string { return c.nodePath(n, elem...) }
	return fmt.Sprintf(`version = 3
root = %q
state = %q

[grpc]
  address = %q

[ttrpc]
  address = %q

[plugins.'io.containerd.cri.v1.images']
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = %q

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_cdi = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = %q
    max_conf_num = 1
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
      SystemdCgroup = false
      Root = %q

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.internal.v1.opt']
  path = %q
`, d("containerd", "root"), d("containerd", "state"), c.containerdSocket(n), c.containerdSocket(n)+".ttrpc",
		c.PauseImage(), d("certs.d"), d("cni"), d("containerd", "runc"), d("containerd", "opt"))
}

// cniConfig puts the node's pods on a bridge of their own with the node's pod CIDR. No masquerading:
// nothing leaves the namespace.
func (c Config) cniConfig(n RealNode) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dataDir": %q
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, c.cniNetwork(n), n.Bridge, n.PodCIDR, c.nodePath(n, "cni-ipam"))
}

// nodeResolvConf is the nodes' resolv.conf (kubelet's resolvConf): the base of pods' DNS settings and
// all of it for pods with dnsPolicy Default. The node's resolver is CoreDNS too; without DNS, a
// nameserver that answers nothing.
func (c Config) nodeResolvConf() string {
	if !c.DNS {
		return "# httpscale local cluster: no DNS server\nnameserver 127.0.0.1\noptions ndots:1\n"
	}
	return "# httpscale local cluster: CoreDNS\nnameserver " + c.DNSIP + "\noptions ndots:1\n"
}

// kubeletConfig follows what this machine kind needs (docs/local-cluster.md): cgroup v1 and cgroupfs,
// swap tolerated, eviction thresholds a busy shared disk does not trip. With DNS, pods (dnsPolicy
// ClusterFirst) get the kube-dns Service as their nameserver.
func (c Config) kubeletConfig(n RealNode) string {
	clusterDNS := "[]"
	if c.DNS {
		ip, _ := c.DNSServiceIP() // valid: startDNS applied the Service at it
		clusterDNS = "[" + ip + "]"
	}
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %q
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %q
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
tlsCertFile: %q
tlsPrivateKeyFile: %q
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %q}
authorization: {mode: Webhook}
resolvConf: %q
clusterDomain: %s
clusterDNS: %s
podLogsDir: %q
volumePluginDir: %q
evictionHard: {memory.available: 1Mi, nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
`, c.cgroupRoot(n), c.containerdSocket(n), n.IP, n.KubeletPort, n.HealthzPort,
		filepath.Join(c.PKIDir(), "kubelet-"+n.Zone+".crt"), filepath.Join(c.PKIDir(), "kubelet-"+n.Zone+".key"),
		filepath.Join(c.PKIDir(), "ca.crt"), c.path("resolv.conf"), ClusterDomain, clusterDNS, c.nodePath(n, "pod-logs"), c.nodePath(n, "volume-plugins"))
}

// startKubeProxy runs one kube-proxy for both nodes (they share the namespace's iptables). oomScoreAdj
// 0 and conntrack settings of 0 leave the host's OOM and conntrack tunables alone (the sandbox may
// not lower them; nf_conntrack_max is not per namespace).
func (c Config) startKubeProxy() error {
	cfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %q}
mode: iptables
clusterCIDR: %q
hostnameOverride: %q
bindAddress: 0.0.0.0
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
oomScoreAdj: 0
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, c.path("kubeconfigs", "kube-proxy.kubeconfig"), c.RealNodeRange, c.Real[0].Name)
	if err := os.WriteFile(c.path("kube-proxy.yaml"), []byte(cfg), 0o644); err != nil {
		return err
	}
	_, err := c.startNodeProcess("kube-proxy", filepath.Join(c.NodeDir, "kube-proxy"), []string{"--config=" + c.path("kube-proxy.yaml")}, nil)
	return err
}

// drainRealNodes cordons the real nodes and deletes their pods, so kubelet stops every container and
// sandbox (CNI teardown, shim exit) before it is stopped itself. Best effort: the API server may be gone.
func (c Config) drainRealNodes(progress io.Writer) {
	if ps, _ := c.Processes(); len(ps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, n := range c.Real {
		if _, err := c.KubectlRun(ctx, "", "cordon", n.Name); err != nil {
			continue
		}
		if _, err := c.KubectlRun(ctx, "", "delete", "pods", "--all-namespaces", "--field-selector=spec.nodeName="+n.Name,
			"--grace-period=1", "--wait=true", "--timeout=60s"); err != nil {
			fmt.Fprintf(progress, "[cluster] draining %s: %v\n", n.Name, err)
		}
	}
}

// cleanupRealNodes removes what real nodes leave outside the processes: stray shims and pod processes,
// mounts under the state directory, cgroups, CNI's result cache, node state; then it restores the host
// sysctls kubelet rewrote.
func (c Config) cleanupRealNodes(progress io.Writer) []error {
	var errs []error
	for _, n := range c.Real {
		// A node a fault scenario left lost has frozen pods, which would not die of SIGKILL.
		_, _ = freezeTree(filepath.Join("/sys/fs/cgroup/freezer", c.cgroupRoot(n)), "THAWED")
		killStrays(c.containerdSocket(n), c.cgroupRoot(n), progress)
	}
	if err := unmountUnder(c.Dir); err != nil {
		errs = append(errs, err)
	}
	for _, n := range c.Real {
		if err := removeCgroup(c.cgroupRoot(n)); err != nil {
			errs = append(errs, err)
		}
		results, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", c.cniNetwork(n)+"-*"))
		for _, r := range results {
			_ = os.Remove(r)
		}
	}
	if err := os.RemoveAll(c.path("nodes")); err != nil {
		errs = append(errs, err)
	}
	if err := restoreHostSysctls(c.path("host-sysctls"), progress); err != nil {
		errs = append(errs, err)
	}
	return errs
}
