package migrate

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// peer builds a KEDA HTTP add-on object from a YAML spec.
func peer(t *testing.T, spec string) *unstructured.Unstructured {
	t.Helper()
	var s map[string]any
	if err := yaml.Unmarshal([]byte(spec), &s); err != nil {
		t.Fatalf("test spec: %v", err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": s}}
	u.SetAPIVersion("http.keda.sh/v1alpha1")
	u.SetKind("HTTPScaledObject")
	u.SetName("app")
	u.SetNamespace("ns")
	return u
}

func fields(ws []Warning) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Field)
	}
	return out
}

func TestConvertSpec(t *testing.T) {
	target := v1.ScaleTargetRef{Name: "app", Service: "app", Port: ptr.To[int32](80)}
	const ref = "scaleTargetRef: {name: app, service: app, port: 80}\n"
	for _, tc := range []struct {
		name     string
		spec     string
		want     v1.HTTPScaledObjectSpec
		warnings []string
	}{{
		name: "minimal",
		spec: "hosts: [a.example.com]\n" + ref,
		want: v1.HTTPScaledObjectSpec{Hosts: []v1.Host{"a.example.com"}, ScaleTargetRef: target},
	}, {
		name: "routing fields",
		spec: "hosts: [A.example.com, '*.example.com', 'a.example.com:443', '*']\npathPrefixes: [/api, v1, /api]\n" +
			"headers: [{name: X-Tenant, value: blue}, {name: X-Canary}]\n" + ref,
		want: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{"a.example.com", "*.example.com", "*"},
			PathPrefixes:   []v1.PathPrefix{"/api", "/v1"},
			Headers:        []v1.HeaderMatch{{Name: "X-Tenant", Value: ptr.To("blue")}, {Name: "X-Canary"}},
			ScaleTargetRef: target,
		},
		warnings: []string{"spec.hosts[0]", "spec.hosts[2]", "spec.hosts[2]", "spec.pathPrefixes[1]", "spec.pathPrefixes[2]"},
	}, {
		name: "target by port name, other kind, replicas and scaledown",
		spec: "hosts: [a.example.com]\nscaleTargetRef: {apiVersion: argoproj.io/v1alpha1, kind: Rollout, name: app, service: svc, portName: http}\n" +
			"replicas: {min: 1, max: 7}\nscaledownPeriod: 60\n",
		want: v1.HTTPScaledObjectSpec{
			Hosts: []v1.Host{"a.example.com"},
			ScaleTargetRef: v1.ScaleTargetRef{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "app",
				Service: "svc", PortName: ptr.To("http")},
			Replicas:        &v1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](7)},
			ScaledownPeriod: ptr.To[int32](60),
		},
	}, {
		name: "legacy single host, deployment and targetPendingRequests",
		spec: "host: Old.example.com\ntargetPendingRequests: 5\nscaleTargetRef: {deployment: old, service: old, port: 8080}\n",
		want: v1.HTTPScaledObjectSpec{
			Hosts: []v1.Host{"old.example.com"},
			ScaleTargetRef: v1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: "old", Service: "old",
				Port: ptr.To[int32](8080)},
			ScalingMetric: &v1.ScalingMetric{Concurrency: &v1.ConcurrencyMetric{TargetValue: 5}},
		},
		warnings: []string{"spec.host", "spec.hosts[0]", "spec.scaleTargetRef.deployment", "spec.targetPendingRequests"},
	}, {
		name: "scalingMetric wins over targetPendingRequests; both metrics kept",
		spec: "hosts: [a.example.com]\n" + ref + "targetPendingRequests: 5\n" +
			"scalingMetric: {concurrency: {targetValue: 20}, requestRate: {window: 90s, granularity: 1s}}\n",
		want: v1.HTTPScaledObjectSpec{
			Hosts: []v1.Host{"a.example.com"}, ScaleTargetRef: target,
			ScalingMetric: &v1.ScalingMetric{
				Concurrency: &v1.ConcurrencyMetric{TargetValue: 20},
				RequestRate: &v1.RequestRateMetric{TargetValue: 100, Window: "90s", Granularity: "1s"},
			},
		},
		warnings: []string{"spec.targetPendingRequests", "spec.scalingMetric.requestRate.targetValue", "spec.scalingMetric"},
	}, {
		name: "timeouts: conditionWait is readiness, 0s is dropped",
		spec: "hosts: [a.example.com]\n" + ref + "timeouts: {conditionWait: 2m, responseHeader: 0s, request: 5m}\n",
		want: v1.HTTPScaledObjectSpec{
			Hosts: []v1.Host{"a.example.com"}, ScaleTargetRef: target,
			Timeouts: &v1.Timeouts{Readiness: ptr.To[v1.Duration]("2m"), Request: ptr.To[v1.Duration]("5m")},
		},
		warnings: []string{"spec.timeouts.responseHeader"},
	}, {
		name: "failover becomes fallback; its default timeout is the readiness timeout",
		spec: "hosts: [a.example.com]\n" + ref + "coldStartTimeoutFailoverRef: {service: sorry, portName: http}\n",
		want: v1.HTTPScaledObjectSpec{
			Hosts: []v1.Host{"a.example.com"}, ScaleTargetRef: target,
			Timeouts:  &v1.Timeouts{Readiness: ptr.To[v1.Duration]("30s")},
			ColdStart: &v1.ColdStart{Fallback: &v1.FallbackService{Service: "sorry", PortName: ptr.To("http")}},
		},
	}, {
		name: "failover timeout replaces a different conditionWait",
		spec: "hosts: [a.example.com]\n" + ref + "timeouts: {conditionWait: 1m}\ncoldStartTimeoutFailoverRef: {service: sorry, port: 80, timeoutSeconds: 10}\n",
		want: v1.HTTPScaledObjectSpec{
			Hosts: []v1.Host{"a.example.com"}, ScaleTargetRef: target,
			Timeouts:  &v1.Timeouts{Readiness: ptr.To[v1.Duration]("10s")},
			ColdStart: &v1.ColdStart{Fallback: &v1.FallbackService{Service: "sorry", Port: ptr.To[int32](80)}},
		},
		warnings: []string{"spec.timeouts.conditionWait"},
	}, {
		name: "no equivalent and unknown fields are reported",
		spec: "hosts: [a.example.com]\n" + ref + "initialCooldownPeriod: 30\nfutureField: 1\nreplicas: {min: 0, step: 2}\n",
		want: v1.HTTPScaledObjectSpec{
			Hosts: []v1.Host{"a.example.com"}, ScaleTargetRef: target,
			Replicas: &v1.ReplicaBounds{Min: ptr.To[int32](0)},
		},
		warnings: []string{"spec.futureField", "spec.replicas.step", "spec.initialCooldownPeriod"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, warnings, err := Convert(peer(t, tc.spec), Options{})
			if err != nil {
				t.Fatalf("Convert: %v", err)
			}
			if diff := cmp.Diff(tc.want, got.Spec); diff != "" {
				t.Errorf("spec (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.warnings, fields(warnings)); diff != "" {
				t.Errorf("warned fields (-want +got):\n%s\nwarnings: %v", diff, warnings)
			}
			for _, w := range warnings {
				if w.Object != "ns/app" || w.Message == "" {
					t.Errorf("warning %+v: want object ns/app and a message", w)
				}
			}
		})
	}
}

func TestConvertErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"no hosts", "scaleTargetRef: {name: a, service: a, port: 80}", []string{"spec.hosts: Required value", `or "*" for every host`}},
		{"no target", "hosts: [a.example.com]", []string{"spec.scaleTargetRef: Required value", "{name, service, port}"}},
		{"no workload, service or port", "hosts: [a.example.com]\nscaleTargetRef: {kind: Deployment}", []string{
			"spec.scaleTargetRef.name: Required value", "spec.scaleTargetRef.service: Required value",
			"set exactly one of scaleTargetRef.port or scaleTargetRef.portName"}},
		{"port of the wrong type", "hosts: [a.example.com]\nscaleTargetRef: {name: a, service: a, port: http}", []string{
			"spec.scaleTargetRef.port: Invalid value", "want an integer"}},
		{"bad durations", "hosts: [a]\nscaleTargetRef: {name: a, service: a, port: 80}\ntimeouts: {conditionWait: soon}\n" +
			"scalingMetric: {requestRate: {targetValue: 1, window: -1m}}", []string{
			`spec.timeouts.conditionWait: Invalid value: "soon": must be a duration`,
			`spec.scalingMetric.requestRate.window: Invalid value: "-1m": must be a positive duration`}},
		{"failover without a port", "hosts: [a]\nscaleTargetRef: {name: a, service: a, port: 80}\n" +
			"coldStartTimeoutFailoverRef: {service: b, timeoutSeconds: 0}", []string{
			"spec.coldStartTimeoutFailoverRef.port: Required value", "spec.coldStartTimeoutFailoverRef.timeoutSeconds: Invalid value: 0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Convert(peer(t, tc.spec), Options{})
			if err == nil {
				t.Fatal("Convert accepted an object it cannot convert")
			}
			for _, want := range append(tc.want, "converting ns/app") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestConvertRejectsOtherKinds(t *testing.T) {
	u := peer(t, "hosts: [a]")
	u.SetAPIVersion("http.keda.sh/v1beta1")
	if _, _, err := Convert(u, Options{}); err == nil || !strings.Contains(err.Error(), `want http.keda.sh/v1alpha1 HTTPScaledObject, got apiVersion "http.keda.sh/v1beta1"`) {
		t.Fatalf("got %v", err)
	}
}

func TestConvertMetadata(t *testing.T) {
	u := peer(t, "hosts: [a.example.com]\nscaleTargetRef: {name: a, service: a, port: 80}")
	u.SetLabels(map[string]string{"team": "web"})
	u.SetAnnotations(map[string]string{
		"owner": "me", lastAppliedAnnotation: "{}", peerSkipScaledObject: "true", peerOrphanScaledObject: "true",
		peerAnnotationPrefix + "something-new": "x",
	})
	u.SetFinalizers([]string{"httpscaledobject.http.keda.sh"})
	u.SetResourceVersion("7")
	got, warnings, err := Convert(u, Options{})
	if err != nil {
		t.Fatal(err)
	}
	wantAnn := map[string]string{"owner": "me", v1.AnnotationSkipScaledObject: "true"}
	if diff := cmp.Diff(wantAnn, got.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"team": "web"}, got.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if got.Finalizers != nil || got.ResourceVersion != "" || got.APIVersion != "httpscale.dev/v1alpha1" || got.Kind != "HTTPScaledObject" {
		t.Errorf("metadata carried over or type missing: %+v %+v", got.TypeMeta, got.ObjectMeta)
	}
	wantFields := []string{"metadata.annotations." + peerAnnotationPrefix + "orphan-scaledobject",
		"metadata.annotations." + peerAnnotationPrefix + "skip-scaledobject-creation",
		"metadata.annotations." + peerAnnotationPrefix + "something-new"}
	if diff := cmp.Diff(wantFields, fields(warnings)); diff != "" {
		t.Errorf("warned fields (-want +got):\n%s", diff)
	}

	u.SetAnnotations(nil)
	got, _, err = Convert(u, Options{SkipScaledObject: true})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[v1.AnnotationSkipScaledObject] != "true" {
		t.Errorf("SkipScaledObject did not annotate: %v", got.Annotations)
	}
}

// TestConvertStreamFixtures converts the hand-written fixtures in the add-on's format and compares the
// output with the golden files next to them (regenerate with UPDATE_GOLDEN=1).
func TestConvertStreamFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/peer/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, in := range files {
		t.Run(filepath.Base(in), func(t *testing.T) {
			f, err := os.Open(in)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var out bytes.Buffer
			warnings, err := ConvertStream(f, &out, Options{})
			if err != nil {
				t.Fatalf("ConvertStream: %v", err)
			}
			for _, w := range warnings {
				out.WriteString("# warning: " + w.String() + "\n")
			}
			golden := filepath.Join("testdata", "converted", filepath.Base(in))
			if os.Getenv("UPDATE_GOLDEN") != "" {
				if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("golden file: %v", err)
			}
			if diff := cmp.Diff(string(want), out.String()); diff != "" {
				t.Errorf("output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConvertStreamReportsBadDocumentsAndKeepsGoodOnes(t *testing.T) {
	in := `apiVersion: http.keda.sh/v1alpha1
kind: HTTPScaledObject
metadata: {name: bad, namespace: ns}
spec: {scaleTargetRef: {name: a, service: a, port: 80}}
---
---
apiVersion: http.keda.sh/v1alpha1
kind: HTTPScaledObject
metadata: {name: good, namespace: ns}
spec: {hosts: [a.example.com], scaleTargetRef: {name: a, service: a, port: 80}}
`
	var out bytes.Buffer
	_, err := ConvertStream(strings.NewReader(in), &out, Options{})
	if err == nil || !strings.Contains(err.Error(), "converting ns/bad: spec.hosts: Required value") {
		t.Fatalf("want the bad object's error, got %v", err)
	}
	if !strings.Contains(out.String(), "name: good") || strings.Contains(out.String(), "name: bad") || strings.Contains(out.String(), "---") {
		t.Fatalf("want only the good object written:\n%s", out.String())
	}
	if _, err := ConvertStream(strings.NewReader("a: [b"), &out, Options{}); err == nil || !strings.Contains(err.Error(), "reading document 1") {
		t.Fatalf("want a YAML error naming the document, got %v", err)
	}
}
