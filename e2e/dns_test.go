//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// probeResult is one line of e2e/dnsprobe's output.
type probeResult struct {
	Check  string   `json:"check"`
	Target string   `json:"target"`
	Addrs  []string `json:"addrs"`
	Status int      `json:"status"`
	Body   string   `json:"body"`
	Err    string   `json:"err"`
}

// probeResults are dnsprobe's results keyed by "<check> <target>".
type probeResults map[string]probeResult

// parseProbe returns dnsprobe's results; other lines (logs) are skipped.
func parseProbe(out string) probeResults {
	GinkgoHelper()
	res := probeResults{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r probeResult
		Expect(json.Unmarshal([]byte(line), &r)).To(Succeed(), "dnsprobe output line %q", line)
		res[r.Check+" "+r.Target] = r
	}
	return res
}

// expectAddr expects name to have resolved to exactly want.
func (res probeResults) expectAddr(name, want string) {
	GinkgoHelper()
	r, ok := res["resolve "+name]
	Expect(ok).To(BeTrue(), "dnsprobe reported no resolution of %s", name)
	Expect(r.Err).To(BeEmpty(), "resolving %s", name)
	Expect(r.Addrs).To(Equal([]string{want}), "resolving %s", name)
}

// expectRefused expects name (outside the cluster) not to have resolved.
func (res probeResults) expectRefused(name string) {
	GinkgoHelper()
	r, ok := res["resolve "+name]
	Expect(ok).To(BeTrue(), "dnsprobe reported no resolution of %s", name)
	Expect(r.Err).NotTo(BeEmpty(), "resolving %s (outside the cluster) must fail", name)
	Expect(r.Addrs).To(BeEmpty(), "resolving %s (outside the cluster)", name)
}

// expectGet expects a 200 from the sample app at url.
func (res probeResults) expectGet(url string) {
	GinkgoHelper()
	r, ok := res["get "+url]
	Expect(ok).To(BeTrue(), "dnsprobe reported no GET %s", url)
	Expect(r.Err).To(BeEmpty(), "GET %s", url)
	Expect(r.Status).To(Equal(200), "GET %s", url)
	var a answer
	Expect(json.Unmarshal([]byte(r.Body), &a)).To(Succeed(), "GET %s: body %q is not the sample app's", url, r.Body)
	Expect(a.PodIP).NotTo(BeEmpty(), "GET %s: body %q", url, r.Body)
}

// expectNameserver expects /etc/resolv.conf, as the probe read it, to name exactly ns.
func (res probeResults) expectNameserver(ns string) {
	GinkgoHelper()
	rc, ok := res["resolv.conf /etc/resolv.conf"]
	Expect(ok).To(BeTrue(), "dnsprobe reported no /etc/resolv.conf")
	var got []string
	for _, l := range strings.Split(rc.Body, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "nameserver" {
			got = append(got, f[1])
		}
	}
	Expect(got).To(Equal([]string{ns}), "nameservers in /etc/resolv.conf:\n%s", rc.Body)
}

