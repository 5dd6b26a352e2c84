//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/admin"
)

// One interceptor is killed (SIGKILL: no drain) while a warm app gets 40 requests a second through the
// interceptor Service, each on a new connection, each in flight for 300 ms at the app. Only what
// the killed process held can fail: the requests in flight on it, and connections kube-proxy still
// sends to its address until the kubelet has seen the container die (refused: nothing was sent, a
// client or load balancer may retry them). Its replacement (the container restarted in place) loads
// the current routing table before it reports Ready.
var _ = Describe("Fault: an interceptor killed under steady load", Label("fault"), Ordered, func() {
	const appLatency = 300 * time.Millisecond
	sc := setUpScenario("ickill", hostApp("app", 2, warmBounds(2)))

	It("fails only the requests in flight on it, and its replacement serves the current table before it is Ready", func(ctx SpecContext) {
		svc := sc.h.InterceptorService
		Eventually(statusOf(ctx, serviceURL(svc, "/warmup"), sc.host)).WithContext(ctx).Should(Equal(http.StatusOK))
		killed, other := sc.h.Interceptors[0], sc.h.Interceptors[1]
		readyAgain := watchReplacement(ctx, killed, other, sc.host)
		load := startSteady(ctx, serviceURL(svc, fmt.Sprintf("/steady?sleep=%s", appLatency)), sc.host, 25*time.Millisecond, 30*time.Second)
		time.Sleep(5 * time.Second)
		// The container's processes are found first: that reads every process's cgroup, which takes
		// a while on a busy machine, and the interceptor accepts requests meanwhile (they are in
		// flight at the kill, not after it).
		pids, err := localcluster.ContainerPIDs(killed.ContainerID)
		Expect(err).NotTo(HaveOccurred())
		By("killing " + killed.Name + " with SIGKILL")
		at := time.Now()
		for _, pid := range pids {
			Expect(syscall.Kill(pid, syscall.SIGKILL)).To(Succeed())
		}
		// Until the process has exited its listening socket stays open: the kernel completes the
		// handshake of a connection sent there after the signal, which then dies with the process
		// (reset, as one in flight) though nothing of it was processed.
		exited := waitExited(ctx, pids)
		var ready replacementReady
		Eventually(readyAgain).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Receive(&ready))
		time.Sleep(5 * time.Second)
		shots := load.stopSteady()

		var inFlight, refused, others []shot
		for _, s := range shots {
			switch {
			case s.ok():
			case s.sent.Before(exited) && s.done.After(at) && s.err != nil && !notConnected(s.err):
				inFlight = append(inFlight, s) // the connection died with the process
			case notConnected(s.err):
				// Nothing was sent: refused, or reset while connecting (the dying process's listener
				// took the SYN and was closed before accepting it).
				refused = append(refused, s)
			default:
				others = append(others, s)
			}
		}
		_, summary := loadReport(shots)
		report("interceptor killed (SIGKILL) under 40 requests/s", "%s; exited %s after the signal; %d in flight on it at the kill (or taken by its listener before it exited) failed, %d new connections refused (kube-proxy still listed it, %s), %d other failures; replacement Ready %s after the kill, serving table %s",
			summary, exited.Sub(at).Round(100*time.Microsecond), len(inFlight), len(refused), refusedWindow(refused, at), len(others), ready.at.Sub(at).Round(time.Millisecond), ready.version)
		Expect(others).To(BeEmpty(), "failures besides the requests in flight on the killed interceptor and refused connections:\n%s", firstShots(others, 20))
		// At 40/s and 300 ms each, about 12 are in flight; about half of them on the killed one.
		Expect(len(inFlight)).To(BeNumerically("<=", 12), "more failed than can have been in flight on it:\n%s", firstShots(inFlight, 20))
		for _, s := range refused {
			Expect(s.sent).To(BeTemporally("<", ready.at), "a connection refused after the replacement was Ready: %s", s)
		}
		Expect(ready.routed).To(Equal(http.StatusOK), "its first answer once Ready: the app, routed")
		Expect(ready.current).To(ContainElement(ready.version), "the table it served at its first Ready, against the other interceptor's just before and after")
	})
})

