//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// uninstallFleet removes a second release of the chart (release in namespace ns) after deleting the
// HTTPScaledObjects of appNS, which carry its operator's finalizer and so must go while it runs.
func uninstallFleet(ctx SpecContext, release, ns, appNS string) {
	Expect(f.Client.DeleteAllOf(ctx, &httpscalev1alpha1.HTTPScaledObject{}, client.InNamespace(appNS))).To(Succeed())
	Eventually(func(g Gomega) {
		var list httpscalev1alpha1.HTTPScaledObjectList
		g.Expect(f.Client.List(ctx, &list, client.InNamespace(appNS))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
	}).WithContext(ctx).Should(Succeed())
	_, err := f.Cluster.HelmRun(ctx, GinkgoWriter, "uninstall", release, "-n", ns, "--wait", "--timeout=3m")
	Expect(err).NotTo(HaveOccurred())
	Expect(f.DeleteNamespace(ctx, ns)).To(Succeed())
}

// A second release of the chart, fleet "blue" in its own namespace, next to the suite's release of the
// default fleet: each fleet's interceptors route only the apps of their fleet.
var _ = Describe("Two fleets", Ordered, func() {
	const (
		blueRelease = "blue"
		blueNS      = "httpscale-blue"
	)
	var blueIC []string // the blue fleet's interceptor pod IPs

	sc := setUpScenario("fleets", func(ctx SpecContext, e *scenarioEnv) {
		DeferCleanup(uninstallFleet, blueRelease, blueNS, e.ns)
		values, err := f.Cluster.ChartValuesFile()
		Expect(err).NotTo(HaveOccurred())
		args := append(append([]string{"install", blueRelease}, f.Images.ChartArgs()...),
			"--namespace", blueNS, "--create-namespace", "--values", values, "--set", "fleet=blue,operator.replicas=1")
		_, err = f.Cluster.HelmRun(ctx, GinkgoWriter, args...)
		Expect(err).NotTo(HaveOccurred())
		for _, c := range localcluster.Components {
			_, err := f.Cluster.KubectlRun(ctx, "", "-n", blueNS, "rollout", "status", "deployment/httpscale-blue-"+c, "--timeout=3m")
			Expect(err).NotTo(HaveOccurred())
		}
		Eventually(func(g Gomega) {
			pods, err := f.Cluster.Pods(ctx, blueNS, "app.kubernetes.io/component=interceptor")
			g.Expect(err).NotTo(HaveOccurred())
			blueIC = nil
			for _, p := range pods {
				g.Expect(p.Ready && !p.Deleting).To(BeTrue(), "blue interceptor %s", p.Name)
				blueIC = append(blueIC, p.IP)
			}
			g.Expect(blueIC).To(HaveLen(len(f.Cluster.Real)))
		}).WithContext(ctx).Should(Succeed())
	})

	// through sends one GET with host to the interceptor pod at ip and returns the answer.
	through := func(ctx context.Context, ip, host string) (answer, error) {
		resp, err := f.Get(ctx, fmt.Sprintf("http://%s:%d/", ip, localcluster.ProxyPort), host)
		if err != nil {
			return answer{}, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return answer{Status: resp.StatusCode}, nil
		}
		return readAnswer(resp)
	}

	It("routes each app only through the interceptors of the fleet it names", func(ctx SpecContext) {
		redHost, blueHost := "red."+sc.host, "blue."+sc.host
		routedApp(ctx, sc.ns, "red", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(redHost)}
			s.Replicas.Min = ptr.To[int32](1)
		})
		// routedApp waits for as many routing interceptors as there are real nodes: blue has as many.
		routedApp(ctx, sc.ns, "blue", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(blueHost)}
			s.Replicas.Min = ptr.To[int32](1)
			s.Fleet = "blue"
		})
		var defaultIC []string
		for _, ic := range sc.h.Interceptors {
			defaultIC = append(defaultIC, ic.IP)
		}
		for fleet, c := range map[string]struct {
			ips            []string
			routed, absent string
			app            string
		}{
			"default": {defaultIC, redHost, blueHost, "red"},
			"blue":    {blueIC, blueHost, redHost, "blue"},
		} {
			for _, ip := range c.ips {
				Eventually(func(g Gomega) {
					a, err := through(ctx, ip, c.routed)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(a.Status).To(Equal(http.StatusOK))
					g.Expect(podIPs(ctx, sc.ns, c.app)).To(ContainElement(a.PodIP))
				}).WithContext(ctx).Should(Succeed(), "fleet %s interceptor %s routes %s", fleet, ip, c.routed)
				a, err := through(ctx, ip, c.absent)
				Expect(err).NotTo(HaveOccurred())
				Expect(a.Status).To(Equal(http.StatusNotFound), "fleet %s interceptor %s must not route %s", fleet, ip, c.absent)
			}
		}
	})

	It("says in the status of an object naming a fleet no release serves why nothing routes it", func(ctx SpecContext) {
		dep, svc := f.SampleApp(sc.ns, "lost", 0)
		Expect(f.Client.Create(ctx, dep)).To(Succeed())
		Expect(f.Client.Create(ctx, svc)).To(Succeed())
		lost := &httpscalev1alpha1.HTTPScaledObject{
			ObjectMeta: metav1.ObjectMeta{Name: "lost", Namespace: sc.ns},
			Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
				Hosts:          []httpscalev1alpha1.Host{httpscalev1alpha1.Host("lost." + sc.host)},
				ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{Name: "lost", Service: "lost", Port: ptr.To[int32](80)},
				Fleet:          "green",
			},
		}
		Expect(f.Client.Create(ctx, lost)).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(lost), lost)).To(Succeed())
			c := meta.FindStatusCondition(lost.Status.Conditions, httpscalev1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal("FleetNotServed"))
			g.Expect(c.Message).To(And(ContainSubstring(`fleet "green"`), ContainSubstring("blue, default")))
		}).WithContext(ctx).Should(Succeed())
	})
})
