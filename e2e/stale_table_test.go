//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/tablewatch"
)

// Readiness that notices a stale routing table, on the chart's pods. The watch of one interceptor is
// cut the way real watches stall: its established TCP connections to the API server stop carrying
// packets (DROP rules on exactly those connections, in the pod's own network namespace; a lost
// conntrack or NAT entry, or a partition, looks the same), with no reset, so client-go's HTTP/2
// connection and every watch on it wait in silence, while a new connection still gets through. The
// operator then writes a newer table; that interceptor turns unready within the bound the chart sets
// (its staleness probe opens a connection of its own each time), and ready again by itself once
// client-go gives up on the silent connection and its watches start over; it is never restarted.
var _ = Describe("Stale routing table", Ordered, func() {
	const bound = 6 * time.Second
	interval := tablewatch.ProbeInterval(bound)

	BeforeAll(func(ctx SpecContext) {
		DeferCleanup(func(ctx SpecContext) {
			Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter)).To(Succeed())
			rebalanceInterceptors(ctx)
		})
		Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter, "--set", "interceptor.routingTable.staleAfter="+bound.String())).To(Succeed())
		rebalanceInterceptors(ctx)
	})

	It("turns an interceptor whose table watch is cut unready within the bound, and ready again by itself", func(ctx SpecContext) {
		h, ns, host := scenario(ctx, "stale")
		routedApp(ctx, ns, "before", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.Replicas.Min = ptr.To[int32](1)
		})
		cut, other := h.Interceptors[0], h.Interceptors[1]
		restarts := restartCount(ctx, cut.Name)

		// The test reads the admin port with one token, reviewed by the cut interceptor before the cut
		// (for /status and for /metrics, decided apart), as the scaler's and the operator's are by their
		// polls; with the cut, no review can be made, and the earlier acceptance holds.
		Expect(status(ctx, cut).TableVersion).NotTo(BeEmpty())
		Expect(metric(ctx, cut, tablewatch.MetricStale)).To(Equal("0"))

		By("cutting " + cut.Name + "'s connections to the API server")
		rules := cutAPIConnections(ctx, cut)
		DeferCleanup(func(ctx SpecContext) { rules.remove(ctx) })
		Consistently(func() int { return readyz(ctx, cut) }).WithContext(ctx).WithTimeout(bound+2*interval).
			Should(Equal(http.StatusOK), "a cut watch with nothing new to deliver is not stale")

		By("a newer routing table: another app")
		before := status(ctx, other).TableVersion
		newApp := &httpscalev1alpha1.HTTPScaledObject{}
		newApp.Name, newApp.Namespace = "after", ns
		// The same Deployment: only its route is new (one ScaledObject per workload).
		newApp.Annotations = map[string]string{httpscalev1alpha1.AnnotationSkipScaledObject: "true"}
		newApp.Spec = httpscalev1alpha1.HTTPScaledObjectSpec{
			Hosts:          []httpscalev1alpha1.Host{httpscalev1alpha1.Host("after." + host)},
			ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{Name: "before", Service: "before", Port: ptr.To[int32](80)},
		}
		Expect(f.Client.Create(ctx, newApp)).To(Succeed())
		Eventually(func() string { return status(ctx, other).TableVersion }).WithContext(ctx).WithPolling(50*time.Millisecond).
			ShouldNot(Equal(before), "the uncut interceptor loads the new table")
		written := time.Now()
		Expect(status(ctx, cut).TableVersion).To(Equal(before), "the cut interceptor's watch delivered nothing")

		Eventually(func() int { return readyz(ctx, cut) }).WithContext(ctx).WithTimeout(bound + 3*interval).WithPolling(100 * time.Millisecond).
			Should(Equal(http.StatusServiceUnavailable))
		took := time.Since(written)
		AddReportEntry("stale table: newer table served elsewhere -> readiness fails", fmt.Sprintf("%s (bound %s, probe every %s)", took.Round(10*time.Millisecond), bound, interval))
		Expect(took).To(BeNumerically(">=", bound-time.Second), "not before the bound")
		Expect(took).To(BeNumerically("<=", bound+2*interval), "within the bound and two probe intervals")
		Expect(readyzBody(ctx, cut)).To(ContainSubstring("routing table stale"))
		Expect(metric(ctx, cut, tablewatch.MetricStale)).To(Equal("1"))
		Eventually(func() (string, error) {
			return f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "logs", cut.Name)
		}).WithContext(ctx).Should(ContainSubstring("routing table stale"))
		Eventually(func() bool { return podReady(ctx, cut.Name) }).WithContext(ctx).WithTimeout(10*time.Second).
			Should(BeFalse(), "the kubelet takes it out of the Service")
		Expect(readyz(ctx, other)).To(Equal(http.StatusOK), "the other interceptor is not stale")

		By("recovering by itself: client-go gives up on the silent connection and its watches start over")
		Eventually(func() int { return readyz(ctx, cut) }).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(250 * time.Millisecond).
			Should(Equal(http.StatusOK))
		AddReportEntry("stale table: readiness fails -> ready again (cut left in place)", time.Since(written).Round(time.Second).String())
		Expect(status(ctx, cut).TableVersion).To(Equal(status(ctx, other).TableVersion))
		Expect(metric(ctx, cut, tablewatch.MetricStale)).To(Equal("0"))
		Eventually(func() bool { return podReady(ctx, cut.Name) }).WithContext(ctx).WithTimeout(10 * time.Second).Should(BeTrue())
		Expect(restartCount(ctx, cut.Name)).To(Equal(restarts), "recovered without a restart")
		Eventually(func() (int, error) {
			a, err := ask(ctx, h, 0, "after."+host, "/", nil)
			return a.Status, err
		}).WithContext(ctx).Should(Equal(http.StatusOK), "the recovered interceptor routes the new app")
	})
})

