package charts_test

import (
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/httpscale/httpscale/pkg/admin"
)

// The internal ports with the defaults: the admin port authenticates, the scaler and the operator
// carry projected tokens bound to its audience, the interceptors' memory is bounded, and every pod of
// the release has an ingress NetworkPolicy.
func TestInternalPortsByDefault(t *testing.T) {
	const ns = "httpscale-system"
	m := render(t, ns)
	ic := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor"), "interceptor")
	for _, arg := range []string{
		"--admin-auth=token", "--admin-token-audience=" + admin.DefaultTokenAudience,
		"--admin-allowed-service-accounts=httpscale-system/httpscale-scaler,httpscale-system/httpscale-operator",
		"--max-held-requests=10000", "--max-held-bytes=256Mi", "--max-header-bytes=32Ki",
		"--max-queue-limit=10000", "--max-readiness-timeout=10m", "--max-request-timeout=1h", "--max-waiting-per-endpoint=1024",
	} {
		if !hasArg(ic, arg) {
			t.Errorf("interceptor args %v lack %s", ic.Args, arg)
		}
	}
	if e := envVar(t, ic, "HTTPSCALE_MEMORY_LIMIT"); e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil ||
		e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" || e.ValueFrom.ResourceFieldRef.ContainerName != "interceptor" {
		t.Errorf("HTTPSCALE_MEMORY_LIMIT = %+v, want the container's memory limit", e)
	}
	for _, c := range []string{"scaler", "operator"} {
		d := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-"+c)
		checkAdminToken(t, d, c)
	}
	if d := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor"); slices.ContainsFunc(d.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Projected != nil }) {
		t.Error("the interceptor mounts a projected token it does not need")
	}

	// NetworkPolicies: ingress only, one per component, each selecting exactly that component's pods.
	pods := map[string]labels.Set{}
	for _, c := range components {
		pods[c] = labels.Set(get[*appsv1.Deployment](t, m, "Deployment", "httpscale-"+c).Spec.Template.Labels)
	}
	selects := func(sel map[string]string) []string {
		var out []string
		for _, c := range components {
			if labels.SelectorFromSet(sel).Matches(pods[c]) {
				out = append(out, c)
			}
		}
		return out
	}
	for _, c := range components {
		np := get[*networkingv1.NetworkPolicy](t, m, "NetworkPolicy", "httpscale-"+c)
		if got := selects(np.Spec.PodSelector.MatchLabels); !slices.Equal(got, []string{c}) {
			t.Errorf("NetworkPolicy %s selects %v, want only %s", np.Name, got, c)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
			t.Errorf("NetworkPolicy %s policy types %v, want Ingress only", np.Name, np.Spec.PolicyTypes)
		}
	}
	rules := func(name string) map[string][]networkingv1.NetworkPolicyPeer {
		out := map[string][]networkingv1.NetworkPolicyPeer{}
		for _, r := range get[*networkingv1.NetworkPolicy](t, m, "NetworkPolicy", name).Spec.Ingress {
			for _, p := range r.Ports {
				out[p.Port.String()] = r.From
			}
		}
		return out
	}
	in := rules("httpscale-interceptor")
	if len(in["http"]) != 0 || len(in["https"]) != 0 {
		t.Errorf("interceptor proxy ports limited to %v by default, want open to clients", in["http"])
	}
	var adminFrom []string
	for _, peer := range in["admin"] {
		if peer.NamespaceSelector != nil || peer.IPBlock != nil || peer.PodSelector == nil {
			t.Errorf("admin port peer %+v, want a pod selector of this namespace", peer)
			continue
		}
		adminFrom = append(adminFrom, selects(peer.PodSelector.MatchLabels)...)
	}
	slices.Sort(adminFrom)
	if !slices.Equal(adminFrom, []string{"operator", "scaler"}) {
		t.Errorf("admin port reachable from %v, want the operator and the scaler", adminFrom)
	}
	sc := rules("httpscale-scaler")
	if d := cmp.Diff(map[string]string{"kubernetes.io/metadata.name": "keda"}, sc["grpc"][0].NamespaceSelector.MatchLabels); len(sc["grpc"]) != 1 || d != "" {
		t.Errorf("scaler gRPC peers %+v, want KEDA's namespace", sc["grpc"])
	}
	if _, ok := sc["metrics"]; ok {
		t.Error("scaler metrics port opened without networkPolicy.metricsFrom")
	}
	if op := rules("httpscale-operator"); len(op) != 1 || len(op["webhook"]) != 0 {
		t.Errorf("operator ingress %v, want only the webhook port, from anyone (the API server)", op)
	}
	// Nothing of the scaler's TLS by default.
	for _, k := range m.keys() {
		if strings.Contains(k, "ClusterTriggerAuthentication") || strings.Contains(k, "scaler-tls") || strings.Contains(k, "keda-client") {
			t.Errorf("%s rendered with scaler.tls.enabled=false", k)
		}
	}
}

