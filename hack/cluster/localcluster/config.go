// Package localcluster runs a local Kubernetes control plane inside a network namespace that it creates:
// etcd, kube-apiserver (RBAC, token auth, service-account keys, aggregation), kube-controller-manager,
// kube-scheduler, kwok with fake nodes in two zones, KEDA's operator and metrics adapter, and CoreDNS as
// the cluster's DNS (dns.go), all as processes tracked by PID in a state directory. The e2e suite and
// `make demo` build on it.
//
// Addresses inside the namespace: LocalRange (198.18.0.0/15) is routed to lo, so every address in it is
// local. Node pod CIDRs come from 198.18.x.0/24, so one sample-app process listening on 0.0.0.0 answers
// for every pod IP; control-plane and httpscale processes bind addresses of 198.19.0.0/24. Nothing is
// routed outside the namespace; the namespace has no interface but lo.
//
// With Config.RealNodes the cluster also runs two real nodes (kubelet, containerd, runc), a local
// image registry and kube-proxy (realnode.go); RealNodeRange is then carved out of the lo route and
// given to the nodes' bridges, and Services move into it.
package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Node is one fake (kwok) node.
type Node struct {
	Name    string `json:"name"`
	Zone    string `json:"zone"`
	PodCIDR string `json:"podCIDR"`
	IP      string `json:"ip"`
}

// Config describes a local cluster. Zero fields take the defaults of Default.
type Config struct {
	// Name keys the network namespace (httpscale-<name>) and the default state directory.
	Name string `json:"name"`
	// Dir holds pids/, logs/, pki/, kubeconfigs and state.json.
	Dir string `json:"dir"`
	// NetNS is the network namespace the harness creates and deletes.
	NetNS string `json:"netns"`
	// RepoRoot is the httpscale source tree (hack/tools.sh, config/crd).
	RepoRoot string `json:"repoRoot"`

	// LocalRange is routed to lo inside the namespace.
	LocalRange string `json:"localRange"`
	// HostIP is where kube-apiserver listens and what it advertises.
	HostIP        string `json:"hostIP"`
	APIServerPort int    `json:"apiServerPort"`
	EtcdPort      int    `json:"etcdPort"`
	EtcdPeerPort  int    `json:"etcdPeerPort"`
	KCMPort       int    `json:"kcmPort"`
	SchedulerPort int    `json:"schedulerPort"`
	KwokPort      int    `json:"kwokPort"`
	// ServiceCIDR is the ClusterIP range; nothing in the namespace routes it.
	ServiceCIDR string `json:"serviceCIDR"`
	Nodes       []Node `json:"nodes"`

	// KEDA starts KEDA's operator and metrics adapter.
	KEDA bool `json:"keda"`
	// KEDAAdapterIP:KEDAAdapterPort serves the external metrics API (behind an APIService).
	KEDAAdapterIP   string `json:"kedaAdapterIP"`
	KEDAAdapterPort int    `json:"kedaAdapterPort"`
	// KEDAGRPCPort is the operator's metrics service (mutual TLS), on 127.0.0.1.
	KEDAGRPCPort int `json:"kedaGRPCPort"`
	// KEDAPortBase: operator metrics, operator probes and adapter metrics use base, base+1, base+2 on 127.0.0.1.
	KEDAPortBase int `json:"kedaPortBase"`

	// DNS runs CoreDNS (hack/tools.sh dns) as the cluster's DNS: it answers for cluster.local from the
	// API and refuses every other name. Pods of real nodes reach it through the kube-dns Service
	// (DNSServiceIP), KEDA's processes directly at DNSIP (see dns.go).
	DNS bool `json:"dns"`
	// DNSIP is where CoreDNS serves DNS (UDP and TCP 53), its health plugin (DNSHealthPort, /health)
	// and its ready plugin (DNSReadyPort, /ready).
	DNSIP         string `json:"dnsIP"`
	DNSHealthPort int    `json:"dnsHealthPort"`
	DNSReadyPort  int    `json:"dnsReadyPort"`

	// RealNodes adds two real nodes (kubelet, containerd, runc; see realnode.go) next to the kwok nodes,
	// plus a local image registry and kube-proxy. Off by default: it needs `hack/tools.sh node` and
	// changes host state that teardown restores (see docs/local-cluster.md).
	RealNodes bool `json:"realNodes"`
	// RealNodeRange is routed to the nodes' bridge instead of lo; the real nodes' addresses, their pod
	// CIDRs and (with real nodes) ServiceCIDR lie inside it.
	RealNodeRange string     `json:"realNodeRange"`
	Real          []RealNode `json:"real"`
	// RegistryPort is where the local image registry listens (localhost inside the namespace).
	RegistryPort int `json:"registryPort"`

	// SampleAppPort is where the sample app answers on every pod IP (0: no sample app).
	SampleAppPort int `json:"sampleAppPort"`

	// StopTimeout is how long a process has after SIGTERM before SIGKILL.
	StopTimeout time.Duration `json:"stopTimeout"`
	// ReadyTimeout bounds each wait of Up.
	ReadyTimeout time.Duration `json:"readyTimeout"`

	// Tool directories, filled from hack/tools.sh.
	ToolsDir string `json:"toolsDir"`
	KwokDir  string `json:"kwokDir"`
	KEDADir  string `json:"kedaDir"`
	NodeDir  string `json:"nodeDir"`
	DNSDir   string `json:"dnsDir"`
}

