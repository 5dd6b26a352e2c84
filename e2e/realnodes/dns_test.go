//go:build e2e

package realnodes

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// probeResult is one line of e2e/realnodes/dnsprobe's output.
type probeResult struct {
	Check  string   `json:"check"`
	Target string   `json:"target"`
	Addrs  []string `json:"addrs"`
	Status int      `json:"status"`
	Body   string   `json:"body"`
	Err    string   `json:"err"`
}

// parseProbe returns dnsprobe's results keyed by check and target; other lines (logs) are skipped.
func parseProbe(t *testing.T, out string) map[string]probeResult {
	t.Helper()
	res := map[string]probeResult{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var r probeResult
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("dnsprobe output line %q: %v", line, err)
		}
		res[r.Check+" "+r.Target] = r
	}
	return res
}

// checkClusterDNS proves the cluster DNS on a running real-node cluster in which the Service `service`
// of namespace default serves the sample app: (a) a pod on a real node resolves the kubernetes Service
// and `service` by name (FQDN and search path) and connects to both; (b) a process started like KEDA's
// (StartProcessWithClusterDNS) resolves <svc>.<ns>.svc.cluster.local and reaches it, while the host's
// /etc/resolv.conf stays as it was; (c) names outside the cluster are refused by CoreDNS, which has no
// upstream, so no query leaves the namespace.
func checkClusterDNS(ctx context.Context, t *testing.T, cfg localcluster.Config, service string) {
	dnsIP, err := cfg.DNSServiceIP()
	if err != nil {
		t.Fatal(err)
	}
	clusterIP := func(ns, name string) string {
		ip, err := cfg.KubectlRun(ctx, "", "-n", ns, "get", "service", name, "-o", "jsonpath={.spec.clusterIP}")
		if err != nil {
			t.Fatal(err)
		}
		return ip
	}
	apiIP, svcIP := clusterIP("default", "kubernetes"), clusterIP("default", service)
	if got := clusterIP("kube-system", "kube-dns"); got != dnsIP {
		t.Fatalf("kube-system/kube-dns ClusterIP = %s, want %s", got, dnsIP)
	}
	fqdn := service + ".default.svc." + localcluster.ClusterDomain
	outside := "example.com"

	bin := filepath.Join(t.TempDir(), "dnsprobe")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./e2e/realnodes/dnsprobe")
	build.Dir, build.Env = cfg.RepoRoot, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building dnsprobe: %v: %s", err, out)
	}

	wantAddr := func(res map[string]probeResult, name, want string) {
		t.Helper()
		r, ok := res["resolve "+name]
		if !ok || r.Err != "" || !slices.Equal(r.Addrs, []string{want}) {
			t.Errorf("resolving %s: got %v (err %q, reported %v), want [%s]", name, r.Addrs, r.Err, ok, want)
		}
	}
	wantRefused := func(res map[string]probeResult, name string) {
		t.Helper()
		r, ok := res["resolve "+name]
		if !ok || r.Err == "" || len(r.Addrs) != 0 {
			t.Errorf("resolving %s (outside the cluster): got %v (err %q, reported %v), want an error", name, r.Addrs, r.Err, ok)
		}
	}
	wantGet := func(res map[string]probeResult, url string) {
		t.Helper()
		if r := res["get "+url]; r.Err != "" || r.Status != 200 {
			t.Errorf("GET %s: status %d err %q, want 200", url, r.Status, r.Err)
		}
	}
	wantNameserver := func(res map[string]probeResult, ns string) {
		t.Helper()
		var got []string
		for _, l := range strings.Split(res["resolv.conf /etc/resolv.conf"].Body, "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[0] == "nameserver" {
				got = append(got, f[1])
			}
		}
		if !slices.Equal(got, []string{ns}) {
			t.Errorf("nameservers in /etc/resolv.conf = %v, want [%s]", got, ns)
		}
	}

	t.Run("pod", func(t *testing.T) {
		image := cfg.RegistryHost() + "/dnsprobe:e2e"
		if err := cfg.PushImage(ctx, image, bin); err != nil {
			t.Fatal(err)
		}
		api := "kubernetes.default.svc." + localcluster.ClusterDomain
		pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: dnsprobe, namespace: default}
spec:
  nodeSelector: {type: real}
  restartPolicy: Never
  containers:
  - name: probe
    image: %s
    args: [--resolve=%s, --resolve=%s, --resolve=%s, --resolve=%s, --dial=%s:443, --get=http://%s/hello]
`, image, api, fqdn, service, outside, api, fqdn)
		if err := cfg.Apply(ctx, pod); err != nil {
			t.Fatal(err)
		}
		defer func() { _, _ = cfg.KubectlRun(ctx, "", "-n", "default", "delete", "pod", "dnsprobe", "--wait=false") }()
		if _, err := cfg.KubectlRun(ctx, "", "-n", "default", "wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/dnsprobe", "--timeout=3m"); err != nil {
			st, _ := cfg.KubectlRun(ctx, "", "-n", "default", "get", "pod", "dnsprobe", "-o", "yaml")
			t.Fatalf("%v\n%s", err, st)
		}
		out, err := cfg.KubectlRun(ctx, "", "-n", "default", "logs", "dnsprobe")
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("dnsprobe in a pod:\n%s", out)
		res := parseProbe(t, out)
		wantNameserver(res, dnsIP)
		wantAddr(res, api, apiIP)
		wantAddr(res, fqdn, svcIP)
		wantAddr(res, service, svcIP) // the search path of a pod of namespace default
		wantRefused(res, outside)
		if r := res["dial "+api+":443"]; r.Err != "" {
			t.Errorf("connecting to %s:443: %s", api, r.Err)
		}
		wantGet(res, "http://"+fqdn+"/hello")
	})

	t.Run("process like KEDA", func(t *testing.T) {
		hostBefore, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		p, err := cfg.StartProcessWithClusterDNS("dnsprobe", "keda", bin, []string{
			"--resolve=" + fqdn, "--resolve=kube-dns.kube-system", "--resolve=" + outside, "--get=http://" + fqdn + "/hello",
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		code, err := p.ExitCode(time.Minute)
		if stopErr := p.Stop(cfg.StopTimeout); stopErr != nil {
			t.Error(stopErr)
		}
		if err != nil || code != 0 {
			t.Fatalf("dnsprobe as a process: exit %d, %v; see %s", code, err, p.LogFile)
		}
		out, err := os.ReadFile(p.LogFile)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("dnsprobe as a process:\n%s", out)
		res := parseProbe(t, string(out))
		wantNameserver(res, cfg.DNSIP)
		wantAddr(res, fqdn, svcIP)
		wantAddr(res, "kube-dns.kube-system", dnsIP) // search path svc.cluster.local
		wantRefused(res, outside)
		wantGet(res, "http://"+fqdn+"/hello")

		hostAfter, err := os.ReadFile("/etc/resolv.conf")
		if err != nil {
			t.Fatal(err)
		}
		if string(hostBefore) != string(hostAfter) || strings.Contains(string(hostAfter), cfg.DNSIP) {
			t.Errorf("the host's /etc/resolv.conf changed:\nbefore:\n%s\nafter:\n%s", hostBefore, hostAfter)
		}
	})

	t.Run("nothing outside the cluster", func(t *testing.T) {
		for _, q := range []struct {
			name  string
			rcode int
		}{
			{"kubernetes.default.svc." + localcluster.ClusterDomain + ".", 0}, // NOERROR
			{fqdn + ".", 0},
			{"nosuchservice.default.svc." + localcluster.ClusterDomain + ".", 3}, // NXDOMAIN
			{outside + ".", 5}, // REFUSED: no zone of this server, no upstream to ask
			{"localhost.", 5},
		} {
			rcode, answers, err := queryA(ctx, cfg, q.name)
			if err != nil {
				t.Fatalf("querying %s at %s: %v", q.name, cfg.DNSIP, err)
			}
			if rcode != q.rcode || (rcode == 0) != (answers > 0) {
				t.Errorf("%s: rcode %d with %d answers, want rcode %d", q.name, rcode, answers, q.rcode)
			}
		}
		// The binary has no plugin that could send a query elsewhere.
		out, err := exec.CommandContext(ctx, filepath.Join(cfg.DNSDir, "coredns"), "-plugins").CombinedOutput()
		if err != nil {
			t.Fatalf("coredns -plugins: %v: %s", err, out)
		}
		plugins := map[string]bool{}
		for _, l := range strings.Fields(string(out)) {
			plugins[strings.TrimPrefix(l, "dns.")] = true
		}
		if !plugins["kubernetes"] {
			t.Fatalf("coredns -plugins lists no kubernetes plugin:\n%s", out)
		}
		for _, p := range []string{"forward", "proxy", "grpc", "etcd", "clouddns", "route53", "azure", "file", "auto", "secondary"} {
			if plugins[p] {
				t.Errorf("CoreDNS is built with plugin %s, which answers for names outside the cluster", p)
			}
		}
	})
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