// checkAdminToken checks that d's pod mounts a projected token bound to the admin audience and
// passes its path to the binary.
func checkAdminToken(t *testing.T, d *appsv1.Deployment, c string) {
	t.Helper()
	var vol *corev1.Volume
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Projected != nil {
			vol = &d.Spec.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || len(vol.Projected.Sources) != 1 || vol.Projected.Sources[0].ServiceAccountToken == nil {
		t.Fatalf("%s has no projected ServiceAccount token volume: %+v", c, d.Spec.Template.Spec.Volumes)
	}
	tok := vol.Projected.Sources[0].ServiceAccountToken
	if tok.Audience != admin.DefaultTokenAudience || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != 3600 {
		t.Errorf("%s token audience %q expiry %v, want %s and 3600", c, tok.Audience, tok.ExpirationSeconds, admin.DefaultTokenAudience)
	}
	cc := container(t, d, c)
	var dir string
	for _, vm := range cc.VolumeMounts {
		if vm.Name == vol.Name {
			dir = vm.MountPath
		}
	}
	if dir == "" || !hasArg(cc, "--interceptor-admin-token-file="+dir+"/"+tok.Path) {
		t.Errorf("%s args %v mounts %v: want --interceptor-admin-token-file naming the mounted token", c, cc.Args, cc.VolumeMounts)
	}
}

func TestAdminAuthOff(t *testing.T) {
	m := render(t, "httpscale-system", "--set", "interceptor.adminAuth.enabled=false,networkPolicy.enabled=false")
	ic := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor"), "interceptor")
	for _, a := range ic.Args {
		if strings.HasPrefix(a, "--admin-auth") || strings.HasPrefix(a, "--admin-token") || strings.HasPrefix(a, "--admin-allowed") {
			t.Errorf("interceptor arg %s with adminAuth off", a)
		}
	}
	for _, c := range []string{"scaler", "operator"} {
		d := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-"+c)
		for _, a := range container(t, d, c).Args {
			if strings.HasPrefix(a, "--interceptor-admin-token-file") {
				t.Errorf("%s arg %s with adminAuth off", c, a)
			}
		}
	}
	for _, k := range m.keys() {
		if strings.HasPrefix(k, "NetworkPolicy") {
			t.Errorf("%s rendered with networkPolicy.enabled=false", k)
		}
	}
}

// KEDA → scaler mutual TLS from generated certificates: the scaler serves the Secret's certificate
// and requires KEDA's, which chains to the same CA and sits in KEDA's namespace behind the
// ClusterTriggerAuthentication that the operator names in every trigger, the fleet's own included.
func TestScalerTLSGenerated(t *testing.T) {
	const ns = "edge-system"
	m := render(t, ns, "--set", "scaler.tls.enabled=true,scaler.tls.kedaNamespace=autoscaling,interceptor.autoscaling.enabled=true,metrics.serviceMonitor.enabled=true")
	checkConsistent(t, m, ns)
	server := get[*corev1.Secret](t, m, "Secret", "httpscale-scaler-tls")
	client := get[*corev1.Secret](t, m, "Secret", "httpscale-keda-client-tls")
	if server.Namespace != ns || server.Type != corev1.SecretTypeTLS || client.Namespace != "autoscaling" {
		t.Fatalf("Secrets %s/%s (%s) and %s/%s: want the scaler's in %s and KEDA's in autoscaling", server.Namespace, server.Name, server.Type, client.Namespace, client.Name, ns)
	}
	ca := parsePEM(t, server.Data["ca.crt"])
	if !slices.Equal(server.Data["ca.crt"], client.Data["caCert"]) {
		t.Error("KEDA's caCert is not the scaler's CA")
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	leaf := parsePEM(t, server.Data["tls.crt"])
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "httpscale-scaler." + ns + ".svc.cluster.local", KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("scaler certificate for the address KEDA dials: %v", err)
	}
	cli := parsePEM(t, client.Data["tlsClientCert"])
	if _, err := cli.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("KEDA's client certificate: %v", err)
	}
	if len(client.Data["tlsClientKey"]) == 0 || len(server.Data["tls.key"]) == 0 {
		t.Error("a private key is missing")
	}

	cta := get[*kedav1alpha1.ClusterTriggerAuthentication](t, m, "ClusterTriggerAuthentication", "httpscale-scaler-tls")
	got := map[string]string{}
	for _, r := range cta.Spec.SecretTargetRef {
		if r.Name != client.Name {
			t.Errorf("ClusterTriggerAuthentication parameter %s reads Secret %s, want %s", r.Parameter, r.Name, client.Name)
		}
		got[r.Parameter] = r.Key
	}
	// KEDA v2.21's external scaler reads exactly these authentication parameters.
	if d := cmp.Diff(map[string]string{"caCert": "caCert", "tlsClientCert": "tlsClientCert", "tlsClientKey": "tlsClientKey"}, got); d != "" {
		t.Errorf("ClusterTriggerAuthentication parameters (-want +got):\n%s", d)
	}

	sd := get[*appsv1.Deployment](t, m, "Deployment", "httpscale-scaler")
	sc := container(t, sd, "scaler")
	for _, arg := range []string{"--tls-cert-file=/etc/httpscale/scaler-tls/tls.crt", "--tls-key-file=/etc/httpscale/scaler-tls/tls.key", "--tls-client-ca-file=/etc/httpscale/scaler-tls/ca.crt"} {
		if !hasArg(sc, arg) {
			t.Errorf("scaler args %v lack %s", sc.Args, arg)
		}
	}
	mounted := false
	for _, v := range sd.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == server.Name {
			for _, vm := range sc.VolumeMounts {
				mounted = mounted || (vm.Name == v.Name && vm.MountPath == "/etc/httpscale/scaler-tls")
			}
		}
	}
	if !mounted {
		t.Errorf("scaler does not mount %s at /etc/httpscale/scaler-tls", server.Name)
	}
	oc := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-operator"), "operator")
	if !hasArg(oc, "--scaler-tls-authentication=httpscale-scaler-tls") {
		t.Errorf("operator args %v lack --scaler-tls-authentication", oc.Args)
	}
	so := get[*kedav1alpha1.ScaledObject](t, m, "ScaledObject", "httpscale-interceptor")
	tr := so.Spec.Triggers[0]
	if tr.Metadata["enableTLS"] != "true" || tr.AuthenticationRef == nil || tr.AuthenticationRef.Name != cta.Name || tr.AuthenticationRef.Kind != "ClusterTriggerAuthentication" {
		t.Errorf("interceptor fleet trigger %+v, want enableTLS and the ClusterTriggerAuthentication", tr)
	}
}

