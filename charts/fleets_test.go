package charts_test

import (
	"cmp"
	"fmt"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/httpscale/httpscale/pkg/trigger"
)

// renderRelease runs `helm template` for release name in namespace ns with extra args.
func renderRelease(t *testing.T, name, ns string, args ...string) manifests {
	t.Helper()
	out, err := runHelm(t, append([]string{"template", name, chartDir, "--namespace", ns}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeAll(strings.NewReader(out))
	if err != nil {
		t.Fatalf("decoding helm template output: %v", err)
	}
	return manifests{objs: objs}
}

// Two releases of different fleets in one cluster, even in one namespace: no object of one may have
// the name of an object of the other (Helm would refuse the second install, or worse, the second would
// take over the first's objects), and each release's components must find each other and only each
// other: the operator's routing table is the one its interceptors read, its interceptor admin Service
// the one its scaler polls, and its ScaledObjects' scaler address its own scaler's Service.
func TestTwoFleetsDoNotCollide(t *testing.T) {
	const ns = "httpscale-system"
	for _, extra := range []string{
		"",
		"interceptor.autoscaling.enabled=true,metrics.serviceMonitor.enabled=true",
		"certManager.enabled=true",
	} {
		t.Run(cmp.Or(extra, "defaults"), func(t *testing.T) {
			set := func(v string) []string {
				if extra != "" {
					v += "," + extra
				}
				return []string{"--set", v}
			}
			def := renderRelease(t, "httpscale", ns, set("fleet=default")...)
			blue := renderRelease(t, "blue", ns, set("fleet=blue")...)
			// The same release name in another namespace must not matter either.
			green := renderRelease(t, "httpscale", "green", set("fleet=green")...)

			seen := map[string]string{}
			for release, m := range map[string]manifests{"default": def, "blue": blue, "green": green} {
				for _, o := range m.objs {
					if kindOf(o) == "CustomResourceDefinition" {
						continue // one CRD for the cluster, by design
					}
					key := fmt.Sprintf("%s %s/%s", kindOf(o), o.GetNamespace(), o.GetName())
					if other, dup := seen[key]; dup {
						t.Errorf("%s is rendered by fleet %s and fleet %s", key, other, release)
					}
					seen[key] = release
				}
			}
			wired := map[string]fleetWiring{}
			for fleet, r := range map[string]struct {
				m      manifests
				ns     string
				prefix string
			}{"default": {def, ns, "httpscale"}, "blue": {blue, ns, "httpscale-blue"}, "green": {green, "green", "httpscale-green"}} {
				wired[fleet] = checkFleetWiring(t, r.m, fleet, r.ns, r.prefix)
			}
			for a, wa := range wired {
				for b, wb := range wired {
					if a < b && (wa.table == wb.table && wa.ns == wb.ns || wa.selector == wb.selector && wa.ns == wb.ns || wa.scaler == wb.scaler) {
						t.Errorf("fleets %s and %s share a routing table, interceptor admin Service or scaler: %+v %+v", a, b, wa, wb)
					}
				}
			}
		})
	}
}

// fleetWiring is what a release's components find each other by.
type fleetWiring struct {
	ns, table, selector, scaler string
}

// checkFleetWiring checks that the release of fleet, rendered into ns with names starting with prefix,
// is wired to itself, and returns its wiring.
func checkFleetWiring(t *testing.T, m manifests, fleet, ns, prefix string) fleetWiring {
	t.Helper()
	op := container(t, get[*appsv1.Deployment](t, m, "Deployment", prefix+"-operator"), "operator")
	ic := container(t, get[*appsv1.Deployment](t, m, "Deployment", prefix+"-interceptor"), "interceptor")
	sc := container(t, get[*appsv1.Deployment](t, m, "Deployment", prefix+"-scaler"), "scaler")
	w := fleetWiring{ns: ns}
	w.table, _ = argValue(op, "--routing-table-name")
	w.selector, _ = argValue(op, "--interceptor-admin-selector")
	w.scaler, _ = argValue(op, "--scaler-address")

	if v, _ := argValue(op, "--fleet"); v != fleet {
		t.Errorf("fleet %s: operator --fleet=%q", fleet, v)
	}
	if v, _ := argValue(ic, "--routing-table-name"); v != w.table || v == "" {
		t.Errorf("fleet %s: interceptors read routing table %q, the operator writes %q", fleet, v, w.table)
	}
	if v := envVar(t, sc, "HTTPSCALE_INTERCEPTOR_ADMIN_SELECTOR").Value; v != w.selector {
		t.Errorf("fleet %s: the scaler polls %q, the operator probes %q", fleet, v, w.selector)
	}
	svc, ok := strings.CutPrefix(w.selector, "kubernetes.io/service-name=")
	if !ok || m.find("Service", svc) == nil {
		t.Errorf("fleet %s: interceptor admin selector %q names no Service of the release", fleet, w.selector)
	}
	host, _, _ := strings.Cut(w.scaler, ".")
	if want := prefix + "-scaler." + ns + ".svc."; !strings.HasPrefix(w.scaler, want) || m.find("Service", host) == nil {
		t.Errorf("fleet %s: scaler address %q, want %s... naming the release's scaler Service", fleet, w.scaler, want)
	}
	if so, ok := m.find("ScaledObject", prefix+"-interceptor").(*kedav1alpha1.ScaledObject); ok {
		if got := so.Spec.Triggers[0].Metadata[trigger.KeyScalerAddress]; got != w.scaler {
			t.Errorf("fleet %s: interceptor ScaledObject asks scaler %q, want %q", fleet, got, w.scaler)
		}
	}
	for _, name := range []string{"--webhook-service-name", "--webhook-configuration-name", "--webhook-secret-name"} {
		v, _ := argValue(op, name)
		kind := map[string]string{"--webhook-service-name": "Service", "--webhook-configuration-name": "ValidatingWebhookConfiguration", "--webhook-secret-name": "Secret"}[name]
		if kind == "Secret" && m.find("Certificate", prefix+"-operator-webhook") != nil {
			continue // cert-manager creates the Secret
		}
		if m.find(kind, v) == nil {
			t.Errorf("fleet %s: operator %s=%s names no %s of the release", fleet, name, v, kind)
		}
	}
	for _, vwc := range ofType[*admissionregistrationv1.ValidatingWebhookConfiguration](m) {
		for _, wh := range vwc.Webhooks {
			if wh.Rules[0].Resources[0] == "httpscalepolicies" {
				continue // cluster-wide, the same for every fleet
			}
			if len(wh.MatchConditions) != 2 || !strings.Contains(wh.MatchConditions[0].Expression, "'"+fleet+"'") {
				t.Errorf("fleet %s: webhook %s match conditions %+v do not select the fleet's objects", fleet, wh.Name, wh.MatchConditions)
			}
		}
	}
	// The finalizer webhook of one fleet never puts its finalizer on another fleet's object.
	for _, mwc := range ofType[*admissionregistrationv1.MutatingWebhookConfiguration](m) {
		for _, wh := range mwc.Webhooks {
			if len(wh.MatchConditions) != 1 || !strings.Contains(wh.MatchConditions[0].Expression, "'"+fleet+"'") {
				t.Errorf("fleet %s: mutating webhook %s match conditions %+v do not select the fleet's objects", fleet, wh.Name, wh.MatchConditions)
			}
		}
	}
	// Every binding grants to a ServiceAccount of this release, and every pod runs as one.
	sas := map[string]bool{}
	for _, sa := range ofType[*corev1.ServiceAccount](m) {
		sas[sa.Namespace+"/"+sa.Name] = true
	}
	var subjects [][]rbacv1.Subject
	for _, b := range ofType[*rbacv1.ClusterRoleBinding](m) {
		subjects = append(subjects, b.Subjects)
	}
	for _, b := range ofType[*rbacv1.RoleBinding](m) {
		subjects = append(subjects, b.Subjects)
	}
	for _, ss := range subjects {
		for _, s := range ss {
			if !sas[s.Namespace+"/"+s.Name] {
				t.Errorf("fleet %s: a binding grants to %s/%s, no ServiceAccount of the release", fleet, s.Namespace, s.Name)
			}
		}
	}
	for _, d := range ofType[*appsv1.Deployment](m) {
		if !sas[ns+"/"+d.Spec.Template.Spec.ServiceAccountName] {
			t.Errorf("fleet %s: Deployment %s runs as %s, no ServiceAccount of the release", fleet, d.Name, d.Spec.Template.Spec.ServiceAccountName)
		}
	}
	return w
}
