package charts_test

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestSessionKeysAndStaleTable: by default the chart creates the session-keys Secret with no data
// (the operator fills it, so a render is deterministic and an upgrade keeps the key), mounts it into
// the interceptors and tells the operator its name; with an existing Secret it creates none and asks
// the operator to write nothing. The stale-table bound reaches the interceptors' flags.
func TestSessionKeysAndStaleTable(t *testing.T) {
	const ns = "httpscale-system"
	mountedFrom := func(d *appsv1.Deployment) string {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "session-keys" && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
		return ""
	}
	m := render(t, ns)
	sec := get[*corev1.Secret](t, m, "Secret", "httpscale-session-keys")
	if len(sec.Data)+len(sec.StringData) != 0 {
		t.Errorf("the chart's session-keys Secret has data %v; the operator writes it", sec.Data)
	}
	id := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor")
	ic := container(t, id, "interceptor")
	for _, arg := range []string{"--table-stale-after=30s", "--session-keys-file=/etc/httpscale/session/keys"} {
		if !hasArg(ic, arg) {
			t.Errorf("interceptor args %v lack %s", ic.Args, arg)
		}
	}
	if got := mountedFrom(id); got != "httpscale-session-keys" {
		t.Errorf("interceptor session keys from %q, want httpscale-session-keys", got)
	}
	mounted := false
	for _, vm := range ic.VolumeMounts {
		mounted = mounted || vm.Name == "session-keys" && vm.MountPath == "/etc/httpscale/session" && vm.ReadOnly
	}
	if !mounted {
		t.Errorf("interceptor volume mounts %+v lack session-keys read-only at /etc/httpscale/session", ic.VolumeMounts)
	}
	if oc := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-operator"), "operator"); !hasArg(oc, "--session-keys-secret=httpscale-session-keys") {
		t.Errorf("operator args %v lack --session-keys-secret=httpscale-session-keys", oc.Args)
	}

	m = render(t, ns, "--set", "interceptor.sessionPersistence.existingSecret=shop-session-keys", "--set", "interceptor.routingTable.staleAfter=0s")
	if m.find("Secret", "httpscale-session-keys") != nil {
		t.Error("with an existing Secret the chart still creates its own")
	}
	id = get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor")
	if got := mountedFrom(id); got != "shop-session-keys" {
		t.Errorf("interceptor session keys from %q, want shop-session-keys", got)
	}
	if ic := container(t, id, "interceptor"); !hasArg(ic, "--table-stale-after=0s") {
		t.Errorf("interceptor args %v lack --table-stale-after=0s", ic.Args)
	}
	for _, a := range container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-operator"), "operator").Args {
		if strings.HasPrefix(a, "--session-keys-secret") {
			t.Errorf("with an existing Secret the operator still gets %s: it must not write the user's Secret", a)
		}
	}

	for _, tc := range []struct{ set, want string }{
		{"interceptor.routingTable.staleAfter=soon", "/interceptor/routingTable/staleAfter"},
		{"interceptor.sessionPersistence.existingSecret=Shop_Keys", "/interceptor/sessionPersistence/existingSecret"},
	} {
		if _, err := runHelm(t, "template", "httpscale", chartDir, "--set", tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template --set %s: %v, want an error mentioning %s", tc.set, err, tc.want)
		}
	}
}
