//go:build e2e

package e2e

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// Admission runs in kube-apiserver (CRD schema and CEL rules), so this needs no httpscale process.
var _ = Describe("Admission of HTTPScaledObjects", Ordered, func() {
	var ns string

	BeforeAll(func(ctx SpecContext) {
		var err error
		ns, err = f.CreateNamespace(ctx, "admission")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(f.DeleteNamespace(ctx, ns)).To(Succeed()) })
	})

	object := func(name string, mutate func(*httpscalev1alpha1.HTTPScaledObjectSpec)) *httpscalev1alpha1.HTTPScaledObject {
		o := &httpscalev1alpha1.HTTPScaledObject{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
				Hosts: []httpscalev1alpha1.Host{"shop.example.com"},
				ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{
					APIVersion: "apps/v1", Kind: "Deployment", Name: "shop", Service: "shop", Port: ptr.To[int32](80)},
			},
		}
		mutate(&o.Spec)
		return o
	}

	DescribeTable("rejects an invalid object with a message that says what to fix",
		func(ctx SpecContext, mutate func(*httpscalev1alpha1.HTTPScaledObjectSpec), message string) {
			err := f.Client.Create(ctx, object("bad", mutate))
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("host with a scheme", func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{"https://shop.example.com"}
		}, "host must be a lowercase DNS name"),
		Entry("no hosts", func(s *httpscalev1alpha1.HTTPScaledObjectSpec) { s.Hosts = nil }, "hosts"),
		Entry("min above max", func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](5), Max: ptr.To[int32](2)}
		}, "replicas.min must not be greater than replicas.max"),
		Entry("port and portName together", func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.ScaleTargetRef.PortName = ptr.To("http")
		}, "set exactly one of scaleTargetRef.port or scaleTargetRef.portName"),
		Entry("path prefix without a leading slash", func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.PathPrefixes = []httpscalev1alpha1.PathPrefix{"api"}
		}, "path prefix must start with /"),
	)

	It("accepts a valid object next to the rejected ones", func(ctx SpecContext) {
		Expect(f.Client.Create(ctx, object("good", func(*httpscalev1alpha1.HTTPScaledObjectSpec) {}))).To(Succeed())
	})
})
