package charts_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// checkConsistent asserts what must hold for any values: every Service and PodDisruptionBudget selects
// the pods of exactly one Deployment and names ports those pods have; the RBAC is exactly what
// controller-gen generated from the markers, bound to the ServiceAccount the component runs as; the
// webhook points at a Service port that exists; labels and namespaces are right.
func checkConsistent(t *testing.T, m manifests, ns string) {
	t.Helper()
	clusterScoped := map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true, "CustomResourceDefinition": true,
		"ClusterTriggerAuthentication": true}
	for _, o := range m.objs {
		k := kindOf(o)
		// KEDA's client certificate for the scaler's mutual TLS lives where KEDA reads it
		// (scaler.tls.kedaNamespace).
		kedaSecret := k == "Secret" && strings.HasSuffix(o.GetName(), "-keda-client-tls")
		if !kedaSecret && (clusterScoped[k] != (o.GetNamespace() == "") || (!clusterScoped[k] && o.GetNamespace() != ns)) {
			t.Errorf("%s %s is in namespace %q, want %q", k, o.GetName(), o.GetNamespace(), map[bool]string{true: "", false: ns}[clusterScoped[k]])
		}
		l := o.GetLabels()
		if l["app.kubernetes.io/name"] != "httpscale" || l["app.kubernetes.io/instance"] != "httpscale" || l["app.kubernetes.io/managed-by"] != "Helm" {
			t.Errorf("%s %s labels = %v", k, o.GetName(), l)
		}
	}

	deployments := ofType[*appsv1.Deployment](m)
	selected := func(what string, sel labels.Selector) *appsv1.Deployment {
		var hits []*appsv1.Deployment
		for _, d := range deployments {
			if sel.Matches(labels.Set(d.Spec.Template.Labels)) {
				hits = append(hits, d)
			}
		}
		if len(hits) != 1 {
			t.Errorf("%s selects %d deployments' pods, want exactly 1", what, len(hits))
			return nil
		}
		return hits[0]
	}
	for _, d := range deployments {
		sel := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Errorf("Deployment %s selector does not match its own pods", d.Name)
		}
		c := d.Spec.Template.Spec.Containers[0]
		// Every listener of the process (flags ending in -bind-address) on its own port, and the
		// declared container ports among them.
		listeners := map[string]string{}
		for _, a := range c.Args {
			name, addr, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !ok || !strings.HasSuffix(name, "-bind-address") || addr == "0" {
				continue
			}
			_, p, _ := strings.Cut(addr, ":")
			if other, dup := listeners[p]; dup {
				t.Errorf("Deployment %s: --%s and --%s both listen on port %s", d.Name, other, name, p)
			}
			listeners[p] = name
		}
		for _, p := range c.Ports {
			if _, ok := listeners[fmt.Sprint(p.ContainerPort)]; !ok {
				t.Errorf("Deployment %s: container port %s (%d) is not a port the process listens on (%v)", d.Name, p.Name, p.ContainerPort, listeners)
			}
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("Deployment %s: want cpu and memory requests and a memory limit, got %+v", d.Name, c.Resources)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("Deployment %s security context = %+v", d.Name, sc)
		}
		if e := envVar(t, c, "POD_NAMESPACE"); e.ValueFrom == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
			t.Errorf("Deployment %s: POD_NAMESPACE = %+v, want the downward API", d.Name, e)
		}
		for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("Deployment %s lacks HTTP readiness or liveness probes", d.Name)
				continue
			}
			if _, ok := port(c, p.HTTPGet.Port.String()); !ok {
				t.Errorf("Deployment %s probe port %s is not a container port", d.Name, p.HTTPGet.Port.String())
			}
		}
	}
	for _, svc := range ofType[*corev1.Service](m) {
		d := selected("Service "+svc.Name, labels.SelectorFromSet(svc.Spec.Selector))
		if d == nil {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if _, ok := port(d.Spec.Template.Spec.Containers[0], p.TargetPort.String()); !ok {
				t.Errorf("Service %s port %s targets %s, which is no named port of %s", svc.Name, p.Name, p.TargetPort.String(), d.Name)
			}
		}
	}
	for _, pdb := range ofType[*policyv1.PodDisruptionBudget](m) {
		selected("PodDisruptionBudget "+pdb.Name, labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels))
	}
	var webhookRefs []*admissionregistrationv1.ServiceReference
	for _, vwc := range ofType[*admissionregistrationv1.ValidatingWebhookConfiguration](m) {
		for _, wh := range vwc.Webhooks {
			webhookRefs = append(webhookRefs, wh.ClientConfig.Service)
		}
	}
	for _, mwc := range ofType[*admissionregistrationv1.MutatingWebhookConfiguration](m) {
		for _, wh := range mwc.Webhooks {
			webhookRefs = append(webhookRefs, wh.ClientConfig.Service)
		}
	}
	for _, ref := range webhookRefs {
		svc := get[*corev1.Service](t, m, "Service", ref.Name)
		if ref.Namespace != ns || !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == *ref.Port }) {
			t.Errorf("webhook path %s points at %s/%s:%d, which does not exist", *ref.Path, ref.Namespace, ref.Name, *ref.Port)
		}
	}

	for _, c := range components {
		sa := "httpscale-" + c
		get[*corev1.ServiceAccount](t, m, "ServiceAccount", sa)
		d := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-"+c)
		if d.Spec.Template.Spec.ServiceAccountName != sa {
			t.Errorf("Deployment %s runs as %q, want %s", d.Name, d.Spec.Template.Spec.ServiceAccountName, sa)
		}
		if repo, _, _ := strings.Cut(container(t, d, c).Image, ":"); !strings.HasSuffix(repo, "/"+c) {
			t.Errorf("Deployment %s runs image %s, want the %s image", d.Name, container(t, d, c).Image, c)
		}
		for _, gen := range generatedRoles(t, c) {
			kind := kindOf(gen)
			role := m.find(kind, gen.GetName())
			if role == nil {
				t.Errorf("%s %s generated from the %s's markers is missing from the chart", kind, gen.GetName(), c)
				continue
			}
			if diff := cmp.Diff(rules(gen), rules(role)); diff != "" {
				t.Errorf("%s %s rules differ from controller-gen's (-generated +chart); run `make manifests`:\n%s", kind, gen.GetName(), diff)
			}
			if !bound(m, kind, role.GetName(), role.GetNamespace(), sa, ns) {
				t.Errorf("%s %s is not bound to ServiceAccount %s/%s", kind, role.GetName(), ns, sa)
			}
		}
	}
	// Nothing grants more than the generated roles.
	var generated []string
	for _, c := range components {
		for _, g := range generatedRoles(t, c) {
			generated = append(generated, kindOf(g)+" "+g.GetName())
		}
	}
	for _, o := range m.objs {
		// The one exception: the fleet default certificate's Role, which names the single Secret the
		// values choose (markers cannot); it may grant nothing else.
		if r, ok := o.(*rbacv1.Role); ok && r.Name == "httpscale-interceptor-tls-default" {
			if len(r.Rules) != 1 || !slices.Equal(r.Rules[0].Resources, []string{"secrets"}) || len(r.Rules[0].ResourceNames) != 1 ||
				!slices.Equal(r.Rules[0].Verbs, []string{"get", "list", "watch"}) || !slices.Equal(r.Rules[0].APIGroups, []string{""}) {
				t.Errorf("Role %s must grant get/list/watch on one named Secret only, got %+v", r.Name, r.Rules)
			}
			continue
		}
		if k := kindOf(o); (k == "Role" || k == "ClusterRole") && !slices.Contains(generated, k+" "+o.GetName()) {
			t.Errorf("%s %s is not generated from RBAC markers", k, o.GetName())
		}
	}
}