// apiRules are the DROP rules that cut one pod's connections to the API server.
type apiRules struct {
	netns string
	specs [][]string
}

// cutAPIConnections drops every packet of the established connections from the interceptor pod to
// the API server (the kubernetes Service's address, as the pod sees it), both ways, in the pod's
// network namespace. New connections are not affected.
func cutAPIConnections(ctx context.Context, ic framework.Interceptor) *apiRules {
	GinkgoHelper()
	pids, err := localcluster.ContainerPIDs(ic.ContainerID)
	Expect(err).NotTo(HaveOccurred())
	r := &apiRules{netns: fmt.Sprintf("/proc/%d/ns/net", pids[0])}
	api, err := f.Cluster.KubectlRun(ctx, "", "get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}")
	Expect(err).NotTo(HaveOccurred())
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+r.netns, "ss", "-Htn", "state", "established", "dst", api+":443").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s", out)
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) < 4 {
			continue
		}
		_, port, err := net.SplitHostPort(fields[2]) // Recv-Q Send-Q Local Peer
		Expect(err).NotTo(HaveOccurred())
		r.specs = append(r.specs,
			[]string{"OUTPUT", "-p", "tcp", "-d", api, "--dport", "443", "--sport", port, "-j", "DROP"},
			[]string{"INPUT", "-p", "tcp", "-s", api, "--sport", "443", "--dport", port, "-j", "DROP"})
	}
	Expect(r.specs).NotTo(BeEmpty(), "the interceptor has no connection to the API server at %s", api)
	for _, spec := range r.specs {
		out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + r.netns, "iptables", "-I"}, spec...)...).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
	}
	fmt.Fprintf(GinkgoWriter, "cut %d connections of %s to %s:443\n", len(r.specs)/2, ic.Name, api)
	return r
}

// remove deletes the rules (when the pod still exists).
func (r *apiRules) remove(ctx context.Context) {
	for _, spec := range r.specs {
		_ = exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + r.netns, "iptables", "-D"}, spec...)...).Run()
	}
}

// adminGet GETs path on an interceptor's admin port.
func adminGet(ctx context.Context, ic framework.Interceptor, path string) (int, string) {
	GinkgoHelper()
	resp, err := adminTokenGet(ctx, ic.IP, path) // the admin port wants the fleet's token (but for the probes)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func readyz(ctx context.Context, ic framework.Interceptor) int {
	code, _ := adminGet(ctx, ic, admin.PathReadyz)
	return code
}

func readyzBody(ctx context.Context, ic framework.Interceptor) string {
	_, body := adminGet(ctx, ic, admin.PathReadyz)
	return body
}

// metric returns the value of an unlabelled metric of an interceptor, "" when absent.
func metric(ctx context.Context, ic framework.Interceptor, name string) string {
	_, body := adminGet(ctx, ic, "/metrics")
	for line := range strings.Lines(body) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// status returns an interceptor's admin /status.
func status(ctx context.Context, ic framework.Interceptor) (s admin.Status) {
	GinkgoHelper()
	_, body := adminGet(ctx, ic, admin.PathStatus)
	Expect(json.Unmarshal([]byte(body), &s)).To(Succeed(), body)
	return s
}

func podReady(ctx context.Context, name string) bool {
	out, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "pod", name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
	return err == nil && out == "True"
}

func restartCount(ctx context.Context, name string) int {
	GinkgoHelper()
	out, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "pod", name, "-o", "jsonpath={.status.containerStatuses[0].restartCount}")
	Expect(err).NotTo(HaveOccurred())
	n, err := strconv.Atoi(out)
	Expect(err).NotTo(HaveOccurred())
	return n
}
