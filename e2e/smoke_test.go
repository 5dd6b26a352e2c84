//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// The platform every other scenario stands on: real nodes in two zones (next to kwok's fake ones), real
// pods with routable IPs, zoned EndpointSlices, the sample app's pods answering on their IPs, and KEDA
// scaling through the HPA.
var _ = Describe("The local cluster", Ordered, func() {
	var ns string

	BeforeAll(func(ctx SpecContext) {
		var err error
		ns, err = f.CreateNamespace(ctx, "smoke")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(f.DeleteNamespace(ctx, ns)).To(Succeed()) })
		dep, svc := f.SampleApp(ns, "web", 4)
		Expect(f.Client.Create(ctx, dep)).To(Succeed())
		Expect(f.Client.Create(ctx, svc)).To(Succeed())
	})

	It("has Ready nodes in zone-a and zone-b", func(ctx SpecContext) {
		var nodes corev1.NodeList
		Expect(f.Client.List(ctx, &nodes)).To(Succeed())
		zones := map[string]bool{}
		for _, n := range nodes.Items {
			Expect(n.Status.Conditions).To(ContainElement(And(
				HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))), n.Name)
			zones[n.Labels["topology.kubernetes.io/zone"]] = true
		}
		Expect(zones).To(Equal(map[string]bool{"zone-a": true, "zone-b": true}))
	})

	It("runs a Deployment's pods Ready with IPs from their node's pod CIDR, in both zones", func(ctx SpecContext) {
		cidrs := map[string]netip.Prefix{}
		for _, n := range f.Cluster.Real {
			cidrs[n.Name] = netip.MustParsePrefix(n.PodCIDR)
		}
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(f.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "web"})).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(4))
			perNode := map[string]int{}
			for _, p := range pods.Items {
				g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), p.Name)
				g.Expect(p.Status.Conditions).To(ContainElement(And(
					HaveField("Type", corev1.PodReady), HaveField("Status", corev1.ConditionTrue))), p.Name)
				ip, err := netip.ParseAddr(p.Status.PodIP)
				g.Expect(err).NotTo(HaveOccurred(), p.Name)
				g.Expect(cidrs[p.Spec.NodeName].Contains(ip)).To(BeTrue(), "%s: %s not in the pod CIDR of %s", p.Name, ip, p.Spec.NodeName)
				perNode[p.Spec.NodeName]++
			}
			g.Expect(perNode).To(HaveKeyWithValue("real-zone-a", 2))
			g.Expect(perNode).To(HaveKeyWithValue("real-zone-b", 2))
		}).WithContext(ctx).Should(Succeed())
	})

	It("publishes ready endpoints with zones, and the sample app answers on each pod IP", func(ctx SpecContext) {
		var eps []discoveryv1.Endpoint
		Eventually(func(g Gomega) {
			var slices discoveryv1.EndpointSliceList
			g.Expect(f.Client.List(ctx, &slices, client.InNamespace(ns),
				client.MatchingLabels{discoveryv1.LabelServiceName: "web"})).To(Succeed())
			eps = nil
			for _, s := range slices.Items {
				for _, e := range s.Endpoints {
					if ptr.Deref(e.Conditions.Ready, false) {
						eps = append(eps, e)
					}
				}
			}
			g.Expect(eps).To(HaveLen(4))
		}).WithContext(ctx).Should(Succeed())

		zoneOf := map[string]string{}
		for _, n := range f.Cluster.Real {
			zoneOf[n.Name] = n.Zone
		}
		for _, e := range eps {
			Expect(e.Zone).NotTo(BeNil())
			Expect(*e.Zone).To(Equal(zoneOf[ptr.Deref(e.NodeName, "")]))
			ip := e.Addresses[0]
			resp, err := f.Get(ctx, fmt.Sprintf("http://%s:%d/hello", ip, framework.SampleAppPort), "smoke.example")
			Expect(err).NotTo(HaveOccurred())
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(http.StatusOK))
			var rep struct{ PodIP, Zone, Host, Path string }
			Expect(json.Unmarshal(body, &rep)).To(Succeed())
			Expect(rep.PodIP).To(Equal(ip))
			Expect(rep.Zone).To(Equal(*e.Zone))
			Expect(rep.Host).To(Equal("smoke.example"))
			Expect(rep.Path).To(Equal("/hello"))
		}
	})

	It("answers through the Service's ClusterIP (kube-proxy) from pods in both zones", func(ctx SpecContext) {
		var svc corev1.Service
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &svc)).To(Succeed())
		// kube-proxy programs the endpoints up to a sync period after they are ready; every request
		// goes on a new connection, so each picks an endpoint anew.
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true}}
		zones := map[string]int{}
		Eventually(func(g Gomega) {
			resp, err := hc.Get(fmt.Sprintf("http://%s/hello", svc.Spec.ClusterIP))
			g.Expect(err).NotTo(HaveOccurred())
			resp.Body.Close()
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
			zones[resp.Header.Get("X-Zone")]++
			g.Expect(zones).To(HaveKey("zone-a"))
			g.Expect(zones).To(HaveKey("zone-b"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	})

	It("serves the external metrics API through KEDA's adapter", func(ctx SpecContext) {
		svc := &unstructured.Unstructured{}
		svc.SetGroupVersionKind(framework.APIServiceGVK)
		Expect(f.Client.Get(ctx, client.ObjectKey{Name: "v1beta1.external.metrics.k8s.io"}, svc)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(svc.Object, "status", "conditions")
		Expect(conds).To(ContainElement(And(HaveKeyWithValue("type", "Available"), HaveKeyWithValue("status", "True"))))
	})

	It("lets KEDA scale a Deployment 0->1 and its HPA 1->N, then back to 0", func(ctx SpecContext) {
		dep, _ := f.SampleApp(ns, "scaled", 0)
		dep.Spec.Template.Spec.TopologySpreadConstraints = nil
		Expect(f.Client.Create(ctx, dep)).To(Succeed())
		// One replica per two "web" pods: 4 pods -> 2 replicas. 0->1 is KEDA's; 1->2 is the HPA's,
		// which reads the metric through the aggregated external metrics API (KEDA's adapter).
		so := &kedav1alpha1.ScaledObject{
			ObjectMeta: metav1.ObjectMeta{Name: "scaled", Namespace: ns},
			Spec: kedav1alpha1.ScaledObjectSpec{
				ScaleTargetRef:  &kedav1alpha1.ScaleTarget{Name: "scaled"},
				MinReplicaCount: ptr.To[int32](0),
				MaxReplicaCount: ptr.To[int32](3),
				PollingInterval: ptr.To[int32](1),
				CooldownPeriod:  ptr.To[int32](5),
				Triggers: []kedav1alpha1.ScaleTriggers{{
					Type:     "kubernetes-workload",
					Metadata: map[string]string{"podSelector": "app=web", "value": "2"},
				}},
			},
		}
		Expect(f.Client.Create(ctx, so)).To(Succeed())

		var hpa autoscalingv2.HorizontalPodAutoscaler
		Eventually(func() error {
			return f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "keda-hpa-scaled"}, &hpa)
		}).WithContext(ctx).Should(Succeed())
		Expect(hpa.Spec.Metrics).To(HaveLen(1))
		Expect(hpa.Spec.Metrics[0].External).NotTo(BeNil())
		metric := hpa.Spec.Metrics[0].External.Metric.Name

		Eventually(func(g Gomega) {
			body, err := f.RawGet(ctx, fmt.Sprintf("/apis/external.metrics.k8s.io/v1beta1/namespaces/%s/%s?labelSelector=scaledobject.keda.sh/name=scaled", ns, metric))
			g.Expect(err).NotTo(HaveOccurred())
			var list struct {
				Items []struct{ Value string } `json:"items"`
			}
			g.Expect(json.Unmarshal(body, &list)).To(Succeed())
			g.Expect(list.Items).To(HaveLen(1))
			g.Expect(list.Items[0].Value).To(Equal("4"))
		}).WithContext(ctx).Should(Succeed())

		Eventually(func(g Gomega) {
			var d appsv1.Deployment
			g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "scaled"}, &d)).To(Succeed())
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
		}).WithContext(ctx).Should(Succeed())

		By("removing the pods the trigger counts")
		updateDeployment(ctx, ns, "web", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](0) })
		Eventually(func(g Gomega) {
			var d appsv1.Deployment
			g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "scaled"}, &d)).To(Succeed())
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(0)))
		}).WithContext(ctx).Should(Succeed())
	})
})
