package charts_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/testenv"
)

var (
	chartDir = filepath.Join(testenv.RepoRoot(), "charts", "httpscale")
	scheme   = runtime.NewScheme()
	// strict rejects unknown and duplicate fields, so a mistyped field in a template fails the test
	// instead of being dropped silently by the API server.
	strict = serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, kedav1alpha1.AddToScheme, httpscalev1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
}

// tb is what the helpers need from testing.T and from GinkgoT().
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	TempDir() string
}

var helmBin struct {
	once sync.Once
	path string
	err  error
}

// helm returns the helm binary: $HELM when set, else the one hack/tools.sh builds and caches.
func helm(t tb) string {
	t.Helper()
	helmBin.once.Do(func() {
		if p := os.Getenv("HELM"); p != "" {
			helmBin.path = p
			return
		}
		cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "tools.sh"), "helm")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Run(); err != nil {
			helmBin.err = fmt.Errorf("building helm with hack/tools.sh helm: %w", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		helmBin.path = filepath.Join(lines[len(lines)-1], "helm")
	})
	if helmBin.err != nil {
		t.Fatal(helmBin.err)
	}
	return helmBin.path
}

// runHelm runs helm with args and returns stdout; stderr is part of the error.
func runHelm(t tb, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// manifests is a rendered chart, decoded.
type manifests struct {
	objs []client.Object
}

// render runs `helm template` for release "httpscale" in namespace ns with extra args (-f, --set).
func render(t testing.TB, ns string, args ...string) manifests {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", "httpscale", chartDir, "--namespace", ns}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(strings.NewReader(out))
	if err != nil {
		t.Fatalf("decoding helm template output: %v", err)
	}
	return manifests{objs: objs}
}

// decodeAll decodes a multi-document YAML stream: registered kinds strictly into their Go types, others
// (CRDs, cert-manager) into unstructured objects.
func decodeAll(r io.Reader) ([]client.Object, error) {
	var objs []client.Object
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%w in:\n%s", err, doc)
		}
		if s := strings.TrimSpace(string(js)); s == "null" || s == "" {
			continue
		}
		obj, _, err := strict.Decode(js, nil, nil)
		if runtime.IsNotRegisteredError(err) {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				return nil, fmt.Errorf("%w in:\n%s", err, doc)
			}
			objs = append(objs, u)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w in:\n%s", err, doc)
		}
		co, ok := obj.(client.Object)
		if !ok {
			return nil, fmt.Errorf("%T is not an object", obj)
		}
		objs = append(objs, co)
	}
}

func kindOf(o client.Object) string {
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	gvks, _, _ := scheme.ObjectKinds(o)
	if len(gvks) > 0 {
		return gvks[0].Kind
	}
	return fmt.Sprintf("%T", o)
}

// keys lists every object as "Kind namespace/name", sorted.
func (m manifests) keys() []string {
	var ks []string
	for _, o := range m.objs {
		ks = append(ks, fmt.Sprintf("%s %s/%s", kindOf(o), o.GetNamespace(), o.GetName()))
	}
	slices.Sort(ks)
	return ks
}

// find returns the object of this kind and name, or nil.
func (m manifests) find(kind, name string) client.Object {
	for _, o := range m.objs {
		if kindOf(o) == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// get returns the object of type T and name, failing the test when it is missing.
func get[T client.Object](t testing.TB, m manifests, kind, name string) T {
	t.Helper()
	o := m.find(kind, name)
	if o == nil {
		t.Fatalf("%s %s not rendered; rendered: %v", kind, name, m.keys())
	}
	typed, ok := o.(T)
	if !ok {
		t.Fatalf("%s %s decoded as %T", kind, name, o)
	}
	return typed
}

func ofType[T client.Object](m manifests) []T {
	var out []T
	for _, o := range m.objs {
		if typed, ok := o.(T); ok {
			out = append(out, typed)
		}
	}
	return out
}

func container(t testing.TB, d *appsv1.Deployment, name string) corev1.Container {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("deployment %s has no container %s", d.Name, name)
	return corev1.Container{}
}

// envVar returns the container's variable name, failing the test when it is missing.
func envVar(t testing.TB, c corev1.Container, name string) corev1.EnvVar {
	t.Helper()
	for _, e := range c.Env {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("container %s has no env %s; env: %v", c.Name, name, c.Env)
	return corev1.EnvVar{}
}

func hasArg(c corev1.Container, arg string) bool { return slices.Contains(c.Args, arg) }

func port(c corev1.Container, name string) (corev1.ContainerPort, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return corev1.ContainerPort{}, false
}

// generatedRoles reads config/rbac/<component>/role.yaml, the controller-gen output of the component's
// RBAC markers: the rules the chart must grant, no more and no less.
func generatedRoles(t tb, component string) []client.Object {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "config", "rbac", component, "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := decodeAll(f)
	if err != nil {
		t.Fatalf("decoding generated RBAC of %s: %v", component, err)
	}
	return objs
}

func rules(o client.Object) []rbacv1.PolicyRule {
	switch r := o.(type) {
	case *rbacv1.ClusterRole:
		return r.Rules
	case *rbacv1.Role:
		return r.Rules
	}
	return nil
}
