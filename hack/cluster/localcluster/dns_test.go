package localcluster

import (
	"strings"
	"testing"
)

func TestDNSServiceIPIsTheTenthAddressOfTheServiceCIDR(t *testing.T) {
	c := Default("t", "/repo")
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{c, "10.96.0.10"},
		{c.WithRealNodes(), "198.18.192.10"},
	} {
		got, err := tc.cfg.DNSServiceIP()
		if err != nil || got != tc.want {
			t.Errorf("DNSServiceIP() with %s = %q, %v; want %s", tc.cfg.ServiceCIDR, got, err, tc.want)
		}
	}
	c.ServiceCIDR = "fd00::/108"
	if got, err := c.DNSServiceIP(); err == nil {
		t.Errorf("DNSServiceIP() with an IPv6 range = %q, want an error", got)
	}
}

// The kube-dns Service must sit inside the ClusterIP range the API server allocates from, or the
// apply at up fails; and kubelets must name it.
func TestKubeletsUseTheKubeDNSService(t *testing.T) {
	c := Default("t", "/repo").WithRealNodes()
	m, err := c.dnsManifests()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m, "clusterIP: 198.18.192.10\n") || !strings.Contains(m, `addresses: ["198.19.0.53"]`) {
		t.Errorf("kube-dns manifests do not put the Service at 198.18.192.10 and its endpoint at 198.19.0.53:\n%s", m)
	}
	kc := c.kubeletConfig(c.Real[0])
	if !strings.Contains(kc, "clusterDNS: [198.18.192.10]\n") || !strings.Contains(kc, "clusterDomain: cluster.local\n") {
		t.Errorf("kubelet configuration lacks clusterDNS/clusterDomain:\n%s", kc)
	}
	c.DNS = false
	if kc := c.kubeletConfig(c.Real[0]); !strings.Contains(kc, "clusterDNS: []\n") {
		t.Errorf("kubelet configuration without DNS names a DNS server:\n%s", kc)
	}
}

// Nothing in the Corefile may send a query outside the cluster.
func TestCorefileServesOnlyClusterZones(t *testing.T) {
	cf := Default("t", "/repo").corefile()
	if !strings.HasPrefix(cf, "cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {") {
		t.Errorf("Corefile serves other zones:\n%s", cf)
	}
	for _, p := range []string{"forward", "proxy", "grpc", "file", "hosts"} {
		if strings.Contains(cf, "\n    "+p+" ") {
			t.Errorf("Corefile uses plugin %s:\n%s", p, cf)
		}
	}
}
