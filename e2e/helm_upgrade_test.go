//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// `helm upgrade` with a changed value of every component rolls all three Deployments (operator,
// interceptors, scaler) while clients send steady traffic through the interceptor Service's ClusterIP,
// as users' traffic arrives: not one request may fail.
var _ = Describe("helm upgrade under steady traffic", Ordered, func() {
	const rate = 40 // requests per second
	sc := setUpScenario("upgrade", hostApp("app", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
		s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](4)}
	}))

	It("rolls every component and loses no request", func(ctx SpecContext) {
		before := map[string][]localcluster.Pod{}
		for _, c := range localcluster.Components {
			pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component="+c)
			Expect(err).NotTo(HaveOccurred())
			before[c] = pods
		}
		url := fmt.Sprintf("http://%s:%d/upgrade?sleep=100ms", sc.h.InterceptorService, localcluster.ProxyPort)
		// A new connection per request: each goes through kube-proxy's current choice of endpoint.
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true}}
		Eventually(func() (int, error) {
			resp, err := localcluster.Get(ctx, hc, url, sc.host)
			return resp, err
		}).WithContext(ctx).Should(Equal(http.StatusOK))

		stop := steadyTraffic(ctx, hc, url, sc.host, rate)
		DeferCleanup(func() { stop() }) // a failed spec stops its traffic too
		time.Sleep(3 * time.Second)
		DeferCleanup(rebalanceInterceptors)
		By("helm upgrade with a changed pod annotation of every component")
		stamp := fmt.Sprint(time.Now().Unix())
		t0 := time.Now()
		Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter, "--set-string",
			"operator.podAnnotations.rolled="+stamp+",interceptor.podAnnotations.rolled="+stamp+",scaler.podAnnotations.rolled="+stamp)).To(Succeed())
		rolled := time.Since(t0)
		time.Sleep(3 * time.Second)
		total, failures := stop()

		for _, c := range localcluster.Components {
			after, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component="+c)
			Expect(err).NotTo(HaveOccurred())
			for _, old := range before[c] {
				// An old pod may still be draining (terminating) once its replacement is Ready.
				Expect(after).NotTo(ContainElement(And(HaveField("UID", old.UID), HaveField("Deleting", false))), "%s pod %s was replaced", c, old.Name)
			}
		}
		Expect(f.Cluster.CheckChartPods(ctx, f.Images, GinkgoWriter)).To(Succeed())
		rep := fmt.Sprintf("%d requests during helm upgrade (every component rolled in %s), %d failed", total, rolled.Round(time.Millisecond), len(failures))
		AddReportEntry("helm upgrade", rep)
		fmt.Fprintln(GinkgoWriter, rep)
		Expect(failures).To(BeEmpty())
		Expect(total).To(BeNumerically(">=", int(rolled.Seconds()*rate*8/10)), "the traffic was steady")
	})
})

// steadyTraffic sends GETs of url with host at a fixed rate (an open loop: a late tick sends every
// request due by then) until the returned stop is called, which waits for the requests in flight and
// returns how many were sent and a line per failed one (an error or a status other than 200).
func steadyTraffic(ctx context.Context, hc *http.Client, url, host string, rate int) (stop func() (int, []string)) {
	var mu sync.Mutex
	var total int
	var failures []string
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		start, sent := time.Now(), 0
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-tick.C:
			}
			for due := int(time.Since(start).Seconds() * float64(rate)); sent < due; sent++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					at := time.Now()
					code, err := localcluster.Get(context.WithoutCancel(loadCtx), hc, url, host)
					mu.Lock()
					defer mu.Unlock()
					total++
					if err != nil || code != http.StatusOK {
						failures = append(failures, fmt.Sprintf("%s: status %d, %v", at.Format("15:04:05.000"), code, err))
					}
				}()
			}
		}
	}()
	return func() (int, []string) {
		stopLoad()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return total, failures
	}
}

// rebalanceInterceptors puts the interceptors back one per zone after a rolling update: the chart's
// topology spread is ScheduleAnyway, so a rollout that starts each replacement while the old pods still
// run may leave both in one zone. Deleting one pod of a doubled zone lets the Deployment place its
// replacement in the empty zone (terminating pods do not count for the spread).
func rebalanceInterceptors(ctx SpecContext) {
	Expect(f.Cluster.WaitChart(ctx)).To(Succeed())
	pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=interceptor")
	Expect(err).NotTo(HaveOccurred())
	perNode := map[string][]string{}
	for _, p := range pods {
		if !p.Deleting {
			perNode[p.Node] = append(perNode[p.Node], p.Name)
		}
	}
	for _, names := range perNode {
		if len(names) > 1 {
			fmt.Fprintf(GinkgoWriter, "the rollout left interceptors %v on one node; deleting %s to spread them again\n", names, names[0])
			_, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "delete", "pod", names[0], "--wait=false")
			Expect(err).NotTo(HaveOccurred())
		}
	}
	_, err = f.HTTPScale(ctx)
	Expect(err).NotTo(HaveOccurred())
}
