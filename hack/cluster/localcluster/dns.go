package localcluster

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ClusterDomain is the DNS domain of the cluster's Services (<svc>.<ns>.svc.cluster.local).
const ClusterDomain = "cluster.local"

// DNSUser is the identity CoreDNS reads the API with; RBAC grants it list/watch on Services,
// EndpointSlices and Namespaces only (dnsManifests).
const DNSUser = "system:coredns"

// DNSServiceIP is the ClusterIP of kube-system/kube-dns: the tenth address of ServiceCIDR, as kubeadm
// clusters have it (10.96.0.10; 198.18.192.10 with real nodes).
func (c Config) DNSServiceIP() (string, error) {
	p, err := netip.ParsePrefix(c.ServiceCIDR)
	if err != nil || !p.Addr().Is4() {
		return "", fmt.Errorf("service CIDR %q: not an IPv4 prefix", c.ServiceCIDR)
	}
	a := p.Masked().Addr().As4()
	a[3] += 10
	return netip.AddrFrom4(a).String(), nil
}

// DNSReadyURL is CoreDNS's ready plugin: 200 once the kubernetes plugin has synced with the API.
func (c Config) DNSReadyURL() string {
	return "http://" + net.JoinHostPort(c.DNSIP, strconv.Itoa(c.DNSReadyPort)) + "/ready"
}

// corefile serves cluster.local and the reverse zones from the API and nothing else: there is no
// forward plugin (it is not even compiled in, see hack/tools/coredns), so a name outside the cluster
// gets REFUSED and no query leaves the namespace.
func (c Config) corefile() string {
	return fmt.Sprintf(`%[1]s:53 in-addr.arpa:53 ip6.arpa:53 {
    bind %[2]s
    errors
    log
    health %[2]s:%[3]d
    ready %[2]s:%[4]d
    kubernetes %[1]s in-addr.arpa ip6.arpa {
        kubeconfig %[5]s httpscale-%[6]s
        pods disabled
        ttl 5
    }
    cache 30
    loop
    reload
}
`, ClusterDomain, c.DNSIP, c.DNSHealthPort, c.DNSReadyPort, c.path("kubeconfigs", "coredns.kubeconfig"), c.Name)
}

// dnsManifests are CoreDNS's RBAC and the kube-dns Service at DNSServiceIP, selector-less, with an
// EndpointSlice at DNSIP (UDP and TCP 53), so kube-proxy sends pods' queries to the CoreDNS process.
func (c Config) dnsManifests() (string, error) {
	svcIP, err := c.DNSServiceIP()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf(`---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: %[1]q}
rules:
- apiGroups: [""]
  resources: [services, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: %[1]q}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: %[1]q}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: %[1]q}]
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns, kubernetes.io/name: CoreDNS}
spec:
  clusterIP: %[2]s
  ports:
  - {name: dns, port: 53, protocol: UDP, targetPort: 53}
  - {name: dns-tcp, port: 53, protocol: TCP, targetPort: 53}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-local
  namespace: kube-system
  labels:
    kubernetes.io/service-name: kube-dns
    endpointslice.kubernetes.io/managed-by: local-cluster.httpscale.dev
addressType: IPv4
ports:
- {name: dns, port: 53, protocol: UDP}
- {name: dns-tcp, port: 53, protocol: TCP}
endpoints:
- addresses: [%[3]q]
  conditions: {ready: true, serving: true, terminating: false}
`, DNSUser, svcIP, c.DNSIP), nil
}

// startDNS applies CoreDNS's RBAC and the kube-dns Service, starts CoreDNS inside the namespace and
// waits until its ready plugin reports the kubernetes plugin synced.
func (c Config) startDNS(ctx context.Context) error {
	m, err := c.dnsManifests()
	if err != nil {
		return err
	}
	if err := c.Apply(ctx, m); err != nil {
		return err
	}
	file := c.path("Corefile")
	if err := os.WriteFile(file, []byte(c.corefile()), 0o644); err != nil {
		return err
	}
	p, err := c.StartProcess("coredns", filepath.Join(c.DNSDir, "coredns"), []string{"-conf=" + file}, nil)
	if err != nil {
		return err
	}
	return poll(ctx, "CoreDNS "+c.DNSReadyURL(), c.ReadyTimeout, func(ctx context.Context) (bool, error) {
		if err := alive(p); err != nil {
			return false, err
		}
		code, body, err := c.get(ctx, c.DNSReadyURL(), "")
		if err == nil && code != 200 {
			err = fmt.Errorf("%d %s", code, strings.TrimSpace(body))
		}
		return err == nil, err
	})
}

// ResolvConf writes (once per namespace) and returns the resolv.conf a process of namespace ns gets
// from StartProcessWithClusterDNS: CoreDNS as the only nameserver and a pod's search path.
func (c Config) ResolvConf(ns string) (string, error) {
	dir := c.path("resolv")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	file := filepath.Join(dir, ns+".conf")
	body := fmt.Sprintf("# httpscale local cluster: CoreDNS, as a pod in namespace %[1]s sees it\nnameserver %[2]s\nsearch %[1]s.svc.%[3]s svc.%[3]s %[3]s\noptions ndots:5\n",
		ns, c.DNSIP, ClusterDomain)
	return file, os.WriteFile(file, []byte(body), 0o644)
}

// StartProcessWithClusterDNS is StartProcess for a process that must resolve Service names as a pod of
// namespace ns does (KEDA dials the scaler by its Service name). Resolvers read /etc/resolv.conf, and
// the host's must stay as it is, so the process gets a private mount namespace in which ResolvConf(ns)
// is bind-mounted over /etc/resolv.conf. unshare and sh exec in turn, so the recorded PID is bin's own
// and Stop signals it as before.
func (c Config) StartProcessWithClusterDNS(name, ns, bin string, args, env []string) (*Process, error) {
	if !c.DNS {
		return c.StartProcess(name, bin, args, env)
	}
	// A bind mount needs a file to cover; a missing one would only show in the process's log.
	if _, err := os.Stat("/etc/resolv.conf"); err != nil {
		return nil, fmt.Errorf("starting %s with the cluster's DNS: %w", name, err)
	}
	rc, err := c.ResolvConf(ns)
	if err != nil {
		return nil, err
	}
	argv := []string{"ip", "netns", "exec", c.NetNS, "unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, rc, bin}
	return c.startProcess(name, append(argv, args...), env)
}