func bound(m manifests, kind, name, roleNS, sa, ns string) bool {
	for _, o := range m.objs {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			ref, subjects = b.RoleRef, b.Subjects
		case *rbacv1.RoleBinding:
			if b.Namespace != roleNS {
				continue
			}
			ref, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		if ref.Kind == kind && ref.Name == name && slices.Contains(subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: sa, Namespace: ns}) {
			return true
		}
	}
	return false
}

// checkInterceptorPod asserts the interceptor's ports, downward-API variables, probes and that its
// grace period covers the drain it is configured for.
func checkInterceptorPod(t *testing.T, d *appsv1.Deployment, proxyPort, adminPort int32) {
	t.Helper()
	c := container(t, d, "interceptor")
	if p, ok := port(c, "http"); !ok || p.ContainerPort != proxyPort || !hasArg(c, fmt.Sprintf("--proxy-bind-address=:%d", proxyPort)) {
		t.Errorf("proxy port = %+v args %v, want %d", p, c.Args, proxyPort)
	}
	if p, ok := port(c, "admin"); !ok || p.ContainerPort != adminPort || !hasArg(c, fmt.Sprintf("--admin-bind-address=:%d", adminPort)) {
		t.Errorf("admin port = %+v args %v, want %d", p, c.Args, adminPort)
	}
	if e := envVar(t, c, "NODE_NAME"); e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("NODE_NAME = %+v, want the downward API spec.nodeName", e)
	}
	if p := c.ReadinessProbe; p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("readiness probe = %s on %s, want /readyz on admin", p.HTTPGet.Path, p.HTTPGet.Port.String())
	}
	if p := c.LivenessProbe; p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "admin" {
		t.Errorf("liveness probe = %s on %s, want /healthz on admin", p.HTTPGet.Path, p.HTTPGet.Port.String())
	}
	delay, err1 := time.ParseDuration(envVar(t, c, "HTTPSCALE_DRAIN_DELAY").Value)
	timeout, err2 := time.ParseDuration(envVar(t, c, "HTTPSCALE_DRAIN_TIMEOUT").Value)
	if err1 != nil || err2 != nil {
		t.Fatalf("drain settings are not durations: %v %v", err1, err2)
	}
	grace := time.Duration(*d.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace < delay+timeout {
		t.Errorf("terminationGracePeriodSeconds %s < drain delay %s + timeout %s: the kubelet would kill requests mid-drain", grace, delay, timeout)
	}
}

