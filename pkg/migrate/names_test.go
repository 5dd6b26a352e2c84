package migrate

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

const defaultKubectlTimeout = time.Minute

// byAPIVersion prints "apiVersion name" per object.
const byAPIVersion = `-o=jsonpath={range .items[*]}{.apiVersion} {.metadata.name}{"\n"}{end}`

var _ = Describe("kubectl with both HTTPScaledObject CRDs installed", Ordered, func() {
	ctx := context.Background()
	const ns = "names"

	BeforeAll(func() {
		Expect(k8s.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}})).To(Succeed())
		Expect(k8s.Create(ctx, &v1.HTTPScaledObject{
			ObjectMeta: metav1.ObjectMeta{Name: "ours", Namespace: ns},
			Spec: v1.HTTPScaledObjectSpec{Hosts: []v1.Host{"ours.example.com"},
				ScaleTargetRef: v1.ScaleTargetRef{Name: "ours", Service: "ours", Port: ptr.To[int32](80)}},
		})).To(Succeed())
		theirs := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "http.keda.sh/v1alpha1", "kind": "HTTPScaledObject",
			"metadata": map[string]any{"name": "theirs", "namespace": ns},
			"spec": map[string]any{"hosts": []any{"theirs.example.com"},
				"scaleTargetRef": map[string]any{"name": "theirs", "service": "theirs", "port": int64(80)}},
		}}
		Expect(k8s.Create(ctx, theirs)).To(Succeed())
	})

	DescribeTable("resolves each name deterministically and prints no warnings",
		func(resource, want string) {
			out, errOut, err := kubectl("", "get", resource, "-n", ns, byAPIVersion)
			Expect(err).NotTo(HaveOccurred(), errOut)
			Expect(errOut).To(BeEmpty(), "kubectl printed warnings")
			Expect(out).To(Equal(want))
		},
		Entry("short name hso: ours", "hso", "httpscale.dev/v1alpha1 ours\n"),
		Entry("category httpscale: ours only", "httpscale", "httpscale.dev/v1alpha1 ours\n"),
		Entry("qualified plural: ours", "httpscaledobjects.httpscale.dev", "httpscale.dev/v1alpha1 ours\n"),
		Entry("qualified short name: ours", "hso.httpscale.dev", "httpscale.dev/v1alpha1 ours\n"),
		Entry("short name httpso: the add-on's alone", "httpso", "http.keda.sh/v1alpha1 theirs\n"),
		Entry("qualified plural of the add-on: theirs", "httpscaledobjects.http.keda.sh", "http.keda.sh/v1alpha1 theirs\n"),
		// The plain plural is in both groups; kubectl takes the group discovery lists first, and
		// discovery orders CRD groups of equal priority by name: http.keda.sh before httpscale.dev.
		Entry("unqualified plural: the add-on's (use httpscaledobjects.httpscale.dev or hso)", "httpscaledobjects", "http.keda.sh/v1alpha1 theirs\n"),
	)

	It("would resolve a shared short name httpso to the add-on, with a warning: why httpscale does not use it", func() {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		scheme := k8s.Scheme()
		Expect(apiextensionsv1.AddToScheme(scheme)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKey{Name: "httpscaledobjects.httpscale.dev"}, crd)).To(Succeed())
		original := crd.Spec.Names.ShortNames
		Expect(original).To(Equal([]string{"hso"}))
		crd.Spec.Names.ShortNames = []string{"hso", "httpso"}
		Expect(k8s.Update(ctx, crd)).To(Succeed())
		DeferCleanup(func() {
			Expect(k8s.Get(ctx, client.ObjectKey{Name: crd.Name}, crd)).To(Succeed())
			crd.Spec.Names.ShortNames = original
			Expect(k8s.Update(ctx, crd)).To(Succeed())
		})
		Eventually(func(g Gomega) {
			out, errOut, err := kubectl("", "get", "httpso", "-n", ns, byAPIVersion)
			g.Expect(err).NotTo(HaveOccurred(), errOut)
			g.Expect(errOut).To(ContainSubstring(`Warning: short name "httpso" could also match lower priority resource httpscaledobjects.httpscale.dev`))
			g.Expect(out).To(Equal("http.keda.sh/v1alpha1 theirs\n"))
		}).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	})
})
