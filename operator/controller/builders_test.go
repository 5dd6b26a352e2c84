package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/trigger"
)

func service(typ corev1.ServiceType, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop"}, Spec: corev1.ServiceSpec{Type: typ, Ports: ports}}
}

func TestResolvePort(t *testing.T) {
	ports := []corev1.ServicePort{
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
		{Name: "grpc", Port: 9000, TargetPort: intstr.FromString("grpc"), AppProtocol: ptr.To("kubernetes.io/h2c")},
		{Name: "plain-h2c", Port: 9001, AppProtocol: ptr.To("h2c")},
	}
	cases := []struct {
		name       string
		svc        *corev1.Service
		port       *int32
		portName   *string
		want       routing.Backend
		wantReason string
		wantMsg    string
	}{
		{name: "by number", svc: service("", ports...), port: ptr.To[int32](80),
			want: routing.Backend{Service: "web", Port: 80, PortName: "http", TargetPort: 8080, Protocol: routing.ProtocolHTTP}},
		{name: "by name, named target port, h2c", svc: service("", ports...), portName: ptr.To("grpc"),
			want: routing.Backend{Service: "web", Port: 9000, PortName: "grpc", Protocol: routing.ProtocolH2C}},
		{name: "unset target port is the port", svc: service("", ports...), port: ptr.To[int32](9001),
			want: routing.Backend{Service: "web", Port: 9001, PortName: "plain-h2c", TargetPort: 9001, Protocol: routing.ProtocolH2C}},
		{name: "UDP port does not count", svc: service("", ports...), port: ptr.To[int32](53),
			wantReason: "PortNotFound", wantMsg: "scaleTargetRef: Service web has no TCP port 53; its ports are [53(dns) 80(http) 9000(grpc) 9001(plain-h2c)]"},
		{name: "missing name", svc: service("", ports...), portName: ptr.To("admin"),
			wantReason: "PortNotFound", wantMsg: `has no TCP portName "admin"`},
		{name: "ExternalName", svc: service(corev1.ServiceTypeExternalName), port: ptr.To[int32](80),
			wantReason: "UnsupportedService", wantMsg: "ExternalName"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolvePort(c.svc, c.port, c.portName, "scaleTargetRef")
			if c.wantReason == "" {
				if err != nil {
					t.Fatalf("resolvePort: %v", err)
				}
				if d := cmp.Diff(c.want, got); d != "" {
					t.Errorf("backend (-want +got):\n%s", d)
				}
				return
			}
			var inv *invalidError
			if !errors.As(err, &inv) {
				t.Fatalf("resolvePort error = %v, want an invalidError", err)
			}
			if inv.Reason != c.wantReason || !strings.Contains(inv.Message, c.wantMsg) {
				t.Errorf("got %s %q, want %s containing %q", inv.Reason, inv.Message, c.wantReason, c.wantMsg)
			}
		})
	}
}

func fullObject() *v1.HTTPScaledObject {
	return &v1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "front", Generation: 4},
		Spec: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{"shop.example.com", "*.shop.example.com"},
			PathPrefixes:   []v1.PathPrefix{"/cart"},
			Headers:        []v1.HeaderMatch{{Name: "X-Canary"}, {Name: "X-Tenant", Value: ptr.To("blue")}},
			ScaleTargetRef: v1.ScaleTargetRef{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "front", Service: "web", Port: ptr.To[int32](80)},
			Replicas:       &v1.ReplicaBounds{Min: ptr.To[int32](2), Max: ptr.To[int32](9)},
			ScalingMetric: &v1.ScalingMetric{
				Concurrency: &v1.ConcurrencyMetric{TargetValue: 25},
				RequestRate: &v1.RequestRateMetric{TargetValue: 40, Window: "30s", Granularity: "500ms"},
			},
			ScaledownPeriod: ptr.To[int32](90),
			Timeouts:        &v1.Timeouts{Readiness: ptr.To(v1.Duration("45s")), Request: ptr.To(v1.Duration("2m")), ResponseHeader: ptr.To(v1.Duration("10s"))},
			ColdStart: &v1.ColdStart{
				QueueLimit:  ptr.To[int32](500),
				Fallback:    &v1.FallbackService{Service: "sorry", Port: ptr.To[int32](8080)},
				Placeholder: &v1.Placeholder{StatusCode: 503, Headers: map[string]string{"Retry-After": "5"}, Body: "starting"},
				WaitingPage: &v1.WaitingPage{Enabled: true, RefreshSeconds: 4, HTML: "<p>opening</p>"},
			},
			Forwarding: &v1.Forwarding{ZoneAware: ptr.To(false), ViaService: true},
		},
	}
}