// waitExited returns the moment every process of pids has exited, polling every millisecond: each
// of its threads a zombie or gone (a process's sockets close with its last thread, and a
// multi-threaded process's main thread may be a zombie while the others still run).
func waitExited(ctx context.Context, pids []int) time.Time {
	GinkgoHelper()
	for _, pid := range pids {
		Eventually(func() bool {
			tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
			if err != nil {
				return true // reaped
			}
			for _, t := range tasks {
				stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, t.Name()))
				if err != nil {
					continue // that thread is gone
				}
				// "tid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ")".
				i := bytes.LastIndexByte(stat, ')')
				if i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X') {
					return false
				}
			}
			return true
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(time.Millisecond).Should(BeTrue(), "process %d still running after SIGKILL", pid)
	}
	return time.Now()
}

// notConnected reports whether err ended a request before its connection was made: a dial error,
// so that nothing of the request was sent.
func notConnected(err error) bool {
	var op *net.OpError
	return err != nil && errors.As(err, &op) && op.Op == "dial"
}

// warmBounds keeps an app at exactly n replicas.
func warmBounds(n int32) func(*httpscalev1alpha1.HTTPScaledObjectSpec) {
	return func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
		s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To(n), Max: ptr.To(n)}
	}
}

// getAdminJSON reads an interceptor admin path into v, with the fleet's token (the admin port
// authenticates callers by default).
func getAdminJSON(ctx context.Context, ip, path string, v any) error {
	resp, err := adminTokenGet(ctx, ip, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// tableVersion is the routing-table version an interceptor serves (admin /status), "" when it
// does not answer.
func tableVersion(ctx context.Context, ic framework.Interceptor) string {
	var st admin.Status
	_ = getAdminJSON(ctx, ic.IP, admin.PathStatus, &st)
	return st.TableVersion
}

// replacementReady is what a restarted interceptor showed the moment its readiness first passed.
type replacementReady struct {
	at      time.Time
	version string   // the table version it served then
	current []string // the other interceptor's just before and just after
	routed  int      // the status of a request for the scenario's app sent right then
}

// watchReplacement polls the interceptor's admin /readyz every 20 ms; once it has failed (the process
// died) and passes again, it reads the table version it serves (and the other interceptor's, just
// before and after: the current table) and sends one request for host straight to that pod, and
// reports all of it.
func watchReplacement(ctx context.Context, ic, other framework.Interceptor, host string) <-chan replacementReady {
	ch := make(chan replacementReady, 1)
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true}}
	go func() {
		defer GinkgoRecover()
		down := false
		for ctx.Err() == nil {
			code, err := localcluster.Get(ctx, hc, fmt.Sprintf("http://%s:%d%s", ic.IP, localcluster.InterceptorAdmin, admin.PathReadyz), "")
			switch {
			case err != nil || code != http.StatusOK:
				down = true
			case down:
				r := replacementReady{at: time.Now()}
				before := tableVersion(ctx, other)
				r.version = tableVersion(ctx, ic)
				r.current = []string{before, tableVersion(ctx, other)}
				r.routed, _ = localcluster.Get(ctx, hc, fmt.Sprintf("http://%s:%d/first", ic.IP, localcluster.ProxyPort), host)
				ch <- r
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return ch
}

// refusedWindow describes when connections were refused, relative to at.
func refusedWindow(refused []shot, at time.Time) string {
	if len(refused) == 0 {
		return "none"
	}
	return fmt.Sprintf("from +%s to +%s", refused[0].sent.Sub(at).Round(time.Millisecond), refused[len(refused)-1].sent.Sub(at).Round(time.Millisecond))
}
