//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// The API server stops answering for a minute (SIGSTOP: its connections stay open and go silent, as
// in a hung control plane or a partition) while a warm app gets a request every 100 ms through the
// interceptor Service and every 200 ms at each interceptor pod, and two apps at zero get a request
// each. The data path needs no API server: no warm request sent to an interceptor may fail, neither
// during the outage nor in the seconds after it, when the controller-manager marks every pod not
// ready until the kubelets report again (the interceptors' readiness grace keeps routing to the
// app's pods). Through the interceptor Service kube-proxy refuses connections while it sees the
// interceptor pods not ready: refused, never held or timed out. A held request cannot be woken while
// the API is away (KEDA cannot scale); it is answered once the API is back, or at its readiness
// timeout with 504 — never left hanging. Afterwards routing and status work again.
var _ = Describe("Fault: API server stopped for 60 s", Label("fault"), Ordered, func() {
	const (
		outage     = 60 * time.Second
		shortReady = 15 * time.Second  // readiness timeout of the app whose held request times out
		longReady  = 150 * time.Second // of the app whose held request outlives the outage
	)
	sc := setUpScenario("apiout",
		hostApp("warm", 2, warmBounds(2)),
		heldApps(shortReady, longReady))

	It("serves warm traffic throughout, answers or times out held requests, and routes again afterwards", func(ctx SpecContext) {
		svc := sc.h.InterceptorService
		Eventually(statusOf(ctx, serviceURL(svc, "/warmup"), sc.host)).WithContext(ctx).Should(Equal(http.StatusOK))

		readiness := watchPodReadiness(ctx, sc.ns, "app=warm")
		icReadiness := watchPodReadiness(ctx, "httpscale-system", "app.kubernetes.io/component=interceptor")
		load := startSteady(ctx, serviceURL(svc, "/steady"), sc.host, 100*time.Millisecond, 5*time.Second)
		var direct []*steadyLoad
		for _, ic := range sc.h.Interceptors {
			direct = append(direct, startSteady(ctx, proxyURLOf(ic, "/direct"), sc.host, 200*time.Millisecond, 5*time.Second))
		}
		time.Sleep(5 * time.Second)

		By("stopping kube-apiserver with SIGSTOP")
		stopped := time.Now()
		Expect(f.Cluster.SignalProcess("kube-apiserver", syscall.SIGSTOP)).To(Succeed())
		resumed := false
		DeferCleanup(func() {
			if !resumed {
				_ = f.Cluster.SignalProcess("kube-apiserver", syscall.SIGCONT)
			}
		})
		time.Sleep(5 * time.Second)
		short, long := sendHeld(ctx, svc, sc.host)
		time.Sleep(outage - time.Since(stopped))
		By("resuming kube-apiserver")
		Expect(f.Cluster.SignalProcess("kube-apiserver", syscall.SIGCONT)).To(Succeed())
		resumed = true
		back := time.Now()
		time.Sleep(40 * time.Second)
		shots := load.stopSteady()
		var directShots []shot
		for _, d := range direct {
			directShots = append(directShots, d.stopSteady()...)
		}
		_, summary := loadReport(shots)
		_, directSummary := loadReport(directShots)
		report("API server outage: warm traffic to the interceptor pods", "%s (outage %s)", directSummary, back.Sub(stopped).Round(time.Millisecond))
		report("API server outage: warm traffic through the interceptor Service", "%s", summary)
		report("API server outage: readiness of the warm app's pods", "%s", readiness.stop())
		report("API server outage: readiness of the interceptor pods", "%s", icReadiness.stop())

		expectHeld("API server outage", short, long, shortReady, longReady, back)

		// The interceptors route through the outage and the seconds after it in which the
		// controller-manager marks every pod not ready (the readiness grace keeps the app's pods).
		expectShotsOK("warm requests sent to the interceptors during and after the outage", directShots)
		// Through the Service, kube-proxy refuses connections while the interceptor pods are marked not
		// ready too: refused (nothing sent, a client may retry), never held, timed out or answered wrongly.
		var notRefused []shot
		for _, s := range shots {
			if !s.ok() && (s.err == nil || !strings.Contains(s.err.Error(), "connection refused") || s.sent.Before(back)) {
				notRefused = append(notRefused, s)
			}
		}
		Expect(notRefused).To(BeEmpty(), "warm requests through the Service that failed otherwise than refused after the outage:\n%s", firstShots(notRefused, 20))

		By("routing and status work again: a changed object is routed by every interceptor and Ready, an app at zero wakes")
		t0 := time.Now()
		var hso httpscalev1alpha1.HTTPScaledObject
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: sc.ns, Name: "warm"}, &hso)).To(Succeed())
		hso.Spec.Hosts = append(hso.Spec.Hosts, httpscalev1alpha1.Host("changed."+sc.host))
		Expect(f.Client.Update(ctx, &hso)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(&hso), &hso)).To(Succeed())
			g.Expect(hso.Status.ObservedGeneration).To(Equal(hso.Generation))
			g.Expect(hso.Status.Routing.InterceptorsReady).To(Equal(hso.Status.Routing.InterceptorsTotal))
			g.Expect(readyCondition(&hso)).To(Equal("True"))
		}).WithContext(ctx).Should(Succeed())
		report("API server outage: an object changed after the outage", "routed by every interceptor and Ready in %s", time.Since(t0).Round(time.Millisecond))
		Eventually(statusOf(ctx, serviceURL(svc, "/changed"), "changed."+sc.host)).WithContext(ctx).Should(Equal(http.StatusOK))
		after := getShot(ctx, f.HTTP, serviceURL(svc, "/after"), "after."+sc.host)
		Expect(after.ok() && after.coldStart).To(BeTrue(), "an app at zero woken after the outage: %s", after)
	})
})

// readyCondition is the status of an HTTPScaledObject's Ready condition ("" when absent).
func readyCondition(hso *httpscalev1alpha1.HTTPScaledObject) string {
	for _, c := range hso.Status.Conditions {
		if c.Type == httpscalev1alpha1.ConditionReady {
			return string(c.Status)
		}
	}
	return ""
}

// podReadiness records every change of the Ready condition of some pods, polled every 250 ms (polls
// that fail, e.g. while the API server is away, are skipped).
type podReadiness struct {
	stop func() string
}

// watchPodReadiness polls the pods of ns matching selector until stop, which returns the changes
// seen: "15:04:05.000 pod=False" lines.
func watchPodReadiness(ctx context.Context, ns, selector string) podReadiness {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	var changes []string
	last := map[string]string{}
	done := make(chan struct{})
	sel, err := labels.Parse(selector)
	Expect(err).NotTo(HaveOccurred())
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			var pods corev1.PodList
			rctx, rcancel := context.WithTimeout(ctx, time.Second)
			err := f.Client.List(rctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel})
			rcancel()
			if err == nil {
				mu.Lock()
				for _, p := range pods.Items {
					st := "Unknown"
					for _, c := range p.Status.Conditions {
						if c.Type == corev1.PodReady {
							st = string(c.Status)
						}
					}
					if last[p.Name] != st {
						changes = append(changes, fmt.Sprintf("%s %s=%s", time.Now().Format("15:04:05.000"), p.Name, st))
						last[p.Name] = st
					}
				}
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return podReadiness{stop: func() string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(changes, ", ")
	}}
}
