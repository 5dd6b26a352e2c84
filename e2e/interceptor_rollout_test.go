//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// An interceptor pod is rolled the way users do it: `kubectl delete pod`. The kubelet sends SIGTERM,
// the interceptor drains (the chart's default drain: 5 s delay, 60 s timeout) and exits, and the
// Deployment's replacement pod comes up. The client plays the load balancer: it sends only to pods
// whose admin /readyz answers 200, re-checks readiness every 100ms and picks up new pods as they
// appear. The drain contract makes that enough for zero failures: readiness turns 503 at once on
// SIGTERM, the proxy keeps serving through the drain delay (for load balancers that have not noticed
// yet), then lets in-flight requests finish before it exits.
var _ = Describe("Interceptor rolled under steady load", Ordered, func() {
	const (
		drainDelay   = 5 * time.Second  // the chart's interceptor.drain.delaySeconds
		drainTimeout = 60 * time.Second // the chart's interceptor.drain.timeoutSeconds
		rate         = 80               // requests per second, spread over the ready interceptors
		loadFor      = 25 * time.Second
		appLatency   = 200 * time.Millisecond // each request is in flight this long at the app
	)
	var (
		h      *framework.HTTPScale
		ns     string
		host   string
		rolled framework.Interceptor
	)

	BeforeAll(func(ctx SpecContext) {
		h, ns, host = scenario(ctx, "rollout")
		rolled = h.Interceptors[len(h.Interceptors)-1]

		By("warming the app: one replica that stays")
		routedApp(ctx, ns, "app", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](4)}
		})
		for i := range h.Interceptors {
			Eventually(func() (int, error) {
				a, err := ask(ctx, h, i, host, "/warm", nil)
				return a.Status, err
			}).WithContext(ctx).Should(Equal(http.StatusOK))
		}
	})

	It("answers every request while one interceptor pod drains, exits and is replaced", func(ctx SpecContext) {
		lb := newReadinessBalancer(h, host, fmt.Sprintf("/roll?sleep=%s", appLatency))
		lbCtx, stopLB := context.WithCancel(ctx)
		defer stopLB()
		lb.watchReadiness(lbCtx, 100*time.Millisecond)
		Eventually(lb.readyCount).WithContext(ctx).Should(Equal(len(h.Interceptors)))
		exit := watchExit(lbCtx, rolled.Name)

		var stoppedAt, exitedAt time.Time
		loadDone := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(loadDone)
			lb.run(lbCtx, rate, loadFor)
		}()
		go lb.discover(lbCtx, 200*time.Millisecond)

		time.Sleep(4 * time.Second)
		By("following the log of " + rolled.Name + " and deleting the pod")
		logs := f.Cluster.Command(lbCtx, f.Cluster.Kubectl(), "--kubeconfig", f.Cluster.AdminKubeconfig(),
			"-n", localcluster.Namespace, "logs", "-f", rolled.Name)
		var logBuf strings.Builder
		logs.Stdout = &logBuf
		Expect(logs.Start()).To(Succeed())
		logsDone := make(chan struct{})
		go func() {
			_ = logs.Wait() // the stream ends when the container exits
			exitedAt = time.Now()
			close(logsDone)
		}()
		time.Sleep(500 * time.Millisecond) // the stream is open
		stoppedAt = time.Now()
		_, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "delete", "pod", rolled.Name, "--wait=false")
		Expect(err).NotTo(HaveOccurred())
		By("a load balancer that has not noticed yet is still answered during the drain delay")
		Eventually(func() bool { return lb.sawNotReady(rolled.Name, stoppedAt) }).
			WithTimeout(drainDelay).WithPolling(20 * time.Millisecond).Should(BeTrue())
		lateAnswer, lateErr := ask(ctx, h, len(h.Interceptors)-1, host, "/late", nil)
		Eventually(logsDone).WithTimeout(drainDelay + drainTimeout + 10*time.Second).Should(BeClosed())
		<-loadDone
		stopLB()

		rep := lb.report(rolled.Name, stoppedAt)
		AddReportEntry("interceptor rollout", rep.String())
		fmt.Fprintln(GinkgoWriter, rep.String())

		Expect(rep.failures).To(BeEmpty(), "every request answered 200, none lost")
		Expect(rep.total).To(BeNumerically(">=", int(rate*loadFor.Seconds()*8/10)), "the load was steady")
		Expect(rep.rolledBefore).To(BeNumerically(">", 0), "the rolled interceptor served before its deletion")
		Expect(rep.rolledInFlight).To(BeNumerically(">", 0), "requests were in flight on it at its deletion")
		Expect(rep.replacement).To(BeNumerically(">", 0), "its replacement served once Ready")
		Expect(lateErr).NotTo(HaveOccurred())
		Expect(lateAnswer.Status).To(Equal(http.StatusOK), "answered after readiness turned 503, during the drain delay")
		Expect(exitedAt.Sub(stoppedAt)).To(BeNumerically(">=", drainDelay), "it kept running through the drain delay")
		Expect(exitedAt.Sub(stoppedAt)).To(BeNumerically("<", drainDelay+drainTimeout), "it exited once drained, not at SIGKILL")

		By("it exited cleanly")
		Expect(logBuf.String()).To(ContainSubstring("stopped cleanly"))
		var code int32
		Eventually(exit).WithTimeout(30*time.Second).Should(Receive(&code), "the kubelet reported the container's exit")
		Expect(code).To(BeEquivalentTo(0), "exit status")
	})
})