func volume(t testing.TB, d *appsv1.Deployment, name string) corev1.Volume {
	t.Helper()
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("deployment %s has no volume %s", d.Name, name)
	return corev1.Volume{}
}

func ptr[T any](v T) *T { return &v }

// checkWebhookMatchesGenerated compares the chart's webhook configurations (validating, and mutating
// when rendered) with config/webhook/manifests.yaml, which controller-gen writes from the markers:
// webhook names (the operator patches the caBundle by name), path, rules and side effects. The chart adds
// only what the marker cannot know (namespace, failure policy and timeout from values, caBundle).
func checkWebhookMatchesGenerated(t *testing.T, m manifests) {
	t.Helper()
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), "config", "webhook", "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := decodeAll(f)
	if err != nil {
		t.Fatal(err)
	}
	type hook struct {
		Name, Service, Path string
		Rules               []admissionregistrationv1.RuleWithOperations
		SideEffects         admissionregistrationv1.SideEffectClass
		Versions            []string
	}
	summarize := func(name string, cc admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations, se *admissionregistrationv1.SideEffectClass, versions []string) hook {
		rules = slices.Clone(rules)
		for i := range rules {
			rules[i].Scope = nil // the chart states the default scope explicitly
		}
		return hook{Name: name, Service: cc.Service.Name, Path: *cc.Service.Path, Rules: rules, SideEffects: *se, Versions: versions}
	}
	// summary maps "Kind name" to its webhooks.
	summary := func(objs []client.Object) map[string][]hook {
		out := map[string][]hook{}
		for _, o := range objs {
			switch v := o.(type) {
			case *admissionregistrationv1.ValidatingWebhookConfiguration:
				for _, w := range v.Webhooks {
					out["ValidatingWebhookConfiguration "+v.Name] = append(out["ValidatingWebhookConfiguration "+v.Name], summarize(w.Name, w.ClientConfig, w.Rules, w.SideEffects, w.AdmissionReviewVersions))
				}
			case *admissionregistrationv1.MutatingWebhookConfiguration:
				for _, w := range v.Webhooks {
					out["MutatingWebhookConfiguration "+v.Name] = append(out["MutatingWebhookConfiguration "+v.Name], summarize(w.Name, w.ClientConfig, w.Rules, w.SideEffects, w.AdmissionReviewVersions))
				}
			}
		}
		return out
	}
	gen := summary(objs)
	var rendered []client.Object
	for _, v := range ofType[*admissionregistrationv1.ValidatingWebhookConfiguration](m) {
		rendered = append(rendered, v)
	}
	for _, v := range ofType[*admissionregistrationv1.MutatingWebhookConfiguration](m) {
		rendered = append(rendered, v)
	}
	chart := summary(rendered)
	if len(chart) == 0 {
		t.Fatal("the chart renders no webhook configuration")
	}
	for key, hooks := range chart {
		if diff := cmp.Diff(gen[key], hooks); diff != "" {
			t.Errorf("chart %s differs from controller-gen's (-generated +chart):\n%s", key, diff)
		}
	}
}
