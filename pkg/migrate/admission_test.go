package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/webhook"
)

// documents decodes every object in a YAML stream, List items expanded.
func documents(data []byte) []*unstructured.Unstructured {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var raw map[string]any
		err := dec.Decode(&raw)
		if errors.Is(err, io.EOF) {
			return out
		}
		Expect(err).NotTo(HaveOccurred())
		if len(raw) > 0 {
			out = append(out, expand(&unstructured.Unstructured{Object: raw})...)
		}
	}
}

// admit converts src and creates every converted object in namespace ns on the real API server (the
// CRD's schema and CEL rules) after the operator webhook's own checks; it returns how many it created.
func admit(ctx context.Context, src []byte, ns string) int {
	var out bytes.Buffer
	_, err := ConvertStream(bytes.NewReader(src), &out, Options{})
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, u := range documents(out.Bytes()) {
		if u.GetAPIVersion() != v1.GroupVersion.String() {
			continue
		}
		data, err := yaml.Marshal(u.Object)
		Expect(err).NotTo(HaveOccurred())
		obj := &v1.HTTPScaledObject{}
		Expect(yaml.UnmarshalStrict(data, obj)).To(Succeed(), "converted object has fields the API does not know")
		errs, _ := webhook.Validate(&obj.Spec, time.UTC)
		Expect(errs).To(BeEmpty(), "the operator's webhook rejects %s", obj.Name)
		obj.Namespace = ns
		Expect(k8s.Create(ctx, obj)).To(Succeed(), "the API server rejects %s", obj.Name)
		n++
	}
	return n
}

func createNamespace(ctx context.Context, name string) {
	Expect(k8s.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}}})).To(Succeed())
}

var _ = Describe("converted objects", func() {
	ctx := context.Background()

	It("pass admission on a real API server and the operator's webhook checks (fixtures in the add-on's format)", func() {
		files, err := filepath.Glob(filepath.Join("testdata", "peer", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).NotTo(BeEmpty())
		for i, f := range files {
			src, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			ns := fmt.Sprintf("fixture-%d", i)
			createNamespace(ctx, ns)
			Expect(admit(ctx, src, ns)).To(BeNumerically(">", 0), "%s holds no HTTPScaledObject", f)
		}
	})

	It("pass admission for the add-on's own examples", func() {
		if peerDir == "" {
			Skip("the KEDA HTTP add-on's module (" + peerModule + ") is not in the module cache, so its examples cannot " +
				"be read; `go mod download " + peerModule + "@<version>` from any directory adds them")
		}
		files, _ := filepath.Glob(filepath.Join(peerDir, "examples", "*", "httpscaledobject*.yaml"))
		more, _ := filepath.Glob(filepath.Join(peerDir, "examples", "httpscaledobject*.yaml"))
		files = append(files, more...)
		Expect(files).NotTo(BeEmpty(), "no examples under %s", peerDir)
		createNamespace(ctx, "peer-examples")
		for _, f := range files {
			src, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			for _, u := range documents(src) {
				if !IsPeer(u) || u.GroupVersionKind().Version != PeerVersion {
					continue
				}
				if _, _, err := Convert(u, Options{}); err != nil {
					// Early examples use fields the add-on itself no longer accepts; say which.
					GinkgoWriter.Printf("%s: not convertible: %v\n", f, err)
					continue
				}
				u.SetName(strings.ToLower(filepath.Base(filepath.Dir(f))) + "-" + u.GetName())
				data, err := yaml.Marshal(u.Object)
				Expect(err).NotTo(HaveOccurred())
				admit(ctx, data, "peer-examples")
			}
		}
	})
})

var _ = Describe("the documented migration: kubectl get | migrate | kubectl apply", func() {
	ctx := context.Background()

	It("moves the add-on's stored objects to httpscale's, routing only while the add-on still scales", func() {
		const ns = "pipeline"
		createNamespace(ctx, ns)
		for _, f := range []string{"minimal.yaml", "full.yaml", "legacy.yaml"} {
			src, err := os.ReadFile(filepath.Join("testdata", "peer", f))
			Expect(err).NotTo(HaveOccurred())
			for _, u := range documents(src) {
				if IsPeer(u) {
					u.SetNamespace(ns)
					Expect(k8s.Create(ctx, u)).To(Succeed())
				}
			}
		}
		stored, errOut, err := kubectl("", "get", "httpscaledobjects.http.keda.sh", "-n", ns, "-o", "yaml")
		Expect(err).NotTo(HaveOccurred(), errOut)

		var converted bytes.Buffer
		warnings, err := ConvertStream(strings.NewReader(stored), &converted, Options{SkipScaledObject: true})
		Expect(err).NotTo(HaveOccurred())
		Expect(warnings).NotTo(BeEmpty(), "full.yaml and legacy.yaml have settings without an exact equivalent")

		out, errOut, err := kubectl(converted.String(), "apply", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), errOut)
		Expect(errOut).To(BeEmpty())
		Expect(out).To(Equal("httpscaledobject.httpscale.dev/hello created\n" +
			"httpscaledobject.httpscale.dev/legacy created\nhttpscaledobject.httpscale.dev/shop created\n"))

		out, errOut, err = kubectl("", "get", "hso", "-n", ns,
			`-o=jsonpath={range .items[*]}{.metadata.name} {.spec.hosts} {.metadata.annotations.httpscale\.dev/skip-scaledobject}{"\n"}{end}`)
		Expect(err).NotTo(HaveOccurred(), errOut)
		Expect(out).To(Equal(`hello ["hello.example.com"] true` + "\n" +
			`legacy ["legacy.example.com"] true` + "\n" +
			`shop ["shop.example.com","*.shop.example.com"] true` + "\n"))

		// The add-on's objects are untouched; httpso still names them.
		out, _, err = kubectl("", "get", "httpso", "-n", ns, "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(out).To(Equal("httpscaledobject.http.keda.sh/hello\nhttpscaledobject.http.keda.sh/legacy\nhttpscaledobject.http.keda.sh/shop\n"))
	})
})