// watchExit reports the exit code of the first container of pod name in httpscale's namespace once the
// kubelet reports it terminated (the pod's last status before it is deleted).
func watchExit(ctx context.Context, name string) <-chan int32 {
	GinkgoHelper()
	wc, err := client.NewWithWatch(f.RESTConfig, client.Options{Scheme: f.Client.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace(localcluster.Namespace),
		client.MatchingFields{"metadata.name": name})
	Expect(err).NotTo(HaveOccurred())
	ch := make(chan int32, 1)
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || len(p.Status.ContainerStatuses) == 0 {
				continue
			}
			if t := p.Status.ContainerStatuses[0].State.Terminated; t != nil {
				ch <- t.ExitCode
				return
			}
		}
	}()
	return ch
}

// readinessBalancer sends requests round-robin to the interceptors whose admin /readyz last answered
// 200, as a Service's load balancer does with ready endpoints.
type readinessBalancer struct {
	host  string
	path  string
	probe *http.Client
	send  *http.Client

	mu      sync.Mutex
	targets []*lbTarget
	results []lbResult
	// initial are the names of the targets at the start; others are replacements.
	initial map[string]bool
	// watch starts probing a target added later (watchReadiness sets it).
	watch func(*lbTarget)
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

func newReadinessBalancer(h *framework.HTTPScale, host, path string) *readinessBalancer {
	dial := localcluster.DialContext(f.Cluster.NetNS)
	b := &readinessBalancer{
		host:    host,
		path:    path,
		probe:   &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}},
		send:    &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 64}},
		initial: map[string]bool{},
	}
	for _, ic := range h.Interceptors {
		b.targets = append(b.targets, b.target(ic.Name, ic.IP))
		b.initial[ic.Name] = true
	}
	return b
}

func (b *readinessBalancer) target(name, ip string) *lbTarget {
	return &lbTarget{
		name:   name,
		proxy:  fmt.Sprintf("http://%s:%d%s", ip, localcluster.ProxyPort, b.path),
		readyz: fmt.Sprintf("http://%s:%d/readyz", ip, localcluster.InterceptorAdmin),
	}
}

// discover adds interceptor pods that appear (a Deployment's replacement) as targets, every interval
// until ctx ends; they take traffic once their /readyz answers 200.
func (b *readinessBalancer) discover(ctx context.Context, interval time.Duration) {
	defer GinkgoRecover()
	for ctx.Err() == nil {
		pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=interceptor")
		if err == nil {
			b.mu.Lock()
			for _, p := range pods {
				known := false
				for _, t := range b.targets {
					known = known || t.name == p.Name
				}
				if !known && p.IP != "" && !p.Deleting {
					t := b.target(p.Name, p.IP)
					b.targets = append(b.targets, t)
					b.watch(t)
				}
			}
			b.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}

func (b *readinessBalancer) snapshot() []*lbTarget {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.targets)
}

// watchReadiness probes every target's /readyz every interval until ctx ends, and each target
// discover adds later.
func (b *readinessBalancer) watchReadiness(ctx context.Context, interval time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watch = func(t *lbTarget) {
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
	for _, t := range b.targets {
		b.watch(t)
	}
}

func (b *readinessBalancer) readyCount() int {
	n := 0
	for _, t := range b.snapshot() {
		if t.ready.Load() {
			n++
		}
	}
	return n
}

// sawNotReady reports whether the named target's /readyz answered 503 after since.
func (b *readinessBalancer) sawNotReady(name string, since time.Time) bool {
	for _, t := range b.snapshot() {
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
	send := func() {
		var t *lbTarget
		targets := b.snapshot()
		for range targets {
			c := targets[next%len(targets)]
			next++
			if c.ready.Load() {
				t = c
				break
			}
		}
		if t == nil {
			b.record(lbResult{sent: time.Now(), done: time.Now(), err: fmt.Errorf("no ready interceptor")})
			return
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
	// Open loop at a fixed rate: a tick that comes late (a busy machine delays the ticker's goroutine)
	// sends every request that was due by then.
	start, sent := time.Now(), 0
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
		for due := int(time.Since(start).Seconds() * float64(rate)); sent < due; sent++ {
			send()
		}
	}
}

func (b *readinessBalancer) record(r lbResult) {
	b.mu.Lock()
	b.results = append(b.results, r)
	b.mu.Unlock()
}

type rolloutReport struct {
	total, rolledBefore, rolledInFlight, replacement int
	perTarget                                        map[string]int
	failures                                         []string
}

func (r rolloutReport) String() string {
	return fmt.Sprintf("%d requests, %d failed; per interceptor pod %v; rolled one: %d before its deletion, %d in flight at its deletion; %d by its replacement",
		r.total, len(r.failures), r.perTarget, r.rolledBefore, r.rolledInFlight, r.replacement)
}

// report sums the results; rolled was deleted at stop.
func (b *readinessBalancer) report(rolled string, stop time.Time) rolloutReport {
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
		if !b.initial[res.target] {
			r.replacement++
		}
		if res.target != rolled {
			continue
		}
		switch {
		case res.sent.Before(stop) && res.done.After(stop):
			r.rolledInFlight++
		case res.done.Before(stop):
			r.rolledBefore++
		}
	}
	return r
}
