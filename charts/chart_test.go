package charts_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"sigs.k8s.io/yaml"

	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/trigger"
)

var components = []string{"operator", "interceptor", "scaler"}

func TestLintStrict(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci values files: %v", err)
	}
	cases := map[string][]string{"defaults": nil}
	for _, f := range files {
		cases[filepath.Base(f)] = []string{"--values", f}
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			out, err := runHelm(t, append([]string{"lint", "--strict", chartDir}, args...)...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
				t.Fatalf("lint reported problems:\n%s", out)
			}
		})
	}
}

// The schema (and a few template checks) stop a typo or a port clash in a values file from being
// ignored.
func TestRejectsInvalidValues(t *testing.T) {
	for _, tc := range []struct{ set, want string }{
		{"operator.replica=3", "additional properties 'replica' not allowed"},
		{"interceptor.drain.delaySeconds=-1", "/interceptor/drain/delaySeconds"},
		{"webhook.failurePolicy=Sometimes", "/webhook/failurePolicy"},
		{"interceptor.service.type=ExternalName", "/interceptor/service/type"},
		{"interceptor.autoscaling.concurrencyTarget=0", "/interceptor/autoscaling/concurrencyTarget"},
		{"operator.routingTableDebounce=soon", "/operator/routingTableDebounce"},
		{"interceptor.probePort=9090", "must be three different ports"},
		{"scaler.metricsPort=9090", "must be three different ports"},
		{"webhook.port=8081", "webhook.port must not be 8080 or 8081"},
		{"kubeApi.qps=0", "/kubeApi/qps"},
		{"kubeApi.qps=-2", "/kubeApi/qps"},
		{"kubeApi.burst=0", "/kubeApi/burst"},
		{"scaler.address=httpscale-scaler", "/scaler/address"},
		{"scaler.service.clusterIP=not-an-ip", "/scaler/service/clusterIP"},
		{"interceptor.perAppMetrics=all", "/interceptor/perAppMetrics"},
		{"scaler.drainDelaySeconds=-1", "/scaler/drainDelaySeconds"},
		{"interceptor.tracing.protocol=http/json", "/interceptor/tracing/protocol"},
		{"interceptor.tracing.sampler=jaeger_remote", "/interceptor/tracing/sampler"},
		{"interceptor.tracing.samplerArg=1.5", "/interceptor/tracing/samplerArg"},
		{"interceptor.tracing.endpoint=collector:4317", "/interceptor/tracing/endpoint"},
		{"interceptor.tls.port=9090", "interceptor.tls.port must differ"},
		{"interceptor.tls.enabled=false,interceptor.tls.defaultSecret=fleet-tls", "defaultSecret needs interceptor.tls.enabled=true"},
		{"interceptor.tls.defaultSecret=Fleet_TLS", "/interceptor/tls/defaultSecret"},
		{"interceptor.trustedProxies={ingress-nginx}", "/interceptor/trustedProxies/0"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := runHelm(t, "template", "httpscale", chartDir, "--set", tc.set)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template --set %s: got error %v, want one mentioning %q", tc.set, err, tc.want)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	const ns = "httpscale-system"
	m := render(t, ns)
	checkConsistent(t, m, ns)

	want := []string{
		"ClusterRole /httpscale-interceptor", "ClusterRole /httpscale-operator",
		"ClusterRoleBinding /httpscale-interceptor", "ClusterRoleBinding /httpscale-operator",
		"Deployment httpscale-system/httpscale-interceptor", "Deployment httpscale-system/httpscale-operator", "Deployment httpscale-system/httpscale-scaler",
		"MutatingWebhookConfiguration /httpscale-operator-webhook",
		"NetworkPolicy httpscale-system/httpscale-interceptor", "NetworkPolicy httpscale-system/httpscale-operator", "NetworkPolicy httpscale-system/httpscale-scaler",
		"PodDisruptionBudget httpscale-system/httpscale-interceptor", "PodDisruptionBudget httpscale-system/httpscale-operator",
		"PodDisruptionBudget httpscale-system/httpscale-scaler",
		"Role httpscale-system/httpscale-interceptor", "Role httpscale-system/httpscale-operator", "Role httpscale-system/httpscale-scaler",
		"RoleBinding httpscale-system/httpscale-interceptor", "RoleBinding httpscale-system/httpscale-operator", "RoleBinding httpscale-system/httpscale-scaler",
		"Secret httpscale-system/httpscale-operator-webhook-tls", "Secret httpscale-system/httpscale-session-keys",
		"Service httpscale-system/httpscale-interceptor", "Service httpscale-system/httpscale-interceptor-admin",
		"Service httpscale-system/httpscale-operator-webhook", "Service httpscale-system/httpscale-scaler",
		"ServiceAccount httpscale-system/httpscale-interceptor", "ServiceAccount httpscale-system/httpscale-operator", "ServiceAccount httpscale-system/httpscale-scaler",
		"ValidatingWebhookConfiguration /httpscale-operator-webhook",
	}
	if diff := cmp.Diff(want, m.keys()); diff != "" {
		t.Errorf("rendered objects (-want +got):\n%s", diff)
	}

	// No client-side throttling by default, for every component (client-go's 5 requests/s otherwise).
	for _, c := range components {
		cc := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-"+c), c)
		if !hasArg(cc, "--kube-api-qps=-1") || !hasArg(cc, "--kube-api-burst=100") {
			t.Errorf("%s args %v lack --kube-api-qps=-1 --kube-api-burst=100", c, cc.Args)
		}
	}

	op := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-operator")
	if got := *op.Spec.Replicas; got != 2 {
		t.Errorf("operator replicas = %d, want 2", got)
	}
	oc := container(t, op, "operator")
	for _, arg := range []string{
		"--leader-elect=true",
		"--health-probe-bind-address=:8081",
		"--metrics-bind-address=:8080",
		"--scaler-address=httpscale-scaler.httpscale-system.svc.cluster.local:9090",
		"--interceptor-admin-selector=kubernetes.io/service-name=httpscale-interceptor-admin",
		"--interceptor-admin-port-name=admin",
	} {
		if !hasArg(oc, arg) {
			t.Errorf("operator args %v lack %s", oc.Args, arg)
		}
	}
	if p, ok := port(oc, "webhook"); !ok || p.ContainerPort != 9443 {
		t.Errorf("operator webhook port = %+v, want 9443", p)
	}
	for _, arg := range []string{"--webhook-bind-address=:9443", "--webhook-self-managed-certs=true", "--webhook-configuration-name=httpscale-operator-webhook", "--webhook-secret-name=httpscale-operator-webhook-tls", "--webhook-service-name=httpscale-operator-webhook"} {
		if !hasArg(oc, arg) {
			t.Errorf("operator args %v lack %s", oc.Args, arg)
		}
	}
	chart, err := os.ReadFile(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	appVersion := regexp.MustCompile(`(?m)^appVersion: "(.*)"$`).FindStringSubmatch(string(chart))
	if got := oc.Image; appVersion == nil || got != "ghcr.io/httpscale/operator:"+appVersion[1] {
		t.Errorf("operator image = %s, want the chart's appVersion tag", got)
	}
	secret := get[*corev1.Secret](t, m, "Secret", "httpscale-operator-webhook-tls")
	if len(secret.Data)+len(secret.StringData) != 0 {
		t.Errorf("webhook Secret carries data %v; upgrades would overwrite the operator's certificate", secret.Data)
	}

	vwc := get[*admissionregistrationv1.ValidatingWebhookConfiguration](t, m, "ValidatingWebhookConfiguration", "httpscale-operator-webhook")
	if len(vwc.Webhooks) != 2 {
		t.Fatalf("webhooks = %d, want 2 (HTTPScaledObjects, HTTPScalePolicies)", len(vwc.Webhooks))
	}
	if ph := vwc.Webhooks[1]; *ph.ClientConfig.Service.Path != "/validate-httpscale-dev-v1alpha1-httpscalepolicy" || *ph.FailurePolicy != admissionregistrationv1.Ignore ||
		len(ph.Rules) != 1 || ph.Rules[0].Resources[0] != "httpscalepolicies" || *ph.Rules[0].Scope != admissionregistrationv1.ClusterScope {
		t.Errorf("policy webhook = %+v", ph)
	}
	wh := vwc.Webhooks[0]
	if got := *wh.ClientConfig.Service.Path; got != "/validate-httpscale-dev-v1alpha1-httpscaledobject" {
		t.Errorf("webhook path = %s", got)
	}
	if *wh.FailurePolicy != admissionregistrationv1.Fail || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("failurePolicy/sideEffects = %s/%s, want Fail/None", *wh.FailurePolicy, *wh.SideEffects)
	}
	if len(wh.ClientConfig.CABundle) != 0 || vwc.Annotations["cert-manager.io/inject-ca-from"] != "" {
		t.Errorf("self-managed certificate: the chart must leave caBundle to the operator, got caBundle %q annotations %v", wh.ClientConfig.CABundle, vwc.Annotations)
	}
	wantRule := admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"httpscale.dev"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"httpscaledobjects"}, Scope: ptr(admissionregistrationv1.NamespacedScope)},
	}
	if diff := cmp.Diff([]admissionregistrationv1.RuleWithOperations{wantRule}, wh.Rules); diff != "" {
		t.Errorf("webhook rules (-want +got):\n%s", diff)
	}
	checkWebhookMatchesGenerated(t, m)
	// The finalizer webhook: creates only, never refusing one.
	mwc := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, m, "MutatingWebhookConfiguration", "httpscale-operator-webhook")
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("mutating webhooks = %d, want 1", len(mwc.Webhooks))
	}
	mw := mwc.Webhooks[0]
	if *mw.FailurePolicy != admissionregistrationv1.Ignore || *mw.ReinvocationPolicy != admissionregistrationv1.NeverReinvocationPolicy || *mw.TimeoutSeconds != 3 {
		t.Errorf("mutating failurePolicy/reinvocationPolicy/timeout = %s/%s/%d, want Ignore/Never/3", *mw.FailurePolicy, *mw.ReinvocationPolicy, *mw.TimeoutSeconds)
	}
	if len(mw.Rules) != 1 || !slices.Equal(mw.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
		t.Errorf("mutating webhook rules %+v, want CREATE only", mw.Rules)
	}
	if mw.NamespaceSelector != nil && len(mw.NamespaceSelector.MatchExpressions) > 0 {
		t.Errorf("mutating webhook limited to namespaces %+v without operator.watchNamespaces", mw.NamespaceSelector)
	}
	if len(mw.ClientConfig.CABundle) != 0 || mwc.Annotations["cert-manager.io/inject-ca-from"] != "" {
		t.Errorf("self-managed certificate: the chart must leave the mutating caBundle to the operator")
	}

	ic := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor")
	if got := *ic.Spec.Replicas; got < 2 {
		t.Errorf("interceptor replicas = %d, want at least 2", got)
	}
	checkInterceptorPod(t, ic, 8080, 9090)
	for _, e := range container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor"), "interceptor").Env {
		if strings.HasPrefix(e.Name, "OTEL_") {
			t.Errorf("interceptor env %s set by default; tracing is off unless an endpoint is given", e.Name)
		}
	}
	if !spreadsOverZones(ic) {
		t.Errorf("interceptor pods are not spread across zones: %+v", ic.Spec.Template.Spec.TopologySpreadConstraints)
	}
	pdb := get[*policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", "httpscale-interceptor")
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("interceptor PDB maxUnavailable = %v, want 1", pdb.Spec.MaxUnavailable)
	}
	for name, want := range map[string][]string{"httpscale-interceptor": {"http", "https"}, "httpscale-interceptor-admin": {"admin"}, "httpscale-scaler": {"grpc"}} {
		svc := get[*corev1.Service](t, m, "Service", name)
		var got []string
		for _, p := range svc.Spec.Ports {
			got = append(got, p.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("Service %s ports = %+v, want ports named %v", name, svc.Spec.Ports, want)
		}
	}
	// TLS on by default: the interceptors serve it, the operator grants them the Secrets objects name,
	// and no default certificate means no Secret of the release namespace is readable.
	icc := container(t, ic, "interceptor")
	for _, a := range icc.Args {
		if strings.HasPrefix(a, "--trusted-proxies") {
			t.Errorf("interceptor arg %s by default, want none (nobody trusted)", a)
		}
	}
	if p, ok := port(icc, "https"); !ok || p.ContainerPort != 8443 || !hasArg(icc, "--tls-bind-address=:8443") {
		t.Errorf("interceptor TLS port %+v, args %v: want port https 8443 and --tls-bind-address=:8443", p, icc.Args)
	}
	if svc := get[*corev1.Service](t, m, "Service", "httpscale-interceptor"); svc.Spec.Ports[1].Port != 8443 || svc.Spec.Ports[1].TargetPort.String() != "https" {
		t.Errorf("interceptor Service TLS port = %+v, want 8443 to https", svc.Spec.Ports[1])
	}
	if !hasArg(icc, "--per-app-metrics=counters") {
		t.Errorf("interceptor args %v lack --per-app-metrics=counters", icc.Args)
	}
	if !hasArg(oc, "--interceptor-service-account=httpscale-interceptor") {
		t.Errorf("operator args %v lack --interceptor-service-account=httpscale-interceptor", oc.Args)
	}
	if got := get[*corev1.Service](t, m, "Service", "httpscale-scaler").Spec.Ports[0].Port; got != 9090 {
		t.Errorf("scaler Service port = %d, want 9090", got)
	}

	sd := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-scaler")
	sc := container(t, sd, "scaler")
	for _, arg := range []string{"--grpc-bind-address=:9090", "--health-probe-bind-address=:9191", "--metrics-bind-address=:9190", "--drain-delay=3s"} {
		if !hasArg(sc, arg) {
			t.Errorf("scaler args %v lack %s", sc.Args, arg)
		}
	}
	// No single point of failure: KEDA reconnects to the other replica while one is away, which the
	// budget and the spread keep from being both at once.
	if got := *sd.Spec.Replicas; got < 2 {
		t.Errorf("scaler replicas = %d, want at least 2", got)
	}
	if pdb := get[*policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", "httpscale-scaler"); pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 ||
		!labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(sd.Spec.Template.Labels)) {
		t.Errorf("scaler PDB %+v, want maxUnavailable 1 selecting the scaler pods", pdb.Spec)
	}
	if !spreadsOverZones(sd) {
		t.Errorf("scaler pods are not spread across zones: %+v", sd.Spec.Template.Spec.TopologySpreadConstraints)
	}
	if g := sd.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || *g < 3+5 {
		t.Errorf("scaler terminationGracePeriodSeconds = %v, want room for the 3 s drain delay and the 5 s graceful stop", g)
	}
	if sc.ReadinessProbe == nil || sc.ReadinessProbe.HTTPGet.Port.String() != "probes" || sc.LivenessProbe == nil {
		t.Errorf("scaler probes: readiness %+v liveness %+v", sc.ReadinessProbe, sc.LivenessProbe)
	}
}

