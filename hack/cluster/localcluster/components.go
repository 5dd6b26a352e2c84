package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// InterceptorAddr is where one interceptor replica listens.
type InterceptorAddr struct {
	Name string // process name, e.g. httpscale-interceptor-zone-a
	IP   string
	Zone string
	Node string
}

// Addresses are the fixed addresses of httpscale's processes inside the namespace. They are outside
// the node pod CIDRs, so they never collide with a pod IP.
type Addresses struct {
	Operator     string
	Scaler       string
	Interceptors []InterceptorAddr
}

// Ports of httpscale's processes (the shared defaults of the project).
const (
	ProxyPort          = 8080
	InterceptorAdmin   = 9090
	InterceptorProbe   = 9091
	InterceptorMetrics = 9092
	ScalerGRPCPort     = 9090
	ScalerProbePort    = 9191
	ScalerMetricsPort  = 9190
	OperatorProbePort  = 8081
	OperatorMetrics    = 8080
	OperatorWebhook    = 9443
	Namespace          = "httpscale-system"
)

// ComponentIPs returns the addresses of httpscale's processes: one interceptor per node (zone).
func ComponentIPs(c Config) Addresses {
	a := Addresses{Operator: "198.19.1.20", Scaler: "198.19.1.10"}
	for i, n := range c.Nodes {
		a.Interceptors = append(a.Interceptors, InterceptorAddr{
			Name: "httpscale-interceptor-" + n.Zone, IP: fmt.Sprintf("198.19.1.%d", i+1), Zone: n.Zone, Node: n.Name,
		})
	}
	return a
}

// Binaries are the httpscale executables to run (default: <repo>/bin/{operator,interceptor,scaler}).
type Binaries struct{ Operator, Interceptor, Scaler string }

// DefaultBinaries returns the binaries `make build` writes.
func DefaultBinaries(repoRoot string) Binaries {
	return Binaries{
		Operator:    filepath.Join(repoRoot, "bin", "operator"),
		Interceptor: filepath.Join(repoRoot, "bin", "interceptor"),
		Scaler:      filepath.Join(repoRoot, "bin", "scaler"),
	}
}

// Component is one running httpscale process and how to start it again.
type Component struct {
	Process *Process
	Bin     string
	Env     []string
	// Probe is the host:port serving /readyz.
	Probe string
}

// HTTPScale is the running httpscale system: operator, scaler and one interceptor per zone.
type HTTPScale struct {
	Addresses  Addresses
	Components map[string]*Component
}

