//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/admin"
)

// Serve mode: callers use the app's own Service (its cluster IP and DNS name, through kube-proxy and
// the cluster's DNS on the real nodes). The app's KEDA trigger for warm traffic is a metrics-api
// trigger on the sample app's own count of the requests of the last 10 s (admin port, /stats).
var _ = Describe("Serve mode", Ordered, func() {
	const scaledown = 20 // seconds
	var (
		h    *framework.HTTPScale
		ns   string
		hso  *httpscalev1alpha1.HTTPScaledObject
		svc  corev1.Service
		fqdn string
		// direct dials a new connection per request from the cluster's network namespace, so
		// kube-proxy picks an endpoint (pod or interceptor) every time.
		direct *http.Client
	)

	BeforeAll(func(ctx SpecContext) {
		var host string
		h, ns, host = scenario(ctx, "serve")
		fqdn = "app." + ns + ".svc." + localcluster.ClusterDomain
		hso = routedApp(ctx, ns, "app", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.Mode = httpscalev1alpha1.ModeServe
			s.ScaledownPeriod = ptr.To[int32](scaledown)
			// One pod: every request of the burst is counted on it, and no pod goes away between the
			// burst and the count (the held burst would otherwise scale the app up and back down).
			s.Replicas.Max = ptr.To[int32](1)
			// The probe of the switch back (probeService) must keep nothing awake.
			s.IgnoredPaths = []httpscalev1alpha1.PathPrefix{"/ready"}
			s.Scaling = &httpscalev1alpha1.Scaling{Triggers: []httpscalev1alpha1.ScalingTrigger{{
				Type: "metrics-api", Name: "recent-requests", Metadata: map[string]string{
					"url":           fmt.Sprintf("http://%s:%d/stats", fqdn, framework.SampleAppAdmin),
					"valueLocation": "recent", "targetValue": "1000", "activationTargetValue": "0",
				},
			}}}
		})
		// The app drains as docs/configuration.md asks of a Serve-mode app: a pre-stop pause keeps the
		// pod serving for 5 s after it starts terminating, while kube-proxy drops its endpoint (the
		// sample app itself stops at once on SIGTERM).
		updateDeployment(ctx, ns, "app", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.TerminationGracePeriodSeconds = ptr.To[int64](10)
			d.Spec.Template.Spec.Containers[0].Lifecycle = &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: 5}}}
		})
		// The trigger reads the pods' admin port through the Service: a second port, never redirected.
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &svc)).To(Succeed())
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "admin", Port: framework.SampleAppAdmin, TargetPort: intstr.FromInt32(framework.SampleAppAdmin)})
		Expect(f.Client.Update(ctx, &svc)).To(Succeed())
		direct = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
			DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true}}
	})

	// get sends GET path to the Service's cluster IP with the given Host ("" keeps the IP).
	get := func(ctx context.Context, host, path string) (answer, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s%s", svc.Spec.ClusterIP, path), nil)
		if err != nil {
			return answer{}, err
		}
		if host != "" {
			req.Host = host
		}
		resp, err := direct.Do(req)
		if err != nil {
			return answer{}, err
		}
		return readAnswer(resp)
	}
	serving := func(ctx context.Context) string {
		cur := &httpscalev1alpha1.HTTPScaledObject{}
		if err := f.Client.Get(ctx, client.ObjectKeyFromObject(hso), cur); err != nil {
			return err.Error()
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, httpscalev1alpha1.ConditionServing); c != nil {
			return string(c.Status) + " " + c.Reason
		}
		return "none"
	}
	redirect := func(ctx context.Context) bool {
		err := f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app-httpscale-redirect"}, &discoveryv1.EndpointSlice{})
		return !apierrors.IsNotFound(err)
	}
	// interceptorRequests sums the interceptors' request counters of the app.
	interceptorRequests := func(ctx context.Context) uint64 {
		GinkgoHelper()
		var sum uint64
		for _, ic := range h.Interceptors {
			resp, err := adminTokenGet(ctx, ic.IP, admin.PathCounts+"?since=0") // the admin port wants the fleet's token
			Expect(err).NotTo(HaveOccurred())
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var c admin.Counts
			Expect(json.Unmarshal(body, &c)).To(Succeed(), string(body))
			for _, a := range c.Apps {
				if a.Key == ns+"/app" {
					sum += a.Requests
				}
			}
		}
		return sum
	}
	// latency returns the median of n sequential GETs of path through client.
	latency := func(ctx context.Context, n int, do func() (answer, error)) time.Duration {
		GinkgoHelper()
		d := make([]time.Duration, n)
		for i := range n {
			start := time.Now()
			a, err := do()
			d[i] = time.Since(start)
			Expect(err).NotTo(HaveOccurred())
			Expect(a.Status).To(Equal(http.StatusOK))
		}
		slices.Sort(d)
		return d[n/2]
	}

	// kedaInactive reports whether the app's ScaledObject says KEDA finds no trigger active.
	kedaInactive := func(ctx context.Context) bool {
		so := &kedav1alpha1.ScaledObject{}
		if err := f.Client.Get(ctx, client.ObjectKeyFromObject(hso), so); err != nil {
			return false
		}
		for _, c := range so.Status.Conditions {
			if c.Type == kedav1alpha1.ConditionActive {
				return c.Status == metav1.ConditionFalse
			}
		}
		return false
	}
	// kubeProxyRedirects reports whether kube-proxy's rules send the Service's port to an interceptor
	// (an endpoint on the app's Serve port on the interceptors, in the chart's default range
	// 20000-29999; the app's pods listen on another).
	kubeProxyRedirects := func(ctx context.Context) bool {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", f.Cluster.NetNS, "iptables-save", "-t", "nat").Output()
		return err == nil && regexp.MustCompile(regexp.QuoteMeta(ns+"/app:http -> ")+`[0-9.]+:2[0-9]{4}"`).Match(out)
	}
	// probeService sends GET /ready to the Service's cluster IP every 100 ms, each on a new connection
	// with a 2 s timeout, until the returned stop is called, which returns the number of probes and
	// the failures. /ready is an ignored path of the app and the sample app leaves it out of its own
	// count, so the probes keep nothing awake; the answers that count as served are 200 (the pod,
	// directly or through an interceptor) and 503 with X-Httpscale-Idle (an interceptor, the app at zero).
	probeService := func(ctx context.Context) func() (int, []string) {
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true}}
		var (
			mu       sync.Mutex
			n        int
			failures []string
		)
		stop := every(100*time.Millisecond, func(int) {
			at := time.Now()
			bad := ""
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/ready", svc.Spec.ClusterIP), nil)
			if err != nil {
				bad = err.Error()
			} else {
				req.Host = fqdn
				resp, err := c.Do(req)
				if err != nil {
					bad = err.Error()
				} else {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					idle := resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get("X-Httpscale-Idle") == "true"
					if resp.StatusCode != http.StatusOK && !idle {
						bad = resp.Status
					}
				}
			}
			mu.Lock()
			n++
			if bad != "" {
				failures = append(failures, at.UTC().Format("15:04:05.000 ")+bad)
			}
			mu.Unlock()
		})
		return func() (int, []string) {
			stop()
			mu.Lock()
			defer mu.Unlock()
			return n, failures
		}
	}

	It("answers a client pod's burst to the Service's cluster IP and DNS name at zero, each request once, then leaves the path", func(ctx SpecContext) {
		Eventually(func() string { return serving(ctx) }).WithContext(ctx).Should(Equal("False Proxying"))
		Expect(redirect(ctx)).To(BeTrue())
		Expect(replicas(ctx, ns, "app")).To(BeEquivalentTo(0))

		const n = 200
		args := []string{"--parallel", "--timeout=4m"}
		urls := make([]string, n)
		for i := range n {
			target := svc.Spec.ClusterIP // even: the cluster IP, odd: the Service's DNS name
			if i%2 == 1 {
				target = fqdn
			}
			urls[i] = fmt.Sprintf("http://%s/serve?rid=%d", target, i)
			args = append(args, "--get="+urls[i])
		}
		wctx, stopWatch := context.WithCancel(ctx)
		defer stopWatch()
		woken := watchReplicas(wctx, ns, "app", 1)
		res := runProbe(ctx, ns, "burst", 6*time.Minute, args...)
		select {
		case at := <-woken:
			AddReportEntry("serve mode: replicas >= 1 at", at.UTC().Format(time.RFC3339Nano))
		default:
		}
		var failed []string
		for i, u := range urls {
			r, ok := res["get "+u]
			var a answer
			switch {
			case !ok:
				failed = append(failed, fmt.Sprintf("%d %s: no result", i, u))
			case r.Err != "" || r.Status != http.StatusOK:
				failed = append(failed, fmt.Sprintf("%d %s: %d %s %.200s", i, u, r.Status, r.Err, r.Body))
			case json.Unmarshal([]byte(r.Body), &a) != nil:
				failed = append(failed, fmt.Sprintf("%d %s: body %.200s", i, u, r.Body))
			case a.Headers["X-Forwarded-For"] == "":
				// Held and forwarded by an interceptor, which adds the caller's address.
				failed = append(failed, fmt.Sprintf("%d %s: answered without an interceptor", i, u))
			}
		}
		if len(failed) > 0 {
			pods, _ := f.Cluster.KubectlRun(ctx, "", "-n", ns, "get", "pods,endpointslices", "-o", "wide")
			cur := &httpscalev1alpha1.HTTPScaledObject{}
			_ = f.Client.Get(ctx, client.ObjectKeyFromObject(hso), cur)
			Fail(fmt.Sprintf("%d of %d requests failed:\n%s\n%s\nconditions: %+v", len(failed), n,
				strings.Join(failed[:min(len(failed), 20)], "\n"), pods, cur.Status.Conditions))
		}
		counts := requestCounts(ctx, ns, "app")
		Expect(counts).To(HaveLen(n), "requests that reached the app")
		for rid, c := range counts {
			Expect(c).To(BeEquivalentTo(1), "request %s reached the app %d times", rid, c)
		}
		Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1))

		// The redirect goes once the pod is ready and nothing is held.
		Eventually(func() string { return serving(ctx) }).WithContext(ctx).WithTimeout(time.Minute).Should(Equal("True Direct"))
		removedAt := time.Now()
		Expect(redirect(ctx)).To(BeFalse())

		// Once kube-proxy has the change, requests reach the pod without the interceptor: no
		// X-Forwarded-For from it, and its request counter stops.
		Eventually(func(g Gomega) {
			a, err := get(ctx, fqdn, "/direct")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Status).To(Equal(http.StatusOK))
			g.Expect(a.Headers).NotTo(HaveKey("X-Forwarded-For"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		AddReportEntry("serve mode: redirect removed -> first direct answer", time.Since(removedAt).String())
		before := interceptorRequests(ctx)
		viaService := latency(ctx, 50, func() (answer, error) { return get(ctx, "", "/direct") })
		Expect(interceptorRequests(ctx)).To(Equal(before), "the interceptors saw none of 50 warm requests to the Service")
		viaInterceptor := latency(ctx, 50, func() (answer, error) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL(h, 0, "/proxied"), nil)
			if err != nil {
				return answer{}, err
			}
			req.Host = string(hso.Spec.Hosts[0])
			resp, err := direct.Do(req)
			if err != nil {
				return answer{}, err
			}
			return readAnswer(resp)
		})
		Expect(interceptorRequests(ctx)).To(BeNumerically(">=", before+50), "the interceptors still proxy the app's hosts")
		AddReportEntry("serve mode: median warm GET (new connection each)", fmt.Sprintf("app Service %s, through an interceptor %s", viaService, viaInterceptor))
	})

	It("keeps the app up while callers use the Service directly, and takes it to zero after the idle period once they stop", func(ctx SpecContext) {
		// Longer than the scaledown period plus KEDA's polling (every 10 s: half the scaledown period in
		// Serve mode): with only the interceptor's trigger, which sees none of this traffic, the app
		// would go to zero meanwhile.
		before := interceptorRequests(ctx)
		end := time.Now().Add(scaledown*time.Second + 50*time.Second)
		for i := 0; time.Now().Before(end); i++ {
			a, err := get(ctx, "", fmt.Sprintf("/warm?i=%d", i))
			Expect(err).NotTo(HaveOccurred(), "warm request %d", i)
			Expect(a.Status).To(Equal(http.StatusOK), "warm request %d", i)
			Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1), "replicas after warm request %d", i)
			time.Sleep(500 * time.Millisecond)
		}
		Expect(interceptorRequests(ctx)).To(Equal(before), "the interceptors saw none of the warm traffic")
		Expect(serving(ctx)).To(Equal("True Direct"))

		// Traffic stops: the app's count drains within 10 s and KEDA's next poll finds every trigger
		// idle (Active=False), the decision to scale to zero after the cooldown. The redirect goes in
		// place then and kube-proxy sends the Service to the interceptors while the pod still serves;
		// a probe of the Service every 100 ms from here to after the pod is gone gets no failure.
		stopped := time.Now()
		stopProbe := probeService(ctx)
		var decided, redirected, programmed, prevPoll time.Time
		var pollGap time.Duration // the longest gap between two polls: the timings' resolution
		Eventually(func(g Gomega) {
			now := time.Now()
			if !prevPoll.IsZero() {
				pollGap = max(pollGap, now.Sub(prevPoll))
			}
			prevPoll = now
			if decided.IsZero() && kedaInactive(ctx) {
				decided = now
			}
			if redirected.IsZero() && redirect(ctx) {
				redirected = now
			}
			if !redirected.IsZero() && programmed.IsZero() && kubeProxyRedirects(ctx) {
				programmed = now
				g.Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1), "kube-proxy has the redirect before the scale to zero")
			}
			g.Expect(programmed).NotTo(BeZero())
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(50 * time.Millisecond).Should(Succeed())
		Expect(decided).NotTo(BeZero(), "KEDA's Active condition turned False")
		Eventually(func() string { return serving(ctx) }).WithContext(ctx).WithTimeout(10 * time.Second).Should(Equal("False Proxying"))
		Eventually(func() (int32, error) { return replicas(ctx, ns, "app") }).WithContext(ctx).
			WithTimeout(3 * time.Minute).WithPolling(100 * time.Millisecond).Should(BeZero())
		scaled := time.Now()
		Eventually(func() []string { return podIPs(ctx, ns, "app") }).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(BeEmpty())
		gone := time.Now()
		time.Sleep(3 * time.Second) // kube-proxy's next sync after the pod is gone falls inside the probe
		n, failures := stopProbe()
		Expect(failures).To(BeEmpty(), "%d of %d probes of the Service failed", len(failures), n)
		AddReportEntry("serve mode: switch back to the interceptors", fmt.Sprintf(
			"last direct request -> KEDA inactive %s; KEDA inactive -> redirect slice %s; redirect slice -> kube-proxy rules %s (polled every %s at most); kube-proxy rules -> replicas 0 %s; replicas 0 -> last pod object gone %s; probes of the Service %d, failed %d",
			decided.Sub(stopped), redirected.Sub(decided), programmed.Sub(redirected), pollGap.Round(time.Millisecond), scaled.Sub(programmed), gone.Sub(scaled), n, len(failures)))
	})

	It("wakes the app again on the next call to the Service", func(ctx SpecContext) {
		Expect(podIPs(ctx, ns, "app")).To(BeEmpty())
		start := time.Now()
		a, err := get(ctx, fqdn, "/again?rid=again")
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Status).To(Equal(http.StatusOK))
		Expect(a.Headers).To(HaveKey("X-Forwarded-For"), "held by an interceptor")
		answered := time.Now()
		Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1))
		Eventually(func() bool { return redirect(ctx) }).WithContext(ctx).WithTimeout(time.Minute).WithPolling(50 * time.Millisecond).Should(BeFalse())
		AddReportEntry("serve mode: switch to direct", fmt.Sprintf("cold call through the Service answered after %s; answered (pod ready) -> redirect slice deleted %s",
			answered.Sub(start), time.Since(answered)))
		Eventually(func() string { return serving(ctx) }).WithContext(ctx).WithTimeout(time.Minute).Should(Equal("True Direct"))
	})

	It("loses no request when the interceptors are rolled during a switch", func(ctx SpecContext) {
		// Back to zero on KEDA's own decision, with the redirect in kube-proxy's rules.
		Eventually(func() (int32, error) { return replicas(ctx, ns, "app") }).WithContext(ctx).
			WithTimeout(3 * time.Minute).WithPolling(200 * time.Millisecond).Should(BeZero())
		Eventually(func() []string { return podIPs(ctx, ns, "app") }).WithContext(ctx).WithTimeout(time.Minute).Should(BeEmpty())
		Eventually(func() bool { return kubeProxyRedirects(ctx) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())

		// A steady loop of calls to the Service (20/s, each on its own connection, held as long as a
		// cold start takes) wakes the app while `kubectl rollout restart` replaces every interceptor;
		// the loop goes on until the redirect is gone and the rollout is over. The app's pod turns
		// ready 15 s after it starts, so the whole roll falls into the switch: calls are held by
		// interceptors that drain and by their replacements, and the redirect follows the roll.
		updateDeployment(ctx, ns, "app", func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.Containers[0].ReadinessProbe.InitialDelaySeconds = 15
		})
		listed := map[string]bool{} // interceptor addresses the redirect listed during the switch
		stopWatch := every(100*time.Millisecond, func(int) {
			s := &discoveryv1.EndpointSlice{}
			if f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app-httpscale-redirect"}, s) == nil {
				for _, e := range s.Endpoints {
					listed[e.Addresses[0]] = true
				}
			}
		})
		type result struct {
			rid string
			err error
			a   answer
		}
		var (
			mu      sync.Mutex
			results []result
			wg      sync.WaitGroup
		)
		stopLoop := every(50*time.Millisecond, func(i int) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rid := fmt.Sprintf("roll-%d", i)
				a, err := get(ctx, fqdn, "/roll?rid="+rid)
				mu.Lock()
				results = append(results, result{rid, err, a})
				mu.Unlock()
			}()
		})
		time.Sleep(300 * time.Millisecond)
		_, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "rollout", "restart", "deployment/httpscale-interceptor")
		Expect(err).NotTo(HaveOccurred())
		_, err = f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "rollout", "status", "deployment/httpscale-interceptor", "--timeout=5m")
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return serving(ctx) }).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal("True Direct"))
		time.Sleep(3 * time.Second)
		stopLoop()
		stopWatch()
		wg.Wait()
		Expect(len(listed)).To(BeNumerically(">", len(h.Interceptors)), "the redirect followed the roll: %v", listed)

		var failed []string
		viaInterceptor := 0
		for _, r := range results {
			switch {
			case r.err != nil:
				failed = append(failed, fmt.Sprintf("%s: %v", r.rid, r.err))
			case r.a.Status != http.StatusOK:
				failed = append(failed, fmt.Sprintf("%s: status %d", r.rid, r.a.Status))
			case r.a.Headers["X-Forwarded-For"] != "":
				viaInterceptor++
			}
		}
		Expect(failed).To(BeEmpty(), "%d of %d calls failed", len(failed), len(results))
		counts := requestCounts(ctx, ns, "app")
		for _, r := range results {
			Expect(counts[r.rid]).To(BeEquivalentTo(1), "request %s reached the app %d times", r.rid, counts[r.rid])
		}
		AddReportEntry("serve mode: interceptors rolled during the switch to direct",
			fmt.Sprintf("%d calls, %d failed, %d through an interceptor; interceptors listed by the redirect during the switch: %d", len(results), len(failed), viaInterceptor, len(listed)))
		h, err = f.HTTPScale(ctx) // the new interceptor pods
		Expect(err).NotTo(HaveOccurred())
	})

	if os.Getenv("HTTPSCALE_E2E_SERVE_BENCH") != "" {
		// Warm throughput and p99 with wrk from the cluster's network namespace, under the machine's
		// bench lock (flock /tmp/bench.lock, nice -n -10): the app's Service in Serve mode (direct),
		// a second Service selecting the same pod without httpscale, and an interceptor pod (the Proxy
		// mode path), interleaved in HTTPSCALE_E2E_SERVE_BENCH rounds (5 unless it is a number). One
		// replica (max 1), so every target reaches the same pod.
		It("measures warm throughput through the Service against the Service without httpscale and the interceptor", func(ctx SpecContext) {
			plain := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "app-plain", Namespace: ns}, Spec: corev1.ServiceSpec{
				Selector: svc.Spec.Selector, Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(framework.SampleAppPort)}},
			}}
			Expect(f.Client.Create(ctx, plain)).To(Succeed())
			// Traffic keeps KEDA active, so the app is served directly when the measurement starts.
			Eventually(func() string {
				_, _ = get(ctx, "", "/warmup")
				return serving(ctx)
			}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Equal("True Direct"))
			Eventually(func() (int32, error) { return replicas(ctx, ns, "app") }).WithContext(ctx).Should(BeEquivalentTo(1))
			targets := []struct{ name, url, host string }{
				{"serve", fmt.Sprintf("http://%s/bench", svc.Spec.ClusterIP), fqdn},
				{"plain", fmt.Sprintf("http://%s/bench", plain.Spec.ClusterIP), "app-plain." + ns},
				{"proxy", proxyURL(h, 0, "/bench"), string(hso.Spec.Hosts[0])},
			}
			rounds := 5
			if n, err := strconv.Atoi(os.Getenv("HTTPSCALE_E2E_SERVE_BENCH")); err == nil && n > 0 {
				rounds = n
			}
			script := "uptime\n"
			for range rounds {
				for _, t := range targets {
					script += fmt.Sprintf("echo '== %s'\nip netns exec %s wrk -t2 -c32 -d10s --latency -H 'Host: %s' %s\n", t.name, f.Cluster.NetNS, t.host, t.url)
				}
			}
			script += "uptime\n"
			before := interceptorRequests(ctx)
			out, err := exec.CommandContext(ctx, "flock", "/tmp/bench.lock", "nice", "-n", "-10", "sh", "-c", script).CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), string(out))
			GinkgoWriter.Printf("%s\n", out)
			AddReportEntry("serve mode bench (wrk -t2 -c32 -d10s, interleaved rounds)", string(out))
			Expect(string(out)).NotTo(ContainSubstring("Non-2xx"))
			Expect(string(out)).NotTo(ContainSubstring("Socket errors"))
			Expect(interceptorRequests(ctx)).To(BeNumerically(">", before), "the proxy target passed the interceptor")
			Expect(f.Client.Delete(ctx, plain)).To(Succeed())
		})
	}

	It("restores the Service when the object is deleted", func(ctx SpecContext) {
		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso)).To(Succeed())
		// Back to zero on KEDA's decision (the redirect is in place from then on), then delete. Scaled
		// by hand while the app's recent requests still count, KEDA would scale it up again.
		Eventually(func() (int32, error) { return replicas(ctx, ns, "app") }).WithContext(ctx).
			WithTimeout(3 * time.Minute).WithPolling(200 * time.Millisecond).Should(BeZero())
		Eventually(func() bool { return redirect(ctx) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
		Expect(f.Client.Delete(ctx, hso)).To(Succeed())
		Eventually(func() bool {
			return apierrors.IsNotFound(f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
		var slices discoveryv1.EndpointSliceList
		Expect(f.Client.List(ctx, &slices, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelManagedBy: "serve-redirect.httpscale.dev"})).To(Succeed())
		Expect(slices.Items).To(BeEmpty(), "redirect slices left behind")
		// The Service is the user's again: at zero nothing answers on it (as without httpscale).
		Eventually(func() error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := get(cctx, fqdn, "/restored")
			return err
		}).WithContext(ctx).WithTimeout(time.Minute).Should(HaveOccurred())
	})
})

// every calls fn(0), fn(1)... in a goroutine, one call every interval, until the returned stop is
// called; stop returns once the last call has returned.
func every(interval time.Duration, fn func(i int)) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(finished)
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-time.After(interval):
			}
			fn(i)
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}