func TestNonDefaultValues(t *testing.T) {
	const ns = "platform"
	m := render(t, ns, "--values", filepath.Join(chartDir, "ci", "nondefault-values.yaml"))
	checkConsistent(t, m, ns)

	for _, gone := range []string{"PodDisruptionBudget httpscale-operator", "Secret httpscale-operator-webhook-tls", "Issuer httpscale-selfsigned"} {
		kind, name, _ := strings.Cut(gone, " ")
		if m.find(kind, name) != nil {
			t.Errorf("%s rendered although the values turn it off", gone)
		}
	}

	for _, c := range components {
		cc := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-"+c), c)
		if !hasArg(cc, "--kube-api-qps=75.5") || !hasArg(cc, "--kube-api-burst=1500000") {
			t.Errorf("%s args %v lack --kube-api-qps=75.5 --kube-api-burst=1500000", c, cc.Args)
		}
	}

	op := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-operator")
	oc := container(t, op, "operator")
	for _, arg := range []string{"--scaler-address=httpscale-scaler.platform.svc.k8s.example.internal:9443", "--watch-namespaces=shop,blog", "--zap-log-level=debug", "--zap-encoder=console", "--zap-stacktrace-level=panic"} {
		if !hasArg(oc, arg) {
			t.Errorf("operator args %v lack %s", oc.Args, arg)
		}
	}
	if oc.Image != "registry.example.com/httpscale/operator:v9.9.9" || oc.ImagePullPolicy != corev1.PullAlways {
		t.Errorf("operator image = %s (%s)", oc.Image, oc.ImagePullPolicy)
	}
	if got := op.Spec.Template.Spec.ImagePullSecrets; len(got) != 1 || got[0].Name != "registry-creds" {
		t.Errorf("imagePullSecrets = %v", got)
	}
	for _, arg := range []string{"--webhook-bind-address=:10443", "--webhook-self-managed-certs=false", "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs"} {
		if !hasArg(oc, arg) {
			t.Errorf("operator args %v lack %s", oc.Args, arg)
		}
	}
	if v := volume(t, op, "webhook-certs"); v.Secret == nil || v.Secret.SecretName != "httpscale-operator-webhook-tls" {
		t.Errorf("cert-manager: webhook-certs volume = %+v, want Secret httpscale-operator-webhook-tls", v.VolumeSource)
	}
	if p, ok := port(oc, "webhook"); !ok || p.ContainerPort != 10443 {
		t.Errorf("operator webhook port = %+v, want 10443", p)
	}

	// The fleet default certificate: the interceptor may read that one Secret of the namespace.
	icc := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor"), "interceptor")
	if !hasArg(icc, "--trusted-proxies=10.0.0.0/8,fd00::/8,192.0.2.7") {
		t.Errorf("interceptor args %v lack --trusted-proxies=10.0.0.0/8,fd00::/8,192.0.2.7", icc.Args)
	}
	if p, ok := port(icc, "https"); !ok || p.ContainerPort != 8444 || !hasArg(icc, "--tls-bind-address=:8444") || !hasArg(icc, "--tls-default-secret=fleet-tls") {
		t.Errorf("interceptor TLS port %+v, args %v: want 8444 and --tls-default-secret=fleet-tls", p, icc.Args)
	}
	if svc := get[*corev1.Service](t, m, "Service", "httpscale-interceptor"); len(svc.Spec.Ports) != 2 || svc.Spec.Ports[1].Port != 443 {
		t.Errorf("interceptor Service ports = %+v, want TLS on 443", svc.Spec.Ports)
	}
	role := get[*rbacv1.Role](t, m, "Role", "httpscale-interceptor-tls-default")
	wantRules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"fleet-tls"}, Verbs: []string{"get", "list", "watch"}}}
	if diff := cmp.Diff(wantRules, role.Rules); diff != "" {
		t.Errorf("default certificate Role rules (-want +got):\n%s", diff)
	}
	if !bound(m, "Role", "httpscale-interceptor-tls-default", ns, "httpscale-interceptor", ns) {
		t.Errorf("Role httpscale-interceptor-tls-default is not bound to the interceptor's ServiceAccount")
	}

	vwc := get[*admissionregistrationv1.ValidatingWebhookConfiguration](t, m, "ValidatingWebhookConfiguration", "httpscale-operator-webhook")
	if got := vwc.Annotations["cert-manager.io/inject-ca-from"]; got != "platform/httpscale-operator-webhook" {
		t.Errorf("CA injection annotation = %q, want platform/httpscale-operator-webhook", got)
	}
	if got := *vwc.Webhooks[0].FailurePolicy; got != admissionregistrationv1.Ignore {
		t.Errorf("failurePolicy = %s, want Ignore", got)
	}
	mwc := get[*admissionregistrationv1.MutatingWebhookConfiguration](t, m, "MutatingWebhookConfiguration", "httpscale-operator-webhook")
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != "platform/httpscale-operator-webhook" {
		t.Errorf("mutating CA injection annotation = %q, want platform/httpscale-operator-webhook", got)
	}
	// Only the watched namespaces' objects get the finalizer: nothing would remove it elsewhere.
	wantSel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"shop", "blog"}}}}
	if diff := cmp.Diff(wantSel, mwc.Webhooks[0].NamespaceSelector); diff != "" {
		t.Errorf("mutating webhook namespaceSelector with operator.watchNamespaces (-want +got):\n%s", diff)
	}
	cert := get[*unstructured.Unstructured](t, m, "Certificate", "httpscale-operator-webhook")
	dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if !slices.Contains(dns, "httpscale-operator-webhook.platform.svc") {
		t.Errorf("certificate dnsNames %v lack the webhook Service's name", dns)
	}
	secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
	issuer, _, _ := unstructured.NestedStringMap(cert.Object, "spec", "issuerRef")
	if secretName != "httpscale-operator-webhook-tls" || issuer["name"] != "corp-ca" || issuer["kind"] != "ClusterIssuer" {
		t.Errorf("certificate secretName %q issuerRef %v", secretName, issuer)
	}

	ic := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor")
	if ic.Spec.Replicas != nil {
		t.Errorf("interceptor replicas = %d with autoscaling on; Helm upgrades would fight KEDA", *ic.Spec.Replicas)
	}
	checkInterceptorPod(t, ic, 8081, 9095)
	if got := *ic.Spec.Template.Spec.TerminationGracePeriodSeconds; got != 145 {
		t.Errorf("terminationGracePeriodSeconds = %d, want 10+120+15", got)
	}
	if got := envVar(t, container(t, ic, "interceptor"), "HTTPSCALE_ZONE").Value; got != "zone-a" {
		t.Errorf("HTTPSCALE_ZONE = %q", got)
	}
	for k, want := range map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": "http://otel-collector.observability:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_SERVICE_NAME": "edge-interceptor",
		"OTEL_RESOURCE_ATTRIBUTES": "k8s.namespace.name=$(POD_NAMESPACE),k8s.pod.name=$(POD_NAME),k8s.node.name=$(NODE_NAME)",
	} {
		if got := envVar(t, container(t, ic, "interceptor"), k).Value; got != want {
			t.Errorf("interceptor %s = %q, want %q (tracing values)", k, got, want)
		}
	}
	// $(VAR) references resolve only to variables defined before them.
	env := container(t, ic, "interceptor").Env
	attrs := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "OTEL_RESOURCE_ATTRIBUTES" })
	for _, ref := range []string{"POD_NAMESPACE", "POD_NAME", "NODE_NAME"} {
		if i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == ref }); i < 0 || i > attrs {
			t.Errorf("OTEL_RESOURCE_ATTRIBUTES refers to %s, defined at %d after it (%d)", ref, i, attrs)
		}
	}
	proxy := get[*corev1.Service](t, m, "Service", "httpscale-interceptor")
	if proxy.Spec.Type != corev1.ServiceTypeLoadBalancer || proxy.Spec.Ports[0].Port != 80 || proxy.Annotations["service.beta.kubernetes.io/aws-load-balancer-type"] != "nlb" {
		t.Errorf("proxy Service = %s port %d annotations %v", proxy.Spec.Type, proxy.Spec.Ports[0].Port, proxy.Annotations)
	}
	if got := get[*policyv1.PodDisruptionBudget](t, m, "PodDisruptionBudget", "httpscale-interceptor").Spec.MaxUnavailable; *got != intstr.FromString("25%") {
		t.Errorf("PDB maxUnavailable = %v", got)
	}

	so := get[*kedav1alpha1.ScaledObject](t, m, "ScaledObject", "httpscale-interceptor")
	if so.Spec.ScaleTargetRef.Name != "httpscale-interceptor" || so.Spec.ScaleTargetRef.Kind != "Deployment" {
		t.Errorf("ScaledObject target = %+v", so.Spec.ScaleTargetRef)
	}
	if *so.Spec.MinReplicaCount != 3 || *so.Spec.MaxReplicaCount != 30 || *so.Spec.PollingInterval != 5 || *so.Spec.CooldownPeriod != 120 {
		t.Errorf("ScaledObject min/max/polling/cooldown = %d/%d/%d/%d", *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount, *so.Spec.PollingInterval, *so.Spec.CooldownPeriod)
	}
	if len(so.Spec.Triggers) != 1 || so.Spec.Triggers[0].Type != "external" {
		t.Fatalf("ScaledObject triggers = %+v, want one external trigger", so.Spec.Triggers)
	}
	md := so.Spec.Triggers[0].Metadata
	if got := md[trigger.KeyScalerAddress]; got != "httpscale-scaler.platform.svc.k8s.example.internal:9443" {
		t.Errorf("scalerAddress = %s", got)
	}
	// The scaler parses this metadata with pkg/trigger; the chart must speak the same contract.
	parsed, err := trigger.Parse(md)
	if err != nil {
		t.Fatalf("the scaler would reject the fleet trigger metadata %v: %v", md, err)
	}
	if !parsed.Fleet || parsed.ConcurrencyTarget != 500 {
		t.Errorf("parsed fleet trigger = %+v, want the fleet metric with target 500", parsed)
	}

	// The ServiceMonitor scrapes every component: its selector picks the three metrics-serving Services
	// and each of them has a port one of its endpoints names.
	sm := get[*unstructured.Unstructured](t, m, "ServiceMonitor", "httpscale")
	smSel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	var smPorts []string
	for _, e := range endpoints {
		smPorts = append(smPorts, e.(map[string]any)["port"].(string))
	}
	var scraped []string
	for _, svc := range ofType[*corev1.Service](m) {
		if !labels.SelectorFromSet(smSel).Matches(labels.Set(svc.Labels)) {
			continue
		}
		scraped = append(scraped, svc.Name)
		if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return slices.Contains(smPorts, p.Name) }) {
			t.Errorf("ServiceMonitor selects Service %s but scrapes none of its ports %v", svc.Name, svc.Spec.Ports)
		}
	}
	slices.Sort(scraped)
	if diff := cmp.Diff([]string{"httpscale-interceptor-admin", "httpscale-operator-metrics", "httpscale-scaler-metrics"}, scraped); diff != "" {
		t.Errorf("Services scraped by the ServiceMonitor (-want +got):\n%s", diff)
	}
	if sm.GetLabels()["release"] != "kube-prometheus" {
		t.Errorf("ServiceMonitor labels = %v", sm.GetLabels())
	}

	sd := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-scaler")
	if got := *sd.Spec.Replicas; got != 2 {
		t.Errorf("scaler replicas = %d", got)
	}
	sc := container(t, sd, "scaler")
	if !hasArg(sc, "--grpc-bind-address=:9443") || get[*corev1.Service](t, m, "Service", "httpscale-scaler").Spec.Ports[0].Port != 9443 {
		t.Errorf("scaler gRPC port not moved to 9443: args %v", sc.Args)
	}
}