// The cluster's DNS (CoreDNS as a process, the Service kube-system/kube-dns, the kubelets' clusterDNS):
// a pod on a real node and a process started like KEDA's resolve Service names as in any cluster, the
// host's /etc/resolv.conf stays as it was, and no name outside the cluster is answered or forwarded.
var _ = Describe("Cluster DNS", Ordered, func() {
	var (
		ns, fqdn, outside string
		dnsIP, apiIP      string
		svcIP             string
		probe             string // the dnsprobe binary
	)
	const service = "app"

	BeforeAll(func(ctx SpecContext) {
		Expect(f.Cluster.DNS).To(BeTrue(), "the suite's cluster runs without DNS")
		_, ns, _ = scenario(ctx, "dns")
		dep, svc := f.SampleApp(ns, service, 1)
		Expect(f.Client.Create(ctx, dep)).To(Succeed())
		Expect(f.Client.Create(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(dep), dep)).To(Succeed())
			g.Expect(dep.Status.ReadyReplicas).To(BeEquivalentTo(1))
		}).WithContext(ctx).Should(Succeed())

		var err error
		dnsIP, err = f.Cluster.DNSServiceIP()
		Expect(err).NotTo(HaveOccurred())
		clusterIP := func(ns, name string) string {
			var s corev1.Service
			Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s)).To(Succeed())
			Expect(s.Spec.ClusterIP).NotTo(BeEmpty(), "Service %s/%s has no ClusterIP", ns, name)
			return s.Spec.ClusterIP
		}
		apiIP, svcIP = clusterIP("default", "kubernetes"), clusterIP(ns, service)
		Expect(clusterIP("kube-system", "kube-dns")).To(Equal(dnsIP), "kube-system/kube-dns ClusterIP")
		fqdn = service + "." + ns + ".svc." + localcluster.ClusterDomain
		outside = "example.com"

		probe = buildProbe(ctx)
	})

	It("lets a pod on a real node resolve the API server and Services by FQDN and by short name, and reach them", func(ctx SpecContext) {
		image := f.Cluster.RegistryHost() + "/dnsprobe:e2e"
		Expect(f.Cluster.PushImage(ctx, image, probe)).To(Succeed())
		api := "kubernetes.default.svc." + localcluster.ClusterDomain
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "dnsprobe", Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector:                  framework.RealNodeSelector(),
				RestartPolicy:                 corev1.RestartPolicyNever,
				TerminationGracePeriodSeconds: ptr.To[int64](1),
				Containers: []corev1.Container{{
					Name: "probe", Image: image,
					Args: []string{
						"--resolve=" + api, "--resolve=" + fqdn, "--resolve=" + service, "--resolve=" + outside,
						"--dial=" + api + ":443", "--get=http://" + fqdn + "/hello",
					},
				}},
			},
		}
		Expect(f.Client.Create(ctx, pod)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
			g.Expect(pod.Status.Phase).NotTo(Equal(corev1.PodFailed), "dnsprobe pod failed: %+v", pod.Status)
			g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded))
		}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Succeed())
		out, err := f.Cluster.KubectlRun(ctx, "", "-n", ns, "logs", "dnsprobe")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("dnsprobe in a pod on %s:\n%s\n", pod.Spec.NodeName, out)
		res := parseProbe(out)
		res.expectNameserver(dnsIP)
		res.expectAddr(api, apiIP)
		res.expectAddr(fqdn, svcIP)
		res.expectAddr(service, svcIP) // the search path of a pod of namespace ns
		res.expectRefused(outside)
		dial, ok := res["dial "+api+":443"]
		Expect(ok).To(BeTrue(), "dnsprobe reported no connection to %s:443", api)
		Expect(dial.Err).To(BeEmpty(), "connecting to %s:443", api)
		res.expectGet("http://" + fqdn + "/hello")
	})

	It("lets a process started like KEDA's resolve <svc>.<ns>.svc.cluster.local and reach it, leaving the host's resolv.conf alone", func(ctx SpecContext) {
		hostBefore, err := os.ReadFile("/etc/resolv.conf")
		Expect(err).NotTo(HaveOccurred())
		p, err := f.Cluster.StartProcessWithClusterDNS("dnsprobe", "keda", probe, []string{
			"--resolve=" + fqdn, "--resolve=kube-dns.kube-system", "--resolve=" + outside, "--get=http://" + fqdn + "/hello",
		}, nil)
		Expect(err).NotTo(HaveOccurred())
		code, err := p.ExitCode(time.Minute)
		Expect(p.Stop(f.Cluster.StopTimeout)).To(Succeed())
		Expect(err).NotTo(HaveOccurred(), "dnsprobe as a process; see %s", p.LogFile)
		Expect(code).To(BeZero(), "dnsprobe as a process; see %s", p.LogFile)
		out, err := os.ReadFile(p.LogFile)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("dnsprobe as a process:\n%s\n", out)
		res := parseProbe(string(out))
		res.expectNameserver(f.Cluster.DNSIP)
		res.expectAddr(fqdn, svcIP)
		res.expectAddr("kube-dns.kube-system", dnsIP) // search path svc.cluster.local
		res.expectRefused(outside)
		res.expectGet("http://" + fqdn + "/hello")

		hostAfter, err := os.ReadFile("/etc/resolv.conf")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(hostAfter)).To(Equal(string(hostBefore)), "the host's /etc/resolv.conf changed")
		Expect(string(hostAfter)).NotTo(ContainSubstring(f.Cluster.DNSIP), "the host's /etc/resolv.conf names the cluster's DNS")
	})

	It("answers nothing outside the cluster and has no plugin that could forward a query", func(ctx SpecContext) {
		for _, q := range []struct {
			name  string
			rcode int
		}{
			{"kubernetes.default.svc." + localcluster.ClusterDomain + ".", 0}, // NOERROR
			{fqdn + ".", 0},
			{"nosuchservice." + ns + ".svc." + localcluster.ClusterDomain + ".", 3}, // NXDOMAIN
			{outside + ".", 5}, // REFUSED: no zone of this server, no upstream to ask
			{"localhost.", 5},
		} {
			rcode, answers, err := queryA(ctx, f.Cluster, q.name)
			Expect(err).NotTo(HaveOccurred(), "querying %s at %s", q.name, f.Cluster.DNSIP)
			Expect(rcode).To(Equal(q.rcode), "rcode for %s", q.name)
			Expect(answers > 0).To(Equal(rcode == 0), "%s: rcode %d with %d answers", q.name, rcode, answers)
		}
		// The binary has no plugin that could send a query elsewhere.
		out, err := exec.CommandContext(ctx, filepath.Join(f.Cluster.DNSDir, "coredns"), "-plugins").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "coredns -plugins: %s", out)
		plugins := map[string]bool{}
		for _, l := range strings.Fields(string(out)) {
			plugins[strings.TrimPrefix(l, "dns.")] = true
		}
		Expect(plugins).To(HaveKey("kubernetes"), "coredns -plugins:\n%s", out)
		for _, p := range []string{"forward", "proxy", "grpc", "etcd", "clouddns", "route53", "azure", "file", "auto", "secondary"} {
			Expect(plugins).NotTo(HaveKey(p), "CoreDNS is built with plugin %s, which answers for names outside the cluster", p)
		}
	})
})

