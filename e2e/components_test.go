//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// How the other scenarios run httpscale: its three binaries as processes in the namespace, each with a
// token of its own ServiceAccount, discoverable through EndpointSlices like pods would be.
var _ = Describe("httpscale's binaries on the local cluster", Ordered, func() {
	var h *localcluster.HTTPScale

	BeforeAll(func(ctx SpecContext) {
		var err error
		h, err = f.HTTPScale(ctx, GinkgoWriter)
		Expect(err).NotTo(HaveOccurred())
	})

	It("runs the operator, the scaler and one interceptor per zone", func() {
		Expect(h.Components).To(HaveLen(2 + len(f.Cluster.Nodes)))
		for name, c := range h.Components {
			Expect(c.Process.Alive()).To(BeTrue(), name)
		}
	})

	It("publishes the interceptors' admin endpoints with their zones", func(ctx SpecContext) {
		var slices discoveryv1.EndpointSliceList
		Expect(f.Client.List(ctx, &slices, client.InNamespace(localcluster.Namespace),
			client.MatchingLabels{discoveryv1.LabelServiceName: "httpscale-interceptor-admin"})).To(Succeed())
		zones := map[string]string{}
		for _, s := range slices.Items {
			if len(s.Endpoints) == 0 {
				continue // the chart's Service selects no pod here: its controller-made slice is empty
			}
			Expect(s.Ports).To(ConsistOf(HaveField("Name", ptr.To("admin"))))
			for _, e := range s.Endpoints {
				zones[e.Addresses[0]] = ptr.Deref(e.Zone, "")
			}
		}
		want := map[string]string{}
		for _, ic := range h.Addresses.Interceptors {
			want[ic.IP] = ic.Zone
		}
		Expect(zones).To(Equal(want))
	})

	It("gives each binary only its ServiceAccount's permissions", func(ctx SpecContext) {
		canI := func(sa, verb, resource string) string {
			kc := filepath.Join(f.Cluster.Dir, "kubeconfigs", sa+".kubeconfig")
			out, _ := f.Cluster.Command(ctx, f.Cluster.Kubectl(), "--kubeconfig", kc, "auth", "can-i", verb, resource,
				"-n", localcluster.Namespace).Output()
			return strings.TrimSpace(string(out))
		}
		Expect(canI("httpscale-interceptor", "watch", "endpointslices.discovery.k8s.io")).To(Equal("yes"))
		Expect(canI("httpscale-interceptor", "list", "secrets")).To(Equal("no"))
		Expect(canI("httpscale-scaler", "create", "configmaps")).To(Equal("no"))
	})

	It("restarts one interceptor while the other keeps running", func(ctx SpecContext) {
		ic := h.Addresses.Interceptors[0]
		c := h.Components[ic.Name]
		old := c.Process.PID
		Expect(f.Cluster.StopComponent(c)).To(Succeed())
		Expect(c.Process.Alive()).To(BeFalse())
		Expect(h.Components[h.Addresses.Interceptors[1].Name].Process.Alive()).To(BeTrue())
		Expect(f.Cluster.StartComponent(ctx, ic.Name, c)).To(Succeed())
		Expect(c.Process.PID).NotTo(Equal(old), fmt.Sprintf("%s was not restarted", ic.Name))
		Expect(c.Process.Alive()).To(BeTrue())
	})
})