func TestBuildEntry(t *testing.T) {
	target := routing.Backend{Service: "web", Port: 80, PortName: "http", TargetPort: 8080, Protocol: routing.ProtocolH2C}
	fallback := &routing.Backend{Service: "sorry", Port: 8080, TargetPort: 8080, Protocol: routing.ProtocolHTTP}
	got := buildEntry(fullObject(), target, fallback)
	want := routing.Entry{
		Namespace: "shop", Name: "front", Generation: 4,
		Hosts:        []string{"shop.example.com", "*.shop.example.com"},
		PathPrefixes: []string{"/cart"},
		Headers:      []routing.HeaderMatch{{Name: "X-Canary"}, {Name: "X-Tenant", Value: ptr.To("blue")}},
		Service:      "web", Port: 80, PortName: "http", TargetPort: 8080, Protocol: routing.ProtocolH2C,
		Timeouts: routing.Timeouts{Readiness: 45 * time.Second, Request: 2 * time.Minute, ResponseHeader: 10 * time.Second},
		ColdStart: routing.ColdStart{QueueLimit: 500, Fallback: fallback,
			Placeholder: &routing.Placeholder{StatusCode: 503, Headers: map[string]string{"Retry-After": "5"}, Body: "starting"},
			WaitingPage: &routing.WaitingPage{Refresh: 4, HTML: "<p>opening</p>"}},
		ZoneAware: ptr.To(false), ViaService: true,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("entry (-want +got):\n%s", d)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("built entry does not validate: %v", err)
	}
}

func TestTriggerMetadata(t *testing.T) {
	cases := []struct {
		name   string
		metric *v1.ScalingMetric
		want   trigger.Metadata
	}{
		{"default is concurrency 100", nil, trigger.Metadata{App: "shop/front", ConcurrencyTarget: 100}},
		{"concurrency", &v1.ScalingMetric{Concurrency: &v1.ConcurrencyMetric{TargetValue: 7}},
			trigger.Metadata{App: "shop/front", ConcurrencyTarget: 7}},
		{"request rate with default window", &v1.ScalingMetric{RequestRate: &v1.RequestRateMetric{TargetValue: 30}},
			trigger.Metadata{App: "shop/front", RequestRateTarget: 30, Window: time.Minute, Granularity: time.Second}},
		{"both", fullObject().Spec.ScalingMetric,
			trigger.Metadata{App: "shop/front", ConcurrencyTarget: 25, RequestRateTarget: 40, Window: 30 * time.Second, Granularity: 500 * time.Millisecond}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := fullObject()
			h.Spec.ScalingMetric = c.metric
			got := TriggerMetadata(h)
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("metadata (-want +got):\n%s", d)
			}
			// What the scaler parses is what the operator meant.
			parsed, err := trigger.Parse(got.Encode("scaler:9090"))
			if err != nil {
				t.Fatalf("scaler rejects the metadata: %v", err)
			}
			want := c.want
			if want.Window == 0 {
				want.Window, want.Granularity = trigger.DefaultWindow, trigger.DefaultGranularity
			}
			if d := cmp.Diff(want, parsed); d != "" {
				t.Errorf("parsed metadata (-want +got):\n%s", d)
			}
		})
	}
}

func TestBuildScaledObject(t *testing.T) {
	got := buildScaledObject(fullObject(), "scaler:9090", nil)
	want := &kedav1alpha1.ScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: "front", Namespace: "shop", Labels: map[string]string{LabelManagedBy: "httpscale-operator"}},
		Spec: kedav1alpha1.ScaledObjectSpec{
			ScaleTargetRef:  &kedav1alpha1.ScaleTarget{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "front"},
			MinReplicaCount: ptr.To[int32](2),
			MaxReplicaCount: ptr.To[int32](9),
			CooldownPeriod:  ptr.To[int32](90),
			Triggers: []kedav1alpha1.ScaleTriggers{{Type: "external-push", Metadata: map[string]string{
				"scalerAddress": "scaler:9090", "httpScaledObject": "shop/front",
				"concurrencyTarget": "25", "requestRateTarget": "40", "requestRateWindow": "30s", "requestRateGranularity": "500ms",
			}}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ScaledObject (-want +got):\n%s", d)
	}

	bare := fullObject()
	bare.Spec.Replicas, bare.Spec.ScaledownPeriod = nil, nil
	so := buildScaledObject(bare, "scaler:9090", nil)
	if *so.Spec.MinReplicaCount != 0 || *so.Spec.MaxReplicaCount != 100 || *so.Spec.CooldownPeriod != 300 {
		t.Errorf("defaults: min %d max %d cooldown %d, want 0 100 300", *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount, *so.Spec.CooldownPeriod)
	}
}