// clusterLookup resolves name (fully qualified) at CoreDNS from inside the namespace, over TCP only, so
// CoreDNS's log tells its queries (tcp) from those of KEDA and pods (udp).
func clusterLookup(ctx context.Context, name string) ([]string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return localcluster.DialContext(f.Cluster.NetNS)(ctx, "tcp", net.JoinHostPort(f.Cluster.DNSIP, "53"))
	}}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return r.LookupHost(ctx, strings.TrimSuffix(name, ".")+".")
}

// queryA sends one A query for name (fully qualified) to CoreDNS over UDP inside the namespace and
// returns the response's rcode and answer count.
func queryA(ctx context.Context, cfg localcluster.Config, name string) (rcode, answers int, err error) {
	msg := []byte{0x4e, 0x21, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0} // id, RD, one question
	for _, label := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		msg = append(msg, byte(len(label)))
		msg = append(msg, label...)
	}
	msg = append(msg, 0, 0, 1, 0, 1) // root, type A, class IN
	conn, err := localcluster.DialContext(cfg.NetNS)(ctx, "udp", fmt.Sprintf("%s:53", cfg.DNSIP))
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(msg); err != nil {
		return 0, 0, err
	}
	resp := make([]byte, 1500)
	n, err := conn.Read(resp)
	if err != nil {
		return 0, 0, err
	}
	if n < 12 || resp[0] != msg[0] || resp[1] != msg[1] || resp[2]&0x80 == 0 {
		return 0, 0, fmt.Errorf("not a response to the query: % x", resp[:n])
	}
	return int(resp[3] & 0x0f), int(binary.BigEndian.Uint16(resp[6:8])), nil
}