func TestMinimalValues(t *testing.T) {
	const ns = "dev"
	m := render(t, ns, "--values", filepath.Join(chartDir, "ci", "minimal-values.yaml"))
	checkConsistent(t, m, ns)
	for _, gone := range []string{"ValidatingWebhookConfiguration httpscale-operator-webhook", "MutatingWebhookConfiguration httpscale-operator-webhook", "Service httpscale-operator-webhook", "Secret httpscale-operator-webhook-tls", "PodDisruptionBudget httpscale-interceptor", "PodDisruptionBudget httpscale-operator", "PodDisruptionBudget httpscale-scaler"} {
		kind, name, _ := strings.Cut(gone, " ")
		if m.find(kind, name) != nil {
			t.Errorf("%s rendered although the values turn it off", gone)
		}
	}
	op := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-operator")
	oc := container(t, op, "operator")
	if _, ok := port(oc, "webhook"); ok || !hasArg(oc, "--leader-elect=false") || !hasArg(oc, "--webhook-bind-address=0") {
		t.Errorf("operator without webhook: ports %v args %v", oc.Ports, oc.Args)
	}
	ic := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor")
	if len(ic.Spec.Template.Spec.TopologySpreadConstraints) != 0 {
		t.Errorf("topology spread rendered although disabled")
	}

	// One operator replica with a minAvailable: 1 budget would block every node drain.
	single := render(t, ns, "--set", "operator.replicas=1,scaler.replicas=1")
	if single.find("PodDisruptionBudget", "httpscale-operator") != nil {
		t.Error("operator PodDisruptionBudget rendered for a single replica")
	}
	if single.find("PodDisruptionBudget", "httpscale-scaler") != nil {
		t.Error("scaler PodDisruptionBudget rendered for a single replica")
	}
	// Replicas 0: everything but the pods, for binaries running out of cluster.
	none := render(t, ns, "--set", "operator.replicas=0,interceptor.replicas=0,scaler.replicas=0")
	checkConsistent(t, none, ns)
	for _, c := range components {
		if got := *get[*appsv1.Deployment](t, none, "Deployment", "httpscale-"+c).Spec.Replicas; got != 0 {
			t.Errorf("%s replicas = %d, want 0", c, got)
		}
	}
}