// StartHTTPScale runs httpscale's three binaries inside the namespace as processes, each with a kubeconfig
// holding a token of its own ServiceAccount, so only the RBAC granted to that ServiceAccount applies.
// Settings go through HTTPSCALE_* environment variables. Interceptors, the scaler and the operator's
// webhook are published as selector-less Services with EndpointSlices at their addresses (zone and
// node set per interceptor), which is how the components discover each other in a cluster.
func (c Config) StartHTTPScale(ctx context.Context, bins Binaries, progress io.Writer) (*HTTPScale, error) {
	a := ComponentIPs(c)
	if err := c.installChart(ctx, progress); err != nil {
		return nil, err
	}
	if err := c.Apply(ctx, componentServices(a)); err != nil {
		return nil, err
	}
	kcs := map[string]string{}
	for _, sa := range []string{"httpscale-operator", "httpscale-interceptor", "httpscale-scaler"} {
		tok, err := c.KubectlRun(ctx, "", "create", "token", sa, "-n", Namespace, "--duration=48h")
		if err != nil {
			return nil, err
		}
		kcs[sa] = c.path("kubeconfigs", sa+".kubeconfig")
		if err := c.WriteKubeconfig(kcs[sa], "system:serviceaccount:"+Namespace+":"+sa, strings.TrimSpace(tok)); err != nil {
			return nil, err
		}
	}
	hp := func(ip string, port int) string { return net.JoinHostPort(ip, fmt.Sprint(port)) }
	apiEnv, err := c.chartKubeAPIEnv()
	if err != nil {
		return nil, err
	}
	common := append([]string{"POD_NAMESPACE=" + Namespace, "HTTPSCALE_LEADER_ELECT=false"}, apiEnv...)
	h := &HTTPScale{Addresses: a, Components: map[string]*Component{}}
	h.Components["httpscale-scaler"] = &Component{Bin: bins.Scaler, Probe: hp(a.Scaler, ScalerProbePort), Env: append([]string{
		"KUBECONFIG=" + kcs["httpscale-scaler"], "POD_IP=" + a.Scaler,
		"HTTPSCALE_GRPC_BIND_ADDRESS=" + hp(a.Scaler, ScalerGRPCPort),
		"HTTPSCALE_HEALTH_PROBE_BIND_ADDRESS=" + hp(a.Scaler, ScalerProbePort),
		"HTTPSCALE_METRICS_BIND_ADDRESS=" + hp(a.Scaler, ScalerMetricsPort),
	}, common...)}
	for _, ic := range a.Interceptors {
		h.Components[ic.Name] = &Component{Bin: bins.Interceptor, Probe: hp(ic.IP, InterceptorProbe), Env: append([]string{
			"KUBECONFIG=" + kcs["httpscale-interceptor"], "NODE_NAME=" + ic.Node, "POD_IP=" + ic.IP,
			"HTTPSCALE_PROXY_BIND_ADDRESS=" + hp(ic.IP, ProxyPort),
			"HTTPSCALE_ADMIN_BIND_ADDRESS=" + hp(ic.IP, InterceptorAdmin),
			"HTTPSCALE_HEALTH_PROBE_BIND_ADDRESS=" + hp(ic.IP, InterceptorProbe),
			"HTTPSCALE_METRICS_BIND_ADDRESS=" + hp(ic.IP, InterceptorMetrics),
		}, common...)}
	}
	h.Components["httpscale-operator"] = &Component{Bin: bins.Operator, Probe: hp(a.Operator, OperatorProbePort), Env: append([]string{
		"KUBECONFIG=" + kcs["httpscale-operator"], "POD_IP=" + a.Operator,
		"HTTPSCALE_HEALTH_PROBE_BIND_ADDRESS=" + hp(a.Operator, OperatorProbePort),
		"HTTPSCALE_METRICS_BIND_ADDRESS=" + hp(a.Operator, OperatorMetrics),
		"HTTPSCALE_WEBHOOK_BIND_ADDRESS=" + hp(a.Operator, OperatorWebhook),
		"HTTPSCALE_SCALER_ADDRESS=" + hp(a.Scaler, ScalerGRPCPort),
	}, common...)}
	// The operator starts before the interceptors: they report ready only once they serve a routing
	// table, which the operator writes.
	order := []string{"httpscale-scaler", "httpscale-operator"}
	for _, ic := range a.Interceptors {
		order = append(order, ic.Name)
	}
	for _, name := range order {
		if err := c.StartComponent(ctx, name, h.Components[name]); err != nil {
			return h, err
		}
		fmt.Fprintf(progress, "[cluster] %s ready (probe %s)\n", name, h.Components[name].Probe)
	}
	return h, nil
}

// StartComponent starts one component unless it already runs, and waits for its /readyz.
func (c Config) StartComponent(ctx context.Context, name string, comp *Component) error {
	if _, err := os.Stat(comp.Bin); err != nil {
		return fmt.Errorf("%s: binary %s missing (run make build): %w", name, comp.Bin, err)
	}
	var p *Process
	ps, err := c.Processes()
	if err != nil {
		return err
	}
	for _, q := range ps {
		if q.Name == name && q.Alive() {
			p = q // already running (a second `make demo`): keep it
		}
	}
	if p == nil {
		if p, err = c.StartProcess(name, comp.Bin, nil, comp.Env); err != nil {
			return err
		}
	}
	comp.Process = p
	return poll(ctx, name+" /readyz", c.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if err := alive(p); err != nil {
			return false, err
		}
		code, body, err := c.get(ctx, "http://"+comp.Probe+"/readyz", "")
		if err == nil && code != 200 {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err == nil, err
	})
}

