package v1alpha1_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// valid returns a minimal object that the API server accepts; each invalid case breaks one thing.
func valid(name string) *v1.HTTPScaledObject {
	return &v1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{"shop.example.com"},
			ScaleTargetRef: v1.ScaleTargetRef{Name: "shop", Service: "shop", Port: ptr.To[int32](8080)},
		},
	}
}

func dur(s string) *v1.Duration { d := v1.Duration(s); return &d }

var _ = Describe("HTTPScaledObject admission", func() {
	ctx := context.Background()

	DescribeTable("rejects an invalid object with a message that says what to fix",
		func(mutate func(*v1.HTTPScaledObject), field, message string) {
			obj := valid("invalid")
			mutate(obj)
			err := k8s.Create(ctx, obj)
			Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
			Expect(err.Error()).To(ContainSubstring(field))
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("hosts missing", func(o *v1.HTTPScaledObject) { o.Spec.Hosts = nil },
			"spec.hosts", "Required value"),
		Entry("hosts empty", func(o *v1.HTTPScaledObject) { o.Spec.Hosts = []v1.Host{} },
			"spec", "hosts needs at least one host"),
		Entry("host with a scheme", func(o *v1.HTTPScaledObject) { o.Spec.Hosts = []v1.Host{"https://shop.example.com"} },
			"spec.hosts[0]", "host must be a lowercase DNS name"),
		Entry("host with a port", func(o *v1.HTTPScaledObject) { o.Spec.Hosts = []v1.Host{"shop.example.com:8080"} },
			"spec.hosts[0]", "no scheme, port, path"),
		Entry("host with upper-case letters", func(o *v1.HTTPScaledObject) { o.Spec.Hosts = []v1.Host{"Shop.example.com"} },
			"spec.hosts[0]", "host must be a lowercase DNS name"),
		Entry("wildcard not on the leftmost label", func(o *v1.HTTPScaledObject) { o.Spec.Hosts = []v1.Host{"shop.*.com"} },
			"spec.hosts[0]", "a wildcard on the leftmost label"),
		Entry("the same host twice", func(o *v1.HTTPScaledObject) { o.Spec.Hosts = []v1.Host{"a.example.com", "a.example.com"} },
			"spec.hosts[1]", "Duplicate value"),
		Entry("path prefix without a leading slash", func(o *v1.HTTPScaledObject) { o.Spec.PathPrefixes = []v1.PathPrefix{"api"} },
			"spec.pathPrefixes[0]", "path prefix must start with /"),
		Entry("path prefix with a query", func(o *v1.HTTPScaledObject) { o.Spec.PathPrefixes = []v1.PathPrefix{"/api?v=1"} },
			"spec.pathPrefixes[0]", "no query (?)"),
		Entry("header name that is not an HTTP token", func(o *v1.HTTPScaledObject) {
			o.Spec.Headers = []v1.HeaderMatch{{Name: "X Tenant"}}
		}, "spec.headers[0].name", "header name must be a non-empty HTTP token"),
		Entry("both port and portName", func(o *v1.HTTPScaledObject) { o.Spec.ScaleTargetRef.PortName = ptr.To("http") },
			"spec.scaleTargetRef", "set exactly one of scaleTargetRef.port or scaleTargetRef.portName"),
		Entry("neither port nor portName", func(o *v1.HTTPScaledObject) { o.Spec.ScaleTargetRef.Port = nil },
			"spec.scaleTargetRef", "set exactly one of scaleTargetRef.port or scaleTargetRef.portName"),
		Entry("empty workload name", func(o *v1.HTTPScaledObject) { o.Spec.ScaleTargetRef.Name = "" },
			"spec.scaleTargetRef.name", "scaleTargetRef.name must be the name of the workload to scale"),
		Entry("empty service name", func(o *v1.HTTPScaledObject) { o.Spec.ScaleTargetRef.Service = "" },
			"spec.scaleTargetRef.service", "scaleTargetRef.service must be the name of the app's Service"),
		Entry("port out of range", func(o *v1.HTTPScaledObject) { o.Spec.ScaleTargetRef.Port = ptr.To[int32](70000) },
			"spec.scaleTargetRef.port", "less than or equal to 65535"),
		Entry("min greater than max", func(o *v1.HTTPScaledObject) {
			o.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](5), Max: ptr.To[int32](2)}
		}, "spec", "replicas.min must not be greater than replicas.max"),
		Entry("no scaling metric", func(o *v1.HTTPScaledObject) { o.Spec.ScalingMetric = &v1.ScalingMetric{} },
			"spec.scalingMetric", "scalingMetric needs at least one of concurrency or requestRate"),
		Entry("request-rate granularity longer than its window", func(o *v1.HTTPScaledObject) {
			o.Spec.ScalingMetric = &v1.ScalingMetric{RequestRate: &v1.RequestRateMetric{TargetValue: 10, Window: "10s", Granularity: "1m"}}
		}, "spec.scalingMetric.requestRate", "granularity must not be longer than requestRate.window"),
		Entry("zero readiness timeout", func(o *v1.HTTPScaledObject) { o.Spec.Timeouts = &v1.Timeouts{Readiness: dur("0s")} },
			"spec.timeouts.readiness", "must be a positive duration"),
		Entry("negative request timeout", func(o *v1.HTTPScaledObject) { o.Spec.Timeouts = &v1.Timeouts{Request: dur("-5s")} },
			"spec.timeouts.request", "must be a positive duration"),
		Entry("duration that is not a Go duration", func(o *v1.HTTPScaledObject) {
			o.Spec.Timeouts = &v1.Timeouts{ResponseHeader: dur("5 minutes")}
		}, "spec.timeouts.responseHeader", "such as 500ms, 30s, 2m"),
		Entry("queue limit of zero", func(o *v1.HTTPScaledObject) {
			o.Spec.ColdStart = &v1.ColdStart{QueueLimit: ptr.To[int32](0)}
		}, "spec.coldStart.queueLimit", "greater than or equal to 1"),
		Entry("fallback with both port and portName", func(o *v1.HTTPScaledObject) {
			o.Spec.ColdStart = &v1.ColdStart{Fallback: &v1.FallbackService{Service: "sorry", Port: ptr.To[int32](80), PortName: ptr.To("http")}}
		}, "spec.coldStart.fallback", "set exactly one of fallback.port or fallback.portName"),
		Entry("placeholder status code out of range", func(o *v1.HTTPScaledObject) {
			o.Spec.ColdStart = &v1.ColdStart{Placeholder: &v1.Placeholder{StatusCode: 99}}
		}, "spec.coldStart.placeholder.statusCode", "greater than or equal to 200"),
		Entry("an unknown mode", func(o *v1.HTTPScaledObject) { o.Spec.Mode = "Direct" },
			"spec.mode", `supported values: "Proxy", "Serve"`),
		Entry("Serve mode at min 0 without a trigger that sees warm traffic", func(o *v1.HTTPScaledObject) { o.Spec.Mode = v1.ModeServe },
			"spec", "add spec.scaling.triggers that measure the app's traffic"),
		Entry("Serve mode at min 0 with an empty trigger list", func(o *v1.HTTPScaledObject) {
			o.Spec.Mode = v1.ModeServe
			o.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{}}
		}, "spec", "or set replicas.min to at least 1"),
		Entry("Serve mode forwarding via the Service", func(o *v1.HTTPScaledObject) {
			o.Spec.Mode = v1.ModeServe
			o.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1)}
			o.Spec.Forwarding = &v1.Forwarding{ViaService: true}
		}, "spec", "mode Serve cannot be combined with forwarding.viaService"),
		Entry("a trigger type that is not a scaler name", func(o *v1.HTTPScaledObject) {
			o.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{Type: "Prometheus Query"}}}
		}, "spec.scaling.triggers[0].type", "trigger type must be a KEDA scaler type"),
		Entry("a trigger metric type KEDA does not know", func(o *v1.HTTPScaledObject) {
			o.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{Type: "cpu", MetricType: "Average"}}}
		}, "spec.scaling.triggers[0].metricType", "supported values"),
		Entry("a trigger authentication of another kind", func(o *v1.HTTPScaledObject) {
			o.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{Type: "prometheus", AuthenticationRef: &v1.TriggerAuthenticationRef{Name: "a", Kind: "Secret"}}}}
		}, "spec.scaling.triggers[0].authenticationRef.kind", "supported values"),
		Entry("ignored path without a leading slash", func(o *v1.HTTPScaledObject) { o.Spec.IgnoredPaths = []v1.PathPrefix{"healthz"} },
			"spec.ignoredPaths[0]", "path prefix must start with /"),
		Entry("static route with a response and a service", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/ping", Response: &v1.StaticResponse{}, Service: &v1.StaticService{Name: "ping", Port: 80}}}
		}, "spec.staticRoutes[0]", "needs exactly one of response (answered by the interceptor) or service"),
		Entry("static route with neither", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/ping"}}
		}, "spec.staticRoutes[0]", "needs exactly one of response"),
		Entry("static route service that is not a Service name", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/ping", Service: &v1.StaticService{Name: "Ping", Port: 80}}}
		}, "spec.staticRoutes[0].service.name", "must be the name of a Service"),
		Entry("static response status out of range", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/ping", Response: &v1.StaticResponse{StatusCode: 99}}}
		}, "spec.staticRoutes[0].response.statusCode", "greater than or equal to 200"),
		Entry("the same static route twice", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/ping", Response: &v1.StaticResponse{}}, {PathPrefix: "/ping", Response: &v1.StaticResponse{}}}
		}, "spec.staticRoutes[1]", "Duplicate value"),
		// Every free-form field has a length limit (docs/security.md: one object cannot hurt the others).
		Entry("static response header value too long", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/ping", Response: &v1.StaticResponse{Headers: map[string]string{"X-A": strings.Repeat("a", 4097)}}}}
		}, "spec.staticRoutes[0].response.headers", "static response header values are at most 4096 characters"),
		Entry("placeholder header value too long", func(o *v1.HTTPScaledObject) {
			o.Spec.ColdStart = &v1.ColdStart{Placeholder: &v1.Placeholder{Headers: map[string]string{"X-A": strings.Repeat("a", 4097)}}}
		}, "spec.coldStart.placeholder.headers", "placeholder header values are at most 4096 characters"),
		Entry("trigger metadata value too long", func(o *v1.HTTPScaledObject) {
			o.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{Type: "prometheus", Metadata: map[string]string{"query": strings.Repeat("a", 4097)}}}}
		}, "spec.scaling.triggers[0].metadata", "trigger metadata keys are at most 253 characters and values at most 4096"),
		Entry("fleet that is not a DNS label", func(o *v1.HTTPScaledObject) { o.Spec.Fleet = "Team_A" },
			"spec.fleet", "should match"),
		Entry("fleet longer than a release's names allow", func(o *v1.HTTPScaledObject) { o.Spec.Fleet = strings.Repeat("a", 31) },
			"spec.fleet", "may not be more than 30"),
		Entry("waiting page html over 16384 characters", func(o *v1.HTTPScaledObject) {
			o.Spec.ColdStart = &v1.ColdStart{WaitingPage: &v1.WaitingPage{Enabled: true, HTML: strings.Repeat("é", 16385)}}
		}, "spec.coldStart.waitingPage.html", "keep the page to 16384 characters at most"),
		Entry("waiting page refresh negative", func(o *v1.HTTPScaledObject) {
			o.Spec.ColdStart = &v1.ColdStart{WaitingPage: &v1.WaitingPage{Enabled: true, RefreshSeconds: -1}}
		}, "spec.coldStart.waitingPage.refreshSeconds", "greater than or equal to 1"),
	)

	It("defaults the mode to Proxy and accepts Serve with an extra trigger or with replicas.min of 1", func() {
		obj := valid("proxy-default")
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		got := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.Mode).To(Equal(v1.ModeProxy))

		withTrigger := valid("serve-trigger")
		withTrigger.Spec.Mode = v1.ModeServe
		withTrigger.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{
			Type: "metrics-api", Name: "rps", MetricType: "AverageValue",
			Metadata:          map[string]string{"url": "http://shop.default.svc/stats", "valueLocation": "rps", "targetValue": "10"},
			AuthenticationRef: &v1.TriggerAuthenticationRef{Name: "stats"},
		}}}
		Expect(k8s.Create(ctx, withTrigger)).To(Succeed())
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(withTrigger), got)).To(Succeed())
		Expect(got.Spec.Scaling).To(Equal(withTrigger.Spec.Scaling))

		warm := valid("serve-min1")
		warm.Spec.Mode = v1.ModeServe
		warm.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1)}
		Expect(k8s.Create(ctx, warm)).To(Succeed())
	})

	It("accepts ignored paths and static routes and defaults a static response to 200", func() {
		obj := valid("static")
		obj.Spec.IgnoredPaths = []v1.PathPrefix{"/healthz"}
		obj.Spec.StaticRoutes = []v1.StaticRoute{
			{PathPrefix: "/ping", Response: &v1.StaticResponse{Body: "pong"}},
			{PathPrefix: "/status", Service: &v1.StaticService{Name: "status", Port: 8080}},
		}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		got := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.IgnoredPaths).To(Equal(obj.Spec.IgnoredPaths))
		Expect(got.Spec.StaticRoutes[0].Response).To(Equal(&v1.StaticResponse{StatusCode: 200, Body: "pong"}))
		Expect(got.Spec.StaticRoutes[1].Service).To(Equal(&v1.StaticService{Name: "status", Port: 8080}))
	})

	It("accepts a waiting page of 16384 characters and defaults its refresh to 2 s", func() {
		obj := valid("waiting-page")
		obj.Spec.ColdStart = &v1.ColdStart{WaitingPage: &v1.WaitingPage{Enabled: true, HTML: strings.Repeat("é", 16384)}}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		got := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.ColdStart.WaitingPage.RefreshSeconds).To(Equal(int32(2)))
		Expect(got.Spec.ColdStart.WaitingPage.HTML).To(HaveLen(2 * 16384))
	})

	It("accepts a minimal object and fills in every default", func() {
		obj := valid("minimal")
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		got := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.ScaleTargetRef.APIVersion).To(Equal("apps/v1"))
		Expect(got.Spec.ScaleTargetRef.Kind).To(Equal("Deployment"))
		Expect(got.Spec.Replicas).To(Equal(&v1.ReplicaBounds{Min: ptr.To[int32](0), Max: ptr.To[int32](100)}))
		Expect(got.Spec.ScalingMetric).To(Equal(&v1.ScalingMetric{Concurrency: &v1.ConcurrencyMetric{TargetValue: 100}}))
		Expect(got.Spec.ScaledownPeriod).To(Equal(ptr.To[int32](300)))
	})

	It("accepts request rate alone and defaults its window and granularity", func() {
		obj := valid("rate")
		obj.Spec.ScalingMetric = &v1.ScalingMetric{RequestRate: &v1.RequestRateMetric{TargetValue: 50}}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		got := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.ScalingMetric).To(Equal(&v1.ScalingMetric{
			RequestRate: &v1.RequestRateMetric{TargetValue: 50, Window: "1m", Granularity: "1s"},
		}))
	})

	It("accepts wildcard and catch-all hosts, header matches and every optional block", func() {
		obj := valid("full")
		obj.Spec.Hosts = []v1.Host{"*.example.com", "*", "api.example.com"}
		obj.Spec.PathPrefixes = []v1.PathPrefix{"/", "/api/v1"}
		obj.Spec.Headers = []v1.HeaderMatch{{Name: "X-Tenant", Value: ptr.To("blue")}, {Name: "X-Canary"}}
		obj.Spec.Fleet = "zone-a"
		obj.Spec.ScaleTargetRef = v1.ScaleTargetRef{APIVersion: "argoproj.io/v1alpha1", Kind: "Rollout", Name: "shop", Service: "shop", PortName: ptr.To("http")}
		obj.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](1)}
		obj.Spec.ScalingMetric = &v1.ScalingMetric{
			Concurrency: &v1.ConcurrencyMetric{TargetValue: 20},
			RequestRate: &v1.RequestRateMetric{TargetValue: 100, Window: "2m", Granularity: "2m"},
		}
		obj.Spec.Timeouts = &v1.Timeouts{Readiness: dur("2m"), Request: dur("1h30m"), ResponseHeader: dur("500ms")}
		obj.Spec.ColdStart = &v1.ColdStart{
			QueueLimit:  ptr.To[int32](1),
			Fallback:    &v1.FallbackService{Service: "sorry", Port: ptr.To[int32](80)},
			Placeholder: &v1.Placeholder{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/html"}, Body: "<p>waking up</p>"},
		}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		got := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.Hosts).To(Equal(obj.Spec.Hosts))
		Expect(got.Spec.ColdStart.Placeholder.StatusCode).To(Equal(int32(200)))
	})

	It("rejects an update that breaks a rule and keeps the stored object", func() {
		obj := valid("update")
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		obj.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](3), Max: ptr.To[int32](1)}
		err := k8s.Update(ctx, obj)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
		got := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.Replicas.Max).To(Equal(ptr.To[int32](100)))
	})
})