// RealNode is one node run by a kubelet and a containerd of its own.
type RealNode struct {
	Name    string `json:"name"`
	Zone    string `json:"zone"`
	IP      string `json:"ip"`
	PodCIDR string `json:"podCIDR"`
	// Bridge is the CNI bridge of the node's pods (at most 15 characters).
	Bridge      string `json:"bridge"`
	KubeletPort int    `json:"kubeletPort"`
	HealthzPort int    `json:"healthzPort"`
}

// Default returns the configuration of a cluster named name.
func Default(name, repoRoot string) Config {
	return Config{
		Name:          name,
		Dir:           filepath.Join(os.TempDir(), "httpscale-cluster-"+name),
		NetNS:         "httpscale-" + name,
		RepoRoot:      repoRoot,
		LocalRange:    "198.18.0.0/15",
		HostIP:        "198.19.0.1",
		APIServerPort: 6443,
		EtcdPort:      2379,
		EtcdPeerPort:  2380,
		KCMPort:       10257,
		SchedulerPort: 10259,
		KwokPort:      10247,
		ServiceCIDR:   "10.96.0.0/16",
		Nodes: []Node{
			{Name: "kwok-zone-a", Zone: "zone-a", PodCIDR: "198.18.0.0/24", IP: "198.19.0.11"},
			{Name: "kwok-zone-b", Zone: "zone-b", PodCIDR: "198.18.1.0/24", IP: "198.19.0.12"},
		},
		KEDA:            true,
		KEDAAdapterIP:   "198.19.0.2",
		KEDAAdapterPort: 6443,
		KEDAGRPCPort:    9666,
		KEDAPortBase:    18080,
		DNS:             true,
		DNSIP:           "198.19.0.53",
		DNSHealthPort:   8080,
		DNSReadyPort:    8181,
		RealNodeRange:   "198.18.128.0/17",
		Real: []RealNode{
			{Name: "real-zone-a", Zone: "zone-a", IP: "198.18.128.11", PodCIDR: "198.18.160.0/24", Bridge: "hscni-a", KubeletPort: 10250, HealthzPort: 10248},
			{Name: "real-zone-b", Zone: "zone-b", IP: "198.18.128.12", PodCIDR: "198.18.161.0/24", Bridge: "hscni-b", KubeletPort: 10350, HealthzPort: 10348},
		},
		RegistryPort:  5000,
		SampleAppPort: 8000,
		StopTimeout:   10 * time.Second,
		ReadyTimeout:  3 * time.Minute,
	}
}

// WithRealNodes turns the real nodes on and moves ServiceCIDR into RealNodeRange (kube-proxy's ClusterIPs
// must not be local addresses of the namespace), and turns the sample-app process off.
func (c Config) WithRealNodes() Config {
	c.RealNodes = true
	c.ServiceCIDR = "198.18.192.0/20"
	// The sample app runs as real pods from its image (PushSampleApp), not as a process.
	c.SampleAppPort = 0
	return c
}

// Server is the kube-apiserver URL, reachable inside the namespace (or through Cluster.DialContext).
func (c Config) Server() string { return fmt.Sprintf("https://%s:%d", c.HostIP, c.APIServerPort) }

func (c Config) path(elem ...string) string {
	return filepath.Join(append([]string{c.Dir}, elem...)...)
}

// SampleAppAdmin is where the sample app reports request counts per ?rid= (GET /requests).
func (c Config) SampleAppAdmin() string { return fmt.Sprintf("127.0.0.1:%d", c.SampleAppPort+1) }

// LogDir holds one log file per process.
func (c Config) LogDir() string { return c.path("logs") }

// AdminKubeconfig is a kubeconfig of a cluster administrator (group system:masters).
func (c Config) AdminKubeconfig() string { return c.path("kubeconfigs", "admin.kubeconfig") }

// PKIDir holds the cluster CA (ca.crt) and the other keys and certificates.
func (c Config) PKIDir() string { return c.path("pki") }

// Kubectl is the kubectl binary (run it inside the namespace, see Cluster.Command).
func (c Config) Kubectl() string { return filepath.Join(c.ToolsDir, "kubectl") }