// StopComponent stops one component (SIGTERM, then SIGKILL after StopTimeout).
func (c Config) StopComponent(comp *Component) error {
	if comp.Process == nil {
		return nil
	}
	return comp.Process.Stop(c.StopTimeout)
}

// installChart installs charts/httpscale as a user would, with none of its own replicas: the binaries
// run here as processes with tokens of the chart's ServiceAccounts, so they run against the chart's
// RBAC, webhook configuration and certificate Secret. The operator, started before the interceptors,
// then issues the webhook's certificate and patches the configuration's caBundle.
// chartKubeAPIEnv returns the API client rate limit of the chart's default values (kubeApi.qps and
// kubeApi.burst) as the binaries' environment, so the processes talk to the API server exactly as a
// chart install's pods do, not with client-go's 5 requests/s.
func (c Config) chartKubeAPIEnv() ([]string, error) {
	file := filepath.Join(c.RepoRoot, "charts", "httpscale", "values.yaml")
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the chart's values: %w", err)
	}
	var values struct {
		KubeAPI struct {
			QPS   *float64 `json:"qps"`
			Burst *int     `json:"burst"`
		} `json:"kubeApi"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", file, err)
	}
	if values.KubeAPI.QPS == nil || values.KubeAPI.Burst == nil {
		return nil, fmt.Errorf("%s sets no kubeApi.qps and kubeApi.burst", file)
	}
	return []string{
		"HTTPSCALE_KUBE_API_QPS=" + strconv.FormatFloat(*values.KubeAPI.QPS, 'g', -1, 64),
		"HTTPSCALE_KUBE_API_BURST=" + strconv.Itoa(*values.KubeAPI.Burst),
	}, nil
}

func (c Config) installChart(ctx context.Context, progress io.Writer) error {
	tools := exec.CommandContext(ctx, filepath.Join(c.RepoRoot, "hack", "tools.sh"), "helm")
	tools.Stderr = progress
	out, err := tools.Output()
	if err != nil {
		return fmt.Errorf("hack/tools.sh helm: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	helm := filepath.Join(lines[len(lines)-1], "helm")
	cmd := c.Command(ctx, helm, "upgrade", "--install", "httpscale", filepath.Join(c.RepoRoot, "charts", "httpscale"),
		"--namespace", Namespace, "--create-namespace", "--kubeconfig", c.AdminKubeconfig(),
		"--set", "operator.replicas=0,interceptor.replicas=0,scaler.replicas=0")
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("helm upgrade --install charts/httpscale: %w: %s", err, strings.TrimSpace(errb.String()))
	}
	fmt.Fprintln(progress, "[cluster] chart charts/httpscale installed with Helm (no replicas: the binaries run as processes)")
	return nil
}

func componentServices(a Addresses) string {
	var b strings.Builder
	svc := func(name, port string, portNum, target int, eps []InterceptorAddr) {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  ports: [{name: %[3]s, port: %[4]d, targetPort: %[5]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-local
  namespace: %[2]s
  labels:
    kubernetes.io/service-name: %[1]s
    endpointslice.kubernetes.io/managed-by: local-cluster.httpscale.dev
addressType: IPv4
ports: [{name: %[3]s, port: %[5]d, protocol: TCP}]
endpoints:
`, name, Namespace, port, portNum, target)
		for _, e := range eps {
			fmt.Fprintf(&b, "- addresses: [%q]\n  conditions: {ready: true, serving: true, terminating: false}\n", e.IP)
			if e.Zone != "" {
				fmt.Fprintf(&b, "  zone: %s\n  nodeName: %s\n", e.Zone, e.Node)
			}
		}
	}
	svc("httpscale-interceptor-admin", "admin", InterceptorAdmin, InterceptorAdmin, a.Interceptors)
	svc("httpscale-interceptor", "http", ProxyPort, ProxyPort, a.Interceptors)
	svc("httpscale-scaler", "grpc", ScalerGRPCPort, ScalerGRPCPort, []InterceptorAddr{{IP: a.Scaler}})
	svc("httpscale-operator-webhook", "webhook", 443, OperatorWebhook, []InterceptorAddr{{IP: a.Operator}})
	return b.String()
}
