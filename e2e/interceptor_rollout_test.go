//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// An interceptor replica is rolled the way a Deployment rollout does it: SIGTERM, a drain, a new
// process. The client plays the load balancer: it sends only to replicas whose admin /readyz answers
// 200 and re-checks readiness every 100ms. The drain contract makes that enough for zero failures:
// readiness turns 503 at once on SIGTERM, the proxy keeps serving through the drain delay (for load
// balancers that have not noticed yet), then lets in-flight requests finish before it exits.
var _ = Describe("Interceptor rolled under steady load", Ordered, func() {
	const (
		drainDelay   = 2 * time.Second
		drainTimeout = 20 * time.Second
		rate         = 80 // requests per second, spread over the ready interceptors
		loadFor      = 15 * time.Second
		appLatency   = 200 * time.Millisecond // each request is in flight this long at the app
	)
	var (
		h      *localcluster.HTTPScale
		ns     string
		host   string
		rolled localcluster.InterceptorAddr
	)

	BeforeAll(func(ctx SpecContext) {
		h, ns, host = scenario(ctx, "rollout")

		// The shorter drain stays in the component's settings for later specs; it only speeds up their stops.
		By("running the interceptor to be rolled with a short drain delay")
		rolled = h.Addresses.Interceptors[len(h.Addresses.Interceptors)-1]
		comp := h.Components[rolled.Name]
		Expect(f.Cluster.StopComponent(comp)).To(Succeed())
		comp.Env = append(comp.Env, "HTTPSCALE_DRAIN_DELAY="+drainDelay.String(), "HTTPSCALE_DRAIN_TIMEOUT="+drainTimeout.String())
		Expect(f.Cluster.StartComponent(ctx, rolled.Name, comp)).To(Succeed())

		By("warming the app: one replica that stays")
		routedApp(ctx, ns, "app", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](4)}
		})
		for i := range h.Addresses.Interceptors {
			Eventually(func() (int, error) {
				a, err := ask(ctx, h, i, host, "/warm", nil)
				return a.Status, err
			}).WithContext(ctx).Should(Equal(http.StatusOK))
		}
	})

	It("answers every request while one interceptor drains, exits and comes back", func(ctx SpecContext) {
		lb := newReadinessBalancer(h, host, fmt.Sprintf("/roll?sleep=%s", appLatency))
		lbCtx, stopLB := context.WithCancel(ctx)
		defer stopLB()
		lb.watchReadiness(lbCtx, 100*time.Millisecond)
		Eventually(lb.readyCount).WithContext(ctx).Should(Equal(len(h.Addresses.Interceptors)))

		// A longer grace period than drain delay + drain timeout: SIGKILL must not be what ends it.
		cluster := f.Cluster
		cluster.StopTimeout = drainDelay + drainTimeout + 10*time.Second
		comp := h.Components[rolled.Name]
		old := comp.Process
		var stoppedAt, exitedAt, restartedAt time.Time
		var stopErr, startErr error
		var lateAnswer answer
		var lateErr error
		loadDone := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(loadDone)
			lb.run(lbCtx, rate, loadFor)
		}()

		time.Sleep(4 * time.Second)
		By("sending SIGTERM to " + rolled.Name)
		stopped := make(chan struct{})
		stoppedAt = time.Now()
		go func() {
			defer GinkgoRecover()
			defer close(stopped)
			stopErr = cluster.StopComponent(comp)
			exitedAt = time.Now()
		}()
		By("a load balancer that has not noticed yet is still answered during the drain delay")
		Eventually(func() bool { return lb.sawNotReady(rolled.Name, stoppedAt) }).
			WithTimeout(drainDelay).WithPolling(20 * time.Millisecond).Should(BeTrue())
		lateAnswer, lateErr = ask(ctx, h, len(h.Addresses.Interceptors)-1, host, "/late", nil)
		<-stopped

		time.Sleep(2 * time.Second)
		By("starting " + rolled.Name + " again")
		startErr = f.Cluster.StartComponent(ctx, rolled.Name, comp)
		restartedAt = time.Now()
		<-loadDone
		stopLB()

		rep := lb.report(rolled.Name, stoppedAt, restartedAt)
		AddReportEntry("interceptor rollout", rep.String())
		fmt.Fprintln(GinkgoWriter, rep.String())

		Expect(stopErr).NotTo(HaveOccurred())
		Expect(startErr).NotTo(HaveOccurred())
		Expect(rep.failures).To(BeEmpty(), "every request answered 200, none lost")
		Expect(rep.total).To(BeNumerically(">=", int(rate*loadFor.Seconds()*8/10)), "the load was steady")
		Expect(rep.rolledBefore).To(BeNumerically(">", 0), "the rolled interceptor served before SIGTERM")
		Expect(rep.rolledInFlight).To(BeNumerically(">", 0), "requests were in flight on it at SIGTERM")
		Expect(rep.rolledAfterRestart).To(BeNumerically(">", 0), "it served again once back")
		Expect(lateErr).NotTo(HaveOccurred())
		Expect(lateAnswer.Status).To(Equal(http.StatusOK), "answered after readiness turned 503, during the drain delay")
		Expect(exitedAt.Sub(stoppedAt)).To(BeNumerically(">=", drainDelay), "it kept running through the drain delay")
		Expect(exitedAt.Sub(stoppedAt)).To(BeNumerically("<", drainDelay+drainTimeout), "it exited once drained, not at SIGKILL")

		By("it exited cleanly")
		Expect(lastRunLog(old.LogFile, 2)).To(ContainSubstring("stopped cleanly"))
		if code, err := old.ExitCode(5 * time.Second); err == nil {
			Expect(code).To(Equal(0), "exit status")
		} else {
			// Started by another program (a reused cluster): its log is the evidence.
			fmt.Fprintln(GinkgoWriter, "exit status unknown:", err)
		}
	})
})