// Serve mode polls at most every half scaledownPeriod, so that KEDA's first inactive poll (when the
// redirect goes in place) comes well before the scale to zero; Proxy mode keeps KEDA's default.
func TestBuildScaledObjectServePolling(t *testing.T) {
	for _, c := range []struct {
		mode     v1.Mode
		cooldown int32
		want     *int32
	}{
		{v1.ModeProxy, 20, nil},
		{v1.ModeServe, 300, nil},
		{v1.ModeServe, 60, nil},
		{v1.ModeServe, 59, ptr.To[int32](29)},
		{v1.ModeServe, 20, ptr.To[int32](10)},
		{v1.ModeServe, 1, ptr.To[int32](1)},
		{v1.ModeServe, 0, ptr.To[int32](1)},
	} {
		hso := fullObject()
		hso.Spec.Mode, hso.Spec.ScaledownPeriod = c.mode, ptr.To(c.cooldown)
		if got := buildScaledObject(hso, "scaler:9090", nil).Spec.PollingInterval; !cmp.Equal(got, c.want) {
			t.Errorf("%s, scaledownPeriod %d: pollingInterval %v, want %v", c.mode, c.cooldown, ptr.Deref(got, -1), ptr.Deref(c.want, -1))
		}
	}
}

// spec.scaling.triggers follow the interceptor's trigger, as written; the user's map is not shared.
func TestBuildScaledObjectExtraTriggers(t *testing.T) {
	hso := fullObject()
	meta := map[string]string{"url": "http://front.shop.svc/stats", "valueLocation": "rps", "targetValue": "10"}
	hso.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{
		{Type: "metrics-api", Name: "rps", Metadata: meta, MetricType: "AverageValue", AuthenticationRef: &v1.TriggerAuthenticationRef{Name: "stats", Kind: "ClusterTriggerAuthentication"}},
		{Type: "cpu", MetricType: "Utilization"},
	}}
	got := buildScaledObject(hso, "scaler:9090", nil).Spec.Triggers
	if len(got) != 3 || got[0].Type != "external-push" {
		t.Fatalf("triggers %+v: want external-push first, then the two extra ones", got)
	}
	want := []kedav1alpha1.ScaleTriggers{
		{Type: "metrics-api", Name: "rps", Metadata: meta, MetricType: "AverageValue", AuthenticationRef: &kedav1alpha1.AuthenticationRef{Name: "stats", Kind: "ClusterTriggerAuthentication"}},
		{Type: "cpu", Metadata: map[string]string{}, MetricType: "Utilization"},
	}
	if d := cmp.Diff(want, got[1:]); d != "" {
		t.Errorf("extra triggers (-want +got):\n%s", d)
	}
	got[1].Metadata["url"] = "changed"
	if meta["url"] == "changed" {
		t.Error("the ScaledObject shares the object's metadata map")
	}
}

// With the scaler's mutual TLS on, the interceptor's trigger (and only it) asks KEDA for TLS with the
// fleet's ClusterTriggerAuthentication; the user's own triggers keep theirs.
func TestScaledObjectWithScalerTLS(t *testing.T) {
	hso := fullObject()
	hso.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{Type: "cpu", MetricType: "Utilization"}}}
	so := buildScaledObject(hso, "scaler:9090", nil)
	withScalerTLS(so, "")
	if so.Spec.Triggers[0].AuthenticationRef != nil || so.Spec.Triggers[0].Metadata[kedaEnableTLS] != "" {
		t.Fatalf("TLS off: trigger %+v", so.Spec.Triggers[0])
	}
	withScalerTLS(so, "httpscale-scaler-tls")
	first := so.Spec.Triggers[0]
	if first.Metadata[kedaEnableTLS] != "true" || first.Metadata[trigger.KeyScalerAddress] != "scaler:9090" {
		t.Errorf("interceptor trigger metadata %v: want enableTLS=true next to the scaler address", first.Metadata)
	}
	if d := cmp.Diff(&kedav1alpha1.AuthenticationRef{Name: "httpscale-scaler-tls", Kind: "ClusterTriggerAuthentication"}, first.AuthenticationRef); d != "" {
		t.Errorf("authenticationRef (-want +got):\n%s", d)
	}
	if so.Spec.Triggers[1].AuthenticationRef != nil || so.Spec.Triggers[1].Metadata[kedaEnableTLS] != "" {
		t.Errorf("the user's trigger was changed: %+v", so.Spec.Triggers[1])
	}
	// The scaler still reads its metadata (it ignores KEDA's own keys).
	if _, err := trigger.Parse(first.Metadata); err != nil {
		t.Errorf("trigger metadata with enableTLS: %v", err)
	}
}