// config/default is the kustomize install: the chart rendered with its defaults, plus the Namespace.
func TestKustomizeInstallMatchesChart(t *testing.T) {
	committed := filepath.Join(testenv.RepoRoot(), "config", "default", "httpscale.yaml")
	fresh := filepath.Join(t.TempDir(), "httpscale.yaml")
	cmd := exec.Command(filepath.Join(testenv.RepoRoot(), "hack", "render-install.sh"), fresh)
	cmd.Env = append(os.Environ(), "HELM="+helm(t))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/render-install.sh: %v\n%s", err, out)
	}
	want, err := os.ReadFile(fresh)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != string(got) {
		t.Fatalf("config/default/httpscale.yaml is stale; run `make chart-sync` and commit it. Diff (-fresh +committed):\n%s", cmp.Diff(string(want), string(got)))
	}

	// kustomize builds it into the chart's objects plus the Namespace, labelled as not managed by Helm.
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	built, err := exec.Command(filepath.Join(assets, "kubectl"), "kustomize", filepath.Join(testenv.RepoRoot(), "config", "default")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize config/default: %v", err)
	}
	objs, err := decodeAll(strings.NewReader(string(built)))
	if err != nil {
		t.Fatal(err)
	}
	kustomized := manifests{objs: objs}
	chart := render(t, "httpscale-system", "--include-crds")
	wantKeys := append(chart.keys(), "Namespace /httpscale-system")
	slices.Sort(wantKeys)
	if diff := cmp.Diff(wantKeys, kustomized.keys()); diff != "" {
		t.Errorf("kustomize install objects (-chart +kustomize):\n%s", diff)
	}
	for _, o := range kustomized.objs {
		if got := o.GetLabels()["app.kubernetes.io/managed-by"]; got != "kustomize" {
			t.Errorf("%s %s: managed-by = %q, want kustomize", kindOf(o), o.GetName(), got)
		}
	}
}

