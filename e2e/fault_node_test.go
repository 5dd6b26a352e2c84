//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// The node running a warm app's only pod is lost (its kubelet and containerd killed, its pods frozen,
// its pod network cut: nothing on it answers any more) while requests for the app go every 250 ms to
// the interceptor of the other zone. That interceptor keeps serving; the app's requests fail with a
// clear status (its pod does not answer: 502) until the control plane marks the pod not ready (the
// node monitor's grace period, 50 s), are then held (the app has no ready endpoint), and are
// answered once its replacement is Ready on the other node (the app tolerates an unreachable node for
// 10 s, as apps that want fast fail-over set). No request waits without an answer. The interceptor
// Service is measured too: kube-proxy keeps sending part of its connections to the lost interceptor
// until that pod is marked not ready.
var _ = Describe("Fault: a node lost", Label("fault"), Ordered, func() {
	const toleration = 10
	sc := setUpScenario("nodeloss", func(ctx SpecContext, e *scenarioEnv) {
		routedAppOf(ctx, e.ns, "app", 1, func(d *appsv1.Deployment) {
			d.Spec.Template.Spec.TopologySpreadConstraints = nil
			for _, taint := range []string{"node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready"} {
				d.Spec.Template.Spec.Tolerations = append(d.Spec.Template.Spec.Tolerations, corev1.Toleration{
					Key: taint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](toleration),
				})
			}
		}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(e.host)}
			warmBounds(1)(s)
		})
	})

	It("keeps the other zone's interceptor serving, brings the app back on the other node, and answers every request", func(ctx SpecContext) {
		var pod corev1.Pod
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(f.Client.List(ctx, &pods, client.InNamespace(sc.ns), client.MatchingLabels{"app": "app"})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(1))
			pod = pods.Items[0]
			g.Expect(pod.Spec.NodeName).NotTo(BeEmpty())
		}).WithContext(ctx).Should(Succeed())
		var lost localcluster.RealNode
		var survivor framework.Interceptor
		for _, n := range f.Cluster.Real {
			if n.Name == pod.Spec.NodeName {
				lost = n
			}
		}
		for _, ic := range sc.h.Interceptors {
			if ic.Node != lost.Name {
				survivor = ic
			}
		}
		Expect(lost.Name).NotTo(BeEmpty(), "the app's pod is on a real node")
		Expect(survivor.Name).NotTo(BeEmpty())
		Eventually(statusOf(ctx, proxyURLOf(survivor, "/warmup"), sc.host)).WithContext(ctx).Should(Equal(http.StatusOK))

		direct := startSteady(ctx, proxyURLOf(survivor, "/direct"), sc.host, 250*time.Millisecond, 3*time.Minute)
		viaService := startSteady(ctx, serviceURL(sc.h.InterceptorService, "/service"), sc.host, 250*time.Millisecond, 10*time.Second)
		time.Sleep(3 * time.Second)

		By("losing node " + lost.Name)
		at := time.Now()
		gone, err := f.Cluster.LoseNode(lost)
		restored := false
		DeferCleanup(func(ctx SpecContext) {
			if !restored {
				Expect(f.Cluster.RestoreNode(ctx, gone)).To(Succeed())
			}
		})
		Expect(err).NotTo(HaveOccurred())

		By("the app comes back on " + survivor.Node)
		var back time.Time
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(f.Client.List(ctx, &pods, client.InNamespace(sc.ns), client.MatchingLabels{"app": "app"})).To(Succeed())
			g.Expect(slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
				return p.Spec.NodeName == survivor.Node && p.DeletionTimestamp == nil && podIsReady(&p)
			})).To(BeTrue())
		}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
		back = time.Now()
		time.Sleep(10 * time.Second)
		shots := direct.stopSteady()
		svcShots := viaService.stopSteady()

		By("restoring node " + lost.Name)
		Expect(f.Cluster.RestoreNode(ctx, gone)).To(Succeed())
		restored = true

		codes := map[string]int{}
		var lastFailure time.Time
		for _, s := range shots {
			codes[shotOutcome(s)]++
			if !s.ok() {
				lastFailure = s.sent
			}
		}
		svcCodes := map[string]int{}
		for _, s := range svcShots {
			svcCodes[shotOutcome(s)]++
		}
		_, summary := loadReport(shots)
		_, svcSummary := loadReport(svcShots)
		report("node lost: the other zone's interceptor", "%s; outcomes %v; app Ready on %s %s after the loss; last failed request sent %s after the loss",
			summary, codes, survivor.Node, back.Sub(at).Round(time.Millisecond), lastFailure.Sub(at).Round(time.Millisecond))
		report("node lost: the interceptor Service (10 s client timeout)", "%s; outcomes %v", svcSummary, svcCodes)

		for _, s := range shots {
			Expect(s.err).NotTo(HaveOccurred(), "every request through the surviving interceptor is answered: %s", s)
			Expect(s.status).To(BeElementOf(http.StatusOK, http.StatusBadGateway, http.StatusGatewayTimeout), "a clear status: %s", s)
			if s.sent.Before(at) || s.sent.After(back) {
				Expect(s.ok()).To(BeTrue(), "before the loss and once the app is back: %s", s)
			}
		}
	})
})

// proxyURLOf is the URL of path on one interceptor pod's proxy port.
func proxyURLOf(ic framework.Interceptor, path string) string {
	return fmt.Sprintf("http://%s:%d%s", ic.IP, localcluster.ProxyPort, path)
}

// podIsReady reports whether the pod's Ready condition is True.
func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// shotOutcome names what a request got: its status code or "error".
func shotOutcome(s shot) string {
	if s.err != nil {
		if errors.Is(s.err, context.DeadlineExceeded) || isTimeout(s.err) {
			return "timeout"
		}
		return "error"
	}
	return fmt.Sprint(s.status)
}

// isTimeout reports whether err is a client timeout.
func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
