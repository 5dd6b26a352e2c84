//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// The scaler replica KEDA is connected to is lost at the moment apps at zero get their first
// requests: every app must wake, through whatever replica is left, and the metric KEDA's adapter
// serves for a busy app must never read zero meanwhile. KEDA pools one gRPC connection per scaler
// address, pinned by kube-proxy to one replica when it was opened; the connection tracking table of
// the cluster's namespace tells which. The replica is lost twice: killed (SIGKILL, its container
// restarts in place) and deleted (`kubectl delete pod`, a graceful stop).
var _ = Describe("Fault: the scaler replica KEDA uses is lost while apps at zero get their first requests", Label("fault"), Ordered, func() {
	const colds = 4
	sc := setUpScenario("scalerloss",
		func(ctx SpecContext, e *scenarioEnv) {
			for i := range colds {
				routedApp(ctx, e.ns, fmt.Sprintf("cold-%d", i), 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
					s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(fmt.Sprintf("cold-%d.%s", i, e.host))}
					s.ScaledownPeriod = ptr.To[int32](300)
				})
			}
		},
		hostApp("busy", 1, concurrencyTarget(100), func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](1)}
		}))

	var metric string
	BeforeAll(func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			var hpa autoscalingv2.HorizontalPodAutoscaler
			g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: sc.ns, Name: "keda-hpa-busy"}, &hpa)).To(Succeed())
			g.Expect(hpa.Spec.Metrics).NotTo(BeEmpty())
			metric = hpa.Spec.Metrics[0].External.Metric.Name
		}).WithContext(ctx).Should(Succeed())
	})

	// lose finds the scaler replica KEDA's connection is pinned to, loses it with how, at once sends
	// the first request to each of apps (all at zero), and checks that each wakes and that the busy
	// app's metric (4 requests in flight) never read zero.
	lose := func(ctx context.Context, what string, apps []int, how func(localcluster.Pod)) {
		GinkgoHelper()
		pod := kedaScalerPod(ctx)
		busyCtx, stopBusy := context.WithCancel(ctx)
		defer stopBusy()
		go f.Cluster.Load(busyCtx, serviceURL(sc.h.InterceptorService, "/busy?sleep=1s"), sc.host, 4, 1<<20, time.Minute)
		Eventually(func() (string, error) { return readMetric(ctx, sc.ns, "busy", metric) }).
			WithContext(ctx).Should(SatisfyAll(Not(BeEmpty()), Not(Equal("0"))), "the busy app's metric before the loss")
		samples := sampleMetric(busyCtx, sc.ns, "busy", metric)

		By(fmt.Sprintf("%s %s, the replica KEDA is connected to", what, pod.Name))
		lost := time.Now()
		how(pod)
		var wg sync.WaitGroup
		wakes := make([]shot, len(apps))
		hc := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{DialContext: localcluster.DialContext(f.Cluster.NetNS)}}
		for i, app := range apps {
			wg.Go(func() {
				wakes[i] = getShot(ctx, hc, serviceURL(sc.h.InterceptorService, "/first"), fmt.Sprintf("cold-%d.%s", app, sc.host))
			})
		}
		wg.Wait()
		time.Sleep(5 * time.Second) // the metric through the replacement, too
		stopBusy()
		reads := samples()

		var took []string
		for i, w := range wakes {
			Expect(w.ok()).To(BeTrue(), "app cold-%d: %s", apps[i], w)
			Expect(w.coldStart).To(BeTrue(), "app cold-%d was at zero", apps[i])
			took = append(took, w.done.Sub(lost).Round(time.Millisecond).String())
		}
		report("scaler replica "+what, "first requests to %d apps at zero, sent at once: answered %s after the loss; busy app's metric through KEDA's adapter: %s",
			len(apps), strings.Join(took, ", "), reads)
		Expect(reads.zero).To(BeZero(), "the busy app's metric read 0 while 4 requests were in flight: %s", reads)
		Expect(f.Cluster.WaitChart(ctx)).To(Succeed())
	}

	It("wakes every app when that replica is killed (SIGKILL)", func(ctx SpecContext) {
		lose(ctx, "killed (SIGKILL)", []int{0, 1}, func(p localcluster.Pod) {
			_, err := localcluster.SignalContainer(p.ContainerIDs[0], syscall.SIGKILL)
			Expect(err).NotTo(HaveOccurred())
		})
	})

	It("wakes every app when that replica's pod is deleted", func(ctx SpecContext) {
		lose(ctx, "deleted (kubectl delete pod)", []int{2, 3}, func(p localcluster.Pod) {
			_, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "delete", "pod", p.Name, "--wait=false")
			Expect(err).NotTo(HaveOccurred())
		})
	})
})

// kedaScalerPod returns the scaler pod KEDA's gRPC connection is pinned to, found through the
// connection tracking table (KEDA dials the scaler Service).
func kedaScalerPod(ctx context.Context) localcluster.Pod {
	GinkgoHelper()
	ip, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "service", "httpscale-scaler", "-o", "jsonpath={.spec.clusterIP}")
	Expect(err).NotTo(HaveOccurred())
	var pod localcluster.Pod
	Eventually(func(g Gomega) {
		ips, err := f.Cluster.ServiceConnections(ctx, ip, localcluster.ScalerGRPCPort)
		g.Expect(err).NotTo(HaveOccurred())
		slices.Sort(ips)
		ips = slices.Compact(ips)
		g.Expect(ips).To(HaveLen(1), "KEDA's connections to the scaler Service")
		pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=scaler")
		g.Expect(err).NotTo(HaveOccurred())
		i := slices.IndexFunc(pods, func(p localcluster.Pod) bool { return p.IP == ips[0] && p.Ready })
		g.Expect(i).To(BeNumerically(">=", 0), "a Ready scaler pod with IP %s", ips[0])
		pod = pods[i]
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	return pod
}

// metricReads counts reads of an external metric through KEDA's adapter.
type metricReads struct {
	ok, zero, failed int
	values           map[string]int
	errors           []string
}

func (r metricReads) String() string {
	return fmt.Sprintf("%d reads: %d with a value %v, %d zero, %d failed %v", r.ok+r.zero+r.failed, r.ok, r.values, r.zero, r.failed, r.errors)
}

// readMetric reads the app's external metric through the aggregated API (KEDA's adapter).
func readMetric(ctx context.Context, ns, app, metric string) (string, error) {
	body, err := f.RawGet(ctx, fmt.Sprintf("/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s?labelSelector=scaledobject.keda.sh/name=%s", ns, metric, app))
	if err != nil {
		return "", err
	}
	var list struct {
		Items []struct{ Value string } `json:"items"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return "", err
	}
	if len(list.Items) != 1 {
		return "", fmt.Errorf("%d metric values, want 1: %s", len(list.Items), body)
	}
	return list.Items[0].Value, nil
}

// sampleMetric reads the app's external metric every 250 ms until ctx ends; the returned function
// waits for that and returns the counts.
func sampleMetric(ctx context.Context, ns, app, metric string) func() metricReads {
	var mu sync.Mutex
	r := metricReads{values: map[string]int{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			v, err := readMetric(ctx, ns, app, metric)
			mu.Lock()
			switch {
			case ctx.Err() != nil:
			case err != nil:
				r.failed++
				if len(r.errors) < 3 {
					r.errors = append(r.errors, err.Error()[:min(len(err.Error()), 160)])
				}
			case v == "0":
				r.zero++
			default:
				r.ok++
				r.values[v]++
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() metricReads {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return r
	}
}
