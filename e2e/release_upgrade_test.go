//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// The upgrade a user makes: the previous release (CHANGELOG.md; built from its commit by this tree's
// `make release` and published to the local registry like this one) installed from its OCI chart as a
// fleet of its own next to the suite's release, an app routed and answered by it, then the documented
// upgrade (the new CRD applied, `helm upgrade oci://... --version <this version>` with the same values)
// under steady traffic through its interceptor Service: no request fails, every pod ends on this
// release's images, and the app stays Ready.
var _ = Describe("Upgrade from the previous release", Ordered, func() {
	const (
		release = "previous"
		ns      = "httpscale-previous"
		rate    = 20 // requests per second
	)
	var (
		prev   localcluster.Images
		values string
		icIP   string // ClusterIP of the previous fleet's interceptor Service
	)
	helmArgs := func(verb string, im localcluster.Images) []string {
		return append(append([]string{verb, release}, im.ChartArgs()...),
			"--namespace", ns, "--values", values, "--set", "fleet="+release+",operator.replicas=1")
	}
	rollouts := func(ctx SpecContext) {
		for _, c := range localcluster.Components {
			_, err := f.Cluster.KubectlRun(ctx, "", "-n", ns, "rollout", "status", "deployment/httpscale-"+release+"-"+c, "--timeout=3m")
			Expect(err).NotTo(HaveOccurred())
		}
	}

	sc := setUpScenario("upgrade-prev", func(ctx SpecContext, e *scenarioEnv) {
		var err error
		prev, err = f.Cluster.PublishPrevious(ctx, GinkgoWriter)
		Expect(err).NotTo(HaveOccurred())
		Expect(prev.Tag).NotTo(Equal(f.Images.Tag), "the previous release has a version of its own")
		values, err = f.Cluster.ChartValuesFile()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(uninstallFleet, release, ns, e.ns)
		By(fmt.Sprintf("helm install %s --version %s", prev.Chart, prev.Tag))
		_, err = f.Cluster.HelmRun(ctx, GinkgoWriter, append(helmArgs("install", prev), "--create-namespace")...)
		Expect(err).NotTo(HaveOccurred())
		rollouts(ctx)
		Expect(f.Cluster.CheckReleasePods(ctx, ns, prev, GinkgoWriter)).To(Succeed())
		icIP, err = f.Cluster.KubectlRun(ctx, "", "-n", ns, "get", "service", "httpscale-"+release+"-interceptor", "-o", "jsonpath={.spec.clusterIP}")
		Expect(err).NotTo(HaveOccurred())
	})

	It("serves an app, then upgrades to this release under traffic without failing a request", func(ctx SpecContext) {
		hso := routedApp(ctx, sc.ns, "app", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(sc.host)}
			s.Replicas.Min = ptr.To[int32](1)
			s.Fleet = release
		})
		url := fmt.Sprintf("http://%s:%d/?sleep=50ms", icIP, localcluster.ProxyPort)
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true}}
		Eventually(func() (int, error) { return localcluster.Get(ctx, hc, url, sc.host) }).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Equal(http.StatusOK))

		stop := steadyTraffic(ctx, hc, url, sc.host, rate)
		DeferCleanup(func() { stop() })
		time.Sleep(3 * time.Second)
		By("kubectl apply of the new release's CRD, then helm upgrade --version " + f.Images.Tag)
		crds, err := f.Cluster.HelmRun(ctx, GinkgoWriter, append([]string{"show", "crds"}, f.Images.ChartArgs()...)...)
		Expect(err).NotTo(HaveOccurred())
		_, err = f.Cluster.KubectlRun(ctx, crds, "apply", "--server-side", "--force-conflicts", "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		t0 := time.Now()
		_, err = f.Cluster.HelmRun(ctx, GinkgoWriter, helmArgs("upgrade", f.Images)...)
		Expect(err).NotTo(HaveOccurred())
		rollouts(ctx)
		rolled := time.Since(t0)
		time.Sleep(3 * time.Second)
		total, failures := stop()

		Expect(f.Cluster.CheckReleasePods(ctx, ns, f.Images, GinkgoWriter)).To(Succeed())
		rep := fmt.Sprintf("%d requests during the upgrade %s -> %s (rolled in %s), %d failed", total, prev.Tag, f.Images.Tag,
			rolled.Round(time.Millisecond), len(failures))
		AddReportEntry("upgrade from the previous release", rep)
		fmt.Fprintln(GinkgoWriter, rep)
		Expect(failures).To(BeEmpty())
		Expect(total).To(BeNumerically(">=", int(rolled.Seconds()*rate*8/10)), "the traffic was steady")

		By("the app stays Ready under the new operator, and helm's history names both releases")
		Eventually(func(g Gomega) {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso)).To(Succeed())
			c := meta.FindStatusCondition(hso.Status.Conditions, httpscalev1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Ready: %s", c.Message)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		out, err := f.Cluster.HelmRun(ctx, GinkgoWriter, "history", release, "-n", ns, "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		var history []struct {
			Chart      string `json:"chart"`
			AppVersion string `json:"app_version"`
			Status     string `json:"status"`
		}
		Expect(json.Unmarshal([]byte(out), &history)).To(Succeed())
		var charts []string
		for _, h := range history {
			charts = append(charts, h.Chart+"/"+h.AppVersion+"/"+h.Status)
		}
		Expect(strings.Join(charts, " ")).To(Equal(fmt.Sprintf("httpscale-%s/%s/superseded httpscale-%s/%s/deployed",
			prev.Tag, prev.Tag, f.Images.Tag, f.Images.Tag)))
	})
})