func TestScalerTLSFromExistingSecrets(t *testing.T) {
	m := render(t, "httpscale-system", "--set", "scaler.tls.enabled=true,scaler.tls.secretName=mine,scaler.tls.clientSecretName=keda-mine")
	if m.find("Secret", "httpscale-scaler-tls") != nil || m.find("Secret", "httpscale-keda-client-tls") != nil {
		t.Errorf("certificates generated although existing Secrets were named: %v", m.keys())
	}
	for _, r := range get[*kedav1alpha1.ClusterTriggerAuthentication](t, m, "ClusterTriggerAuthentication", "httpscale-scaler-tls").Spec.SecretTargetRef {
		if r.Name != "keda-mine" {
			t.Errorf("parameter %s reads %s, want keda-mine", r.Parameter, r.Name)
		}
	}
	found := false
	for _, v := range get[*appsv1.Deployment](t, m, "Deployment", "httpscale-scaler").Spec.Template.Spec.Volumes {
		found = found || (v.Secret != nil && v.Secret.SecretName == "mine")
	}
	if !found {
		t.Error("scaler does not mount Secret mine")
	}
	if _, err := runHelm(t, "template", "httpscale", chartDir, "--set", "scaler.tls.enabled=true,scaler.tls.secretName=mine"); err == nil ||
		!strings.Contains(err.Error(), "clientSecretName") {
		t.Errorf("secretName without clientSecretName: %v, want an error naming scaler.tls.clientSecretName", err)
	}
}