// lastRunLog returns the log of the component's run before the last n-1 starts (n=1: the current run),
// split at the "=== " line StartProcess writes at every start.
func lastRunLog(logFile string, n int) string {
	data, err := os.ReadFile(logFile)
	Expect(err).NotTo(HaveOccurred())
	runs := strings.Split(string(data), "\n=== ")
	Expect(len(runs)).To(BeNumerically(">=", n))
	return runs[len(runs)-n]
}

// readinessBalancer sends requests round-robin to the interceptors whose admin /readyz last answered
// 200, as a Service's load balancer does with ready endpoints.
type readinessBalancer struct {
	targets []*lbTarget
	host    string
	path    string
	probe   *http.Client
	send    *http.Client

	mu      sync.Mutex
	results []lbResult
}

type lbTarget struct {
	name     string
	proxy    string
	readyz   string
	ready    atomic.Bool
	mu       sync.Mutex
	notReady []time.Time // times a probe answered 503 (the drain, not a dead process)
}

type lbResult struct {
	target     string
	sent, done time.Time
	status     int
	err        error
}

func newReadinessBalancer(h *localcluster.HTTPScale, host, path string) *readinessBalancer {
	dial := localcluster.DialContext(f.Cluster.NetNS)
	b := &readinessBalancer{
		host:  host,
		path:  path,
		probe: &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}},
		send:  &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 64}},
	}
	for i, ic := range h.Addresses.Interceptors {
		b.targets = append(b.targets, &lbTarget{
			name:   ic.Name,
			proxy:  proxyURL(h, i, path),
			readyz: fmt.Sprintf("http://%s:%d/readyz", ic.IP, localcluster.InterceptorAdmin),
		})
	}
	return b
}

// watchReadiness probes every target's /readyz every interval until ctx ends.
func (b *readinessBalancer) watchReadiness(ctx context.Context, interval time.Duration) {
	for _, t := range b.targets {
		go func() {
			defer GinkgoRecover()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, t.readyz, nil)
				resp, err := b.probe.Do(req)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusServiceUnavailable {
						t.mu.Lock()
						t.notReady = append(t.notReady, time.Now())
						t.mu.Unlock()
					}
				}
				t.ready.Store(ok)
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
}

func (b *readinessBalancer) readyCount() int {
	n := 0
	for _, t := range b.targets {
		if t.ready.Load() {
			n++
		}
	}
	return n
}

// sawNotReady reports whether the named target's /readyz answered 503 after since.
func (b *readinessBalancer) sawNotReady(name string, since time.Time) bool {
	for _, t := range b.targets {
		if t.name != name {
			continue
		}
		t.mu.Lock()
		defer t.mu.Unlock()
		for _, at := range t.notReady {
			if at.After(since) {
				return true
			}
		}
	}
	return false
}

// run sends rate requests per second for d, each to the next ready target, and waits for the answers.
// A tick with no ready target is a failed request: the user would have been turned away.
func (b *readinessBalancer) run(ctx context.Context, rate int, d time.Duration) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.After(d)
	var wg sync.WaitGroup
	next := 0
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case <-end:
			wg.Wait()
			return
		case <-tick.C:
		}
		var t *lbTarget
		for range b.targets {
			c := b.targets[next%len(b.targets)]
			next++
			if c.ready.Load() {
				t = c
				break
			}
		}
		if t == nil {
			b.record(lbResult{sent: time.Now(), done: time.Now(), err: fmt.Errorf("no ready interceptor")})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := lbResult{target: t.name, sent: time.Now()}
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.proxy, nil)
			if err == nil {
				req.Host = b.host
				var resp *http.Response
				if resp, err = b.send.Do(req); err == nil {
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					r.status = resp.StatusCode
				}
			}
			r.err, r.done = err, time.Now()
			b.record(r)
		}()
	}
}

func (b *readinessBalancer) record(r lbResult) {
	b.mu.Lock()
	b.results = append(b.results, r)
	b.mu.Unlock()
}

type rolloutReport struct {
	total, rolledBefore, rolledInFlight, rolledAfterRestart int
	perTarget                                               map[string]int
	failures                                                []string
}

func (r rolloutReport) String() string {
	return fmt.Sprintf("%d requests, %d failed; per interceptor %v; rolled one: %d before SIGTERM, %d in flight at SIGTERM, %d after restart",
		r.total, len(r.failures), r.perTarget, r.rolledBefore, r.rolledInFlight, r.rolledAfterRestart)
}

// report sums the results; rolled was sent SIGTERM at stop and was ready again at restart.
func (b *readinessBalancer) report(rolled string, stop, restart time.Time) rolloutReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	r := rolloutReport{total: len(b.results), perTarget: map[string]int{}}
	for _, res := range b.results {
		if res.err != nil || res.status != http.StatusOK {
			if len(r.failures) < 10 {
				r.failures = append(r.failures, fmt.Sprintf("%s at %s: status %d, %v", res.target, res.sent.Format("15:04:05.000"), res.status, res.err))
			}
			continue
		}
		r.perTarget[res.target]++
		if res.target != rolled {
			continue
		}
		switch {
		case res.sent.Before(stop) && res.done.After(stop):
			r.rolledInFlight++
		case res.done.Before(stop):
			r.rolledBefore++
		case res.sent.After(restart):
			r.rolledAfterRestart++
		}
	}
	return r
}
