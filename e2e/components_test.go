//go:build e2e

package e2e

import (
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/operator/controller"
)

// How every scenario runs httpscale: `helm install` of charts/httpscale with its default values, the
// images hack/images built from this source tree, as real pods on the real nodes.
var _ = Describe("httpscale installed from the chart", Ordered, func() {
	var h *framework.HTTPScale

	BeforeAll(func(ctx SpecContext) {
		var err error
		h, err = f.HTTPScale(ctx)
		Expect(err).NotTo(HaveOccurred())
	})

	It("runs two operators, two scalers and one interceptor per zone as Ready pods of our images on real nodes", func(ctx SpecContext) {
		for comp, want := range map[string]int{"operator": 2, "interceptor": len(f.Cluster.Real), "scaler": 2} {
			pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component="+comp)
			Expect(err).NotTo(HaveOccurred())
			Expect(pods).To(HaveLen(want), comp)
			for _, p := range pods {
				Expect(p.Ready).To(BeTrue(), p.Name)
				Expect(p.Node).To(HavePrefix("real-"), p.Name)
				Expect(p.ImageIDs).To(HaveEach(HaveSuffix("@"+f.Images.Digests[comp])), "%s runs the image hack/images built", p.Name)
			}
		}
		Expect(h.Interceptors).To(HaveLen(len(f.Cluster.Real)))
		for i, n := range f.Cluster.Real {
			Expect(h.Interceptors[i].Node).To(Equal(n.Name))
		}
		// The scaler's PodDisruptionBudget lets a drain take one of the two at a time.
		Eventually(func() (string, error) {
			return f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "poddisruptionbudget", "httpscale-scaler", "-o", "jsonpath={.status.disruptionsAllowed}/{.status.currentHealthy}")
		}).WithContext(ctx).Should(Equal("1/2"))
	})

	It("elects one operator leader and serves the webhook with the operator's own certificate", func(ctx SpecContext) {
		holder, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "lease", "operator.httpscale.dev", "-o", "jsonpath={.spec.holderIdentity}")
		Expect(err).NotTo(HaveOccurred())
		pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=operator")
		Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, p := range pods {
			names = append(names, p.Name)
		}
		Expect(names).To(ContainElement(Satisfy(func(n string) bool { return strings.HasPrefix(holder, n) })),
			"leader lease holder %q is one of the operator pods", holder)

		// Only the webhook judges cron syntax (the CRD's schema cannot); kubectl prints a webhook's
		// Invalid denial by its causes.
		_, err = f.Cluster.KubectlRun(ctx, `apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata: {name: invalid, namespace: default}
spec:
  hosts: [invalid.example]
  scaleTargetRef: {name: app, service: app, port: 80}
  schedules: [{name: never, schedule: "61 8 * * *", targetMinReplicas: 1}]
`, "apply", "-f", "-")
		Expect(err).To(MatchError(ContainSubstring(`schedule "61 8 * * *" is not a valid 5-field cron expression`)))
		ca, err := f.Cluster.KubectlRun(ctx, "", "get", "validatingwebhookconfiguration", "httpscale-operator-webhook", "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}")
		Expect(err).NotTo(HaveOccurred())
		Expect(len(ca)).To(BeNumerically(">", 100), "caBundle patched by the operator")

		// The mutating webhook puts the default fleet's finalizer on a new object in its create (a
		// dry run is admitted like a create). It fails open, so ask until it answers: right after an
		// install the operator's Service may not route to a ready pod yet.
		Eventually(func(g Gomega) {
			probe := &httpscalev1alpha1.HTTPScaledObject{
				ObjectMeta: metav1.ObjectMeta{Name: "finalizer-probe", Namespace: "default"},
				Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
					Hosts:          []httpscalev1alpha1.Host{"probe.example"},
					ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{Name: "app", Service: "app", Port: ptr.To[int32](80)},
				},
			}
			g.Expect(f.Client.Create(ctx, probe, client.DryRunAll)).To(Succeed())
			g.Expect(probe.Finalizers).To(ConsistOf(controller.Finalizer))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		mca, err := f.Cluster.KubectlRun(ctx, "", "get", "mutatingwebhookconfiguration", "httpscale-operator-webhook", "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}")
		Expect(err).NotTo(HaveOccurred())
		Expect(mca).To(Equal(ca), "both configurations trust the same CA")
	})

	It("publishes the interceptors' admin endpoints with their zones", func(ctx SpecContext) {
		var slices discoveryv1.EndpointSliceList
		Expect(f.Client.List(ctx, &slices, client.InNamespace(localcluster.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: "httpscale-interceptor-admin"})).To(Succeed())
		zones := map[string]string{}
		for _, s := range slices.Items {
			Expect(s.Ports).To(ConsistOf(HaveField("Name", ptr.To("admin"))))
			for _, e := range s.Endpoints {
				if ptr.Deref(e.Conditions.Ready, false) {
					zones[e.Addresses[0]] = ptr.Deref(e.Zone, "")
				}
			}
		}
		want := map[string]string{}
		for _, ic := range h.Interceptors {
			want[ic.IP] = ic.Zone
		}
		Expect(zones).To(Equal(want))
	})

	It("gives each component only its ServiceAccount's permissions", func(ctx SpecContext) {
		canI := func(sa, verb, resource string) string {
			out, _ := f.Cluster.KubectlRun(ctx, "", "auth", "can-i", verb, resource, "-n", localcluster.Namespace,
				"--as=system:serviceaccount:"+localcluster.Namespace+":"+sa)
			return strings.TrimSpace(out)
		}
		Expect(canI("httpscale-interceptor", "watch", "endpointslices.discovery.k8s.io")).To(Equal("yes"))
		Expect(canI("httpscale-interceptor", "list", "secrets")).To(Equal("no"))
		Expect(canI("httpscale-scaler", "create", "configmaps")).To(Equal("no"))
	})

	It("replaces a deleted interceptor pod in its zone while the other keeps running", func(ctx SpecContext) {
		deleted, kept := h.Interceptors[0], h.Interceptors[1]
		keptBefore, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=interceptor")
		Expect(err).NotTo(HaveOccurred())
		_, err = f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "delete", "pod", deleted.Name, "--wait=false")
		Expect(err).NotTo(HaveOccurred())
		after, err := f.HTTPScale(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(after.Interceptors[0].Name).NotTo(Equal(deleted.Name), "a new pod replaced the deleted one")
		Expect(after.Interceptors[0].Zone).To(Equal(deleted.Zone))
		Expect(after.Interceptors[1].Name).To(Equal(kept.Name), "the other interceptor kept running")
		for _, p := range keptBefore {
			if p.Name == kept.Name {
				now, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=interceptor")
				Expect(err).NotTo(HaveOccurred())
				Expect(now).To(ContainElement(And(HaveField("UID", p.UID), HaveField("Restarts", p.Restarts))))
			}
		}
		h = after
	})
})