func parsePEM(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("no PEM block in %q", data)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ci/nondefault-values.yaml: every setting of the internal ports turned.
func TestInternalPortsNonDefault(t *testing.T) {
	const ns = "platform"
	m := render(t, ns, "--values", filepath.Join(chartDir, "ci", "nondefault-values.yaml"))
	ic := container(t, get[*appsv1.Deployment](t, m, "Deployment", "httpscale-interceptor"), "interceptor")
	for _, arg := range []string{
		"--max-held-requests=20000", "--max-held-bytes=536870912", "--max-header-bytes=32Ki", "--max-queue-limit=0",
		"--max-readiness-timeout=5m", "--max-request-timeout=30m", "--max-waiting-per-endpoint=0", "--admin-token-audience=edge.example.com/interceptor-admin",
		"--admin-allowed-service-accounts=platform/httpscale-scaler,platform/httpscale-operator,monitoring/federation",
	} {
		if !hasArg(ic, arg) {
			t.Errorf("interceptor args %v lack %s", ic.Args, arg)
		}
	}
	for _, c := range []string{"scaler", "operator"} {
		for _, v := range get[*appsv1.Deployment](t, m, "Deployment", "httpscale-"+c).Spec.Template.Spec.Volumes {
			if v.Projected != nil {
				tok := v.Projected.Sources[0].ServiceAccountToken
				if tok.Audience != "edge.example.com/interceptor-admin" || *tok.ExpirationSeconds != 7200 {
					t.Errorf("%s token %+v, want the audience and lifetime of the values", c, tok)
				}
			}
		}
	}
	np := get[*networkingv1.NetworkPolicy](t, m, "NetworkPolicy", "httpscale-interceptor")
	if from := np.Spec.Ingress[0].From; len(from) != 1 || from[0].NamespaceSelector.MatchLabels["ingress"] != "true" {
		t.Errorf("proxy ports from %+v, want networkPolicy.proxyFrom", from)
	}
	if from := np.Spec.Ingress[1].From; len(from) != 3 || from[2].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("admin port from %+v, want the scaler, the operator and networkPolicy.metricsFrom", from)
	}
	sc := get[*networkingv1.NetworkPolicy](t, m, "NetworkPolicy", "httpscale-scaler")
	if len(sc.Spec.Ingress) != 2 || sc.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "autoscaling" {
		t.Errorf("scaler ingress %+v, want gRPC from autoscaling and metrics from monitoring", sc.Spec.Ingress)
	}
	if m.find("Secret", "httpscale-keda-client-tls") != nil {
		t.Error("client certificate generated although scaler.tls.clientSecretName names one")
	}
	for _, r := range get[*kedav1alpha1.ClusterTriggerAuthentication](t, m, "ClusterTriggerAuthentication", "httpscale-scaler-tls").Spec.SecretTargetRef {
		if r.Name != "keda-to-scaler" {
			t.Errorf("parameter %s from %s, want keda-to-scaler", r.Parameter, r.Name)
		}
	}
}