// Every value in values.yaml is documented in the chart README and described by the schema.
func TestEveryValueDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rawSchema, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(rawSchema, &schema); err != nil {
		t.Fatal(err)
	}
	// Kubernetes-typed values are documented as a whole.
	opaque := map[string]bool{"resources": true, "podSecurityContext": true, "securityContext": true}
	var walk func(prefix string, m, s map[string]any)
	walk = func(prefix string, m, s map[string]any) {
		props, _ := s["properties"].(map[string]any)
		for k, v := range m {
			path := prefix + k
			sub, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("value %s is missing from values.schema.json", path)
			}
			if nested, isMap := v.(map[string]any); isMap && len(nested) > 0 && !opaque[k] {
				walk(path+".", nested, sub)
				continue
			}
			if !strings.Contains(string(readme), "`"+path+"`") {
				t.Errorf("value %s is not documented in README.md", path)
			}
		}
	}
	walk("", values, schema)
}

// Clusters without DNS for KEDA (or with KEDA outside the cluster) pin the scaler Service's ClusterIP
// and write that address into every ScaledObject instead of the Service's name.
func TestScalerAddressWithoutDNS(t *testing.T) {
	const ns = "httpscale-system"
	m := render(t, ns, "--set", "scaler.service.clusterIP=10.96.0.90,scaler.address=10.96.0.90:9090,interceptor.autoscaling.enabled=true")
	checkConsistent(t, m, ns)
	if got := get[*corev1.Service](t, m, "Service", "httpscale-scaler").Spec.ClusterIP; got != "10.96.0.90" {
		t.Errorf("scaler Service clusterIP = %q, want 10.96.0.90", got)
	}
	oc := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-operator"), "operator")
	if !hasArg(oc, "--scaler-address=10.96.0.90:9090") {
		t.Errorf("operator args %v lack --scaler-address=10.96.0.90:9090", oc.Args)
	}
	so := get[*kedav1alpha1.ScaledObject](t, m, "ScaledObject", "httpscale-interceptor")
	if got := so.Spec.Triggers[0].Metadata[trigger.KeyScalerAddress]; got != "10.96.0.90:9090" {
		t.Errorf("interceptor ScaledObject scalerAddress = %s, want 10.96.0.90:9090", got)
	}
	// The default stays the Service's DNS name and lets Kubernetes allocate the ClusterIP.
	d := render(t, ns)
	if got := get[*corev1.Service](t, d, "Service", "httpscale-scaler").Spec.ClusterIP; got != "" {
		t.Errorf("default scaler Service clusterIP = %q, want allocated", got)
	}
	if oc := container(t, get[*appsv1.Deployment](t, d, "Deployment", "httpscale-operator"), "operator"); !hasArg(oc, "--scaler-address=httpscale-scaler.httpscale-system.svc.cluster.local:9090") {
		t.Errorf("default operator args %v lack the scaler Service's DNS name", oc.Args)
	}
}

// spreadsOverZones reports whether d's pods are spread over zones by a constraint that selects them.
func spreadsOverZones(d *appsv1.Deployment) bool {
	for _, c := range d.Spec.Template.Spec.TopologySpreadConstraints {
		if c.TopologyKey == "topology.kubernetes.io/zone" && labels.SelectorFromSet(c.LabelSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
			return true
		}
	}
	return false
}
