package charts_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

func TestInstall(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Chart install with RBAC enforced")
}

// The chart installed by Helm on a real kube-apiserver that enforces RBAC; each binary then runs out of
// cluster with a token of its own chart ServiceAccount, as it would in a pod.
var _ = Describe("helm install on an API server with RBAC", Ordered, func() {
	const ns = "httpscale-system"
	var (
		admin      *rest.Config
		kubeconfig string
		cs         *kubernetes.Clientset
		dyn        *dynamic.DynamicClient
		bins       string
		tokens     = map[string]*rest.Config{}
		tokenFiles = map[string]string{}
		notes      string
	)
	helmArgs := func(args ...string) []string {
		return append(args, "--namespace", ns, "--kubeconfig", kubeconfig)
	}

	BeforeAll(func(ctx SpecContext) {
		assets, err := testenv.AssetsDir()
		Expect(err).NotTo(HaveOccurred())
		keda, err := testenv.KEDACRDDir()
		Expect(err).NotTo(HaveOccurred())
		// Only KEDA's CRDs: ours must come from the chart.
		env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDDirectoryPaths: []string{keda}, ErrorIfCRDPathMissing: true}
		// envtest waits 10 s for the CRDs to be served, which a shared 2-core machine under load misses.
		env.CRDInstallOptions.MaxTime = 2 * time.Minute
		admin, err = env.Start()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		kubeconfig, err = testenv.WriteKubeconfig(env, GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		cs = kubernetes.NewForConfigOrDie(admin)
		dyn = dynamic.NewForConfigOrDie(admin)

		bins = GinkgoT().TempDir()
		build := exec.CommandContext(ctx, "go", "build", "-o", bins+string(filepath.Separator), "./operator", "./interceptor", "./scaler")
		build.Dir = testenv.RepoRoot()
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build: %s", out)

		// hack/rbac-proof.sh (also the documented way to check an install, docs/install.md): helm
		// install, then one token-only kubeconfig per component. The local cluster does the same in
		// Go (hack/cluster/localcluster/components.go).
		proofDir := GinkgoT().TempDir()
		proof := exec.CommandContext(ctx, filepath.Join(testenv.RepoRoot(), "hack", "rbac-proof.sh"), proofDir)
		proof.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "HELM="+helm(GinkgoT()), "KUBECTL="+filepath.Join(assets, "kubectl"),
			"HELM_CACHE_HOME="+GinkgoT().TempDir(), "HELM_CONFIG_HOME="+GinkgoT().TempDir(), "HELM_DATA_HOME="+GinkgoT().TempDir())
		var stderr bytes.Buffer
		proof.Stderr = &stderr
		out, err = proof.Output()
		Expect(err).NotTo(HaveOccurred(), "hack/rbac-proof.sh: %s", stderr.String())
		notes = stderr.String()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			c, path, _ := strings.Cut(line, " ")
			tokenFiles[c] = path
			tokens[c], err = clientcmd.BuildConfigFromFlags("", path)
			Expect(err).NotTo(HaveOccurred())
			Expect(tokens[c].CertFile+tokens[c].KeyFile+string(tokens[c].CertData)).To(BeEmpty(), "%s's kubeconfig must carry only a token", c)
			Expect(tokens[c].BearerToken).NotTo(BeEmpty())
		}
		Expect(tokenFiles).To(HaveLen(len(components)))
	}, NodeTimeout(10*time.Minute))

	It("installs the HTTPScaledObject CRD from the chart", func(ctx SpecContext) {
		crd := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
		_, err := dyn.Resource(crd).Get(ctx, "httpscaledobjects.httpscale.dev", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
	})

	It("prints NOTES with a valid first HTTPScaledObject and how to send traffic through the interceptor", func() {
		Expect(notes).To(ContainSubstring("port-forward svc/httpscale-interceptor 8080:8080"))
		Expect(notes).To(ContainSubstring("curl -H 'Host: shop.example.com' http://127.0.0.1:8080/"))
		_, rest, found := strings.Cut(notes, "cat <<YAML | kubectl apply -f -\n")
		Expect(found).To(BeTrue(), "NOTES carry an example to apply:\n%s", notes)
		example, _, found := strings.Cut(rest, "\n  YAML\n")
		Expect(found).To(BeTrue())
		var lines []string
		for _, l := range strings.Split(example, "\n") {
			lines = append(lines, strings.TrimPrefix(l, "  "))
		}
		js, err := yaml.YAMLToJSON([]byte(strings.Join(lines, "\n")))
		Expect(err).NotTo(HaveOccurred())
		obj, _, err := strict.Decode(js, nil, nil)
		Expect(err).NotTo(HaveOccurred(), "the example must use only real fields")
		hso, ok := obj.(*httpscalev1alpha1.HTTPScaledObject)
		Expect(ok).To(BeTrue(), "decoded %T", obj)
		Expect(hso.Spec.Hosts).To(ConsistOf(BeEquivalentTo("shop.example.com")))
		Expect(hso.Spec.ScaleTargetRef.Name).To(Equal("shop"))
		Expect(hso.Spec.ScaleTargetRef.Service).To(Equal("shop"))
	})

	It("grants each ServiceAccount every permission its markers ask for", func(ctx SpecContext) {
		for _, c := range components {
			client := kubernetes.NewForConfigOrDie(tokens[c])
			for _, role := range generatedRoles(GinkgoT(), c) {
				roleNS := ""
				if role.GetNamespace() != "" {
					roleNS = ns
				}
				for _, r := range rules(role) {
					for _, group := range r.APIGroups {
						for _, res := range r.Resources {
							for _, verb := range r.Verbs {
								// A rule limited to some names grants those (the chart's default
								// fleet keeps the markers' names).
								names := r.ResourceNames
								if len(names) == 0 {
									names = []string{""}
								}
								for _, name := range names {
									attrs := resourceAttributes(roleNS, group, res, verb)
									attrs.Name = name
									Expect(allowed(ctx, client, attrs)).To(BeTrue(), "%s should be allowed to %s %s.%s %q in %q", c, verb, res, group, name, roleNS)
								}
							}
						}
					}
				}
			}
		}
	})

	It("denies each ServiceAccount what its markers do not ask for", func(ctx SpecContext) {
		denied := map[string][]authorizationv1.ResourceAttributes{
			"operator": {
				{Verb: "delete", Group: "apps", Resource: "deployments", Namespace: "default"},
				{Verb: "update", Resource: "services", Namespace: "default"},
				{Verb: "create", Resource: "configmaps", Namespace: "default"},
				{Verb: "update", Group: "apps", Resource: "deployments", Subresource: "scale", Namespace: "default"},
				// Fleet Leases: listed cluster-wide, written only in the install namespace.
				{Verb: "watch", Group: "coordination.k8s.io", Resource: "leases"},
				{Verb: "update", Group: "coordination.k8s.io", Resource: "leases", Namespace: "default"},
				// Only its own webhook configurations: never another product's (a sidecar injector).
				{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "mutatingwebhookconfigurations", Name: "sidecar-injector"},
				{Verb: "update", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations", Name: "policy"},
				// Tenancy: it never writes an HTTPScaledObject's spec or a HostClaim's, nor the
				// platform's policies, and of Roles and RoleBindings only its own grants by name.
				{Verb: "update", Group: "httpscale.dev", Resource: "httpscaledobjects", Namespace: "default"},
				{Verb: "update", Group: "httpscale.dev", Resource: "hostclaims", Name: "any"},
				{Verb: "create", Group: "httpscale.dev", Resource: "httpscalepolicies"},
				{Verb: "update", Group: "rbac.authorization.k8s.io", Resource: "roles", Namespace: "default", Name: "admin"},
				{Verb: "delete", Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespace: "default", Name: "admin"},
			},
			"interceptor": {
				{Verb: "create", Resource: "configmaps", Namespace: ns},
				{Verb: "list", Resource: "configmaps", Namespace: "default"},
				{Verb: "list", Group: "httpscale.dev", Resource: "httpscaledobjects"},
				{Verb: "list", Resource: "nodes"},
				{Verb: "get", Resource: "secrets", Namespace: ns},
				{Verb: "get", Resource: "secrets", Namespace: "default", Name: "any"},
				{Verb: "list", Resource: "secrets", Namespace: "default"},
				// Pods: a starting pod is read by name (cold-start probes), never listed, watched,
				// changed, exec'd into or its logs read.
				{Verb: "watch", Resource: "pods"},
				{Verb: "list", Resource: "pods", Namespace: "default"},
				{Verb: "update", Resource: "pods", Namespace: "default"},
				{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "default"},
				{Verb: "get", Resource: "pods", Subresource: "log", Namespace: "default"},
			},
			"scaler": {
				{Verb: "update", Group: "httpscale.dev", Resource: "httpscaledobjects", Namespace: "default"},
				{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices", Namespace: "default"},
				{Verb: "list", Resource: "configmaps", Namespace: ns},
				{Verb: "get", Resource: "secrets", Namespace: ns},
			},
		}
		everyone := []authorizationv1.ResourceAttributes{
			{Verb: "list", Resource: "pods"},
			{Verb: "create", Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
		}
		// The operator reads Secrets cluster-wide: it must hold what it grants the interceptor (exactly
		// the Secrets spec.tls names) and reports TLSReady from them. Nobody else may list them.
		for _, c := range []string{"interceptor", "scaler"} {
			denied[c] = append(denied[c], authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"})
		}
		for _, c := range components {
			client := kubernetes.NewForConfigOrDie(tokens[c])
			for _, attrs := range append(denied[c], everyone...) {
				Expect(allowed(ctx, client, attrs)).To(BeFalse(), "%s must not be allowed to %+v", c, attrs)
			}
		}
	})

	It("runs the operator with its token: it wins leader election and hits no forbidden call", func(ctx SpecContext) {
		p := startBinary(bins, "operator", tokenFiles["operator"], ns)
		Eventually(p.ready).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), p.logs)
		Eventually(func(g Gomega) {
			if err := p.allowedSoFar(); err != nil {
				StopTrying(err.Error()).Now()
			}
			lease, err := cs.CoordinationV1().Leases(ns).Get(ctx, "operator.httpscale.dev", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(lease.Spec.HolderIdentity).NotTo(BeNil())
			g.Expect(*lease.Spec.HolderIdentity).NotTo(BeEmpty())
			// The leader announces its fleet (and lists every fleet's Lease, which needs no forbidden call).
			fleet, err := cs.CoordinationV1().Leases(ns).Get(ctx, "default.fleet.httpscale.dev", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fleet.Labels).To(HaveKeyWithValue("httpscale.dev/fleet", "default"))
		}).WithContext(ctx).WithTimeout(60*time.Second).Should(Succeed(), p.logs)
		Consistently(p.allowedSoFar).WithTimeout(3 * time.Second).Should(Succeed())
		p.stop()
	}, SpecTimeout(3*time.Minute))

	It("runs the operator's self-managed webhook certificate with its token: Secret and caBundle filled", func(ctx SpecContext) {
		// Empty what an earlier operator run may have filled, so only this run can pass the check.
		secret, err := cs.CoreV1().Secrets(ns).Get(ctx, "httpscale-operator-webhook-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		secret.Data = nil
		_, err = cs.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "httpscale-operator-webhook", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		vwc.Webhooks[0].ClientConfig.CABundle = nil
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		p := startBinary(bins, "operator", tokenFiles["operator"], ns)
		// Ready first: a SIGTERM that arrives before the process installed its signal handler kills it.
		Eventually(p.ready).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), p.logs)
		Eventually(func(g Gomega) {
			if err := p.allowedSoFar(); err != nil {
				StopTrying(err.Error()).Now()
			}
			secret, err := cs.CoreV1().Secrets(ns).Get(ctx, "httpscale-operator-webhook-tls", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(secret.Data).To(HaveKey("tls.crt"))
			g.Expect(secret.Data).To(HaveKey("ca.crt"))
			vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "httpscale-operator-webhook", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vwc.Webhooks[0].ClientConfig.CABundle).To(Equal(secret.Data["ca.crt"]))
		}).WithContext(ctx).WithTimeout(60*time.Second).Should(Succeed(), p.logs)
		p.stop()
	}, SpecTimeout(3*time.Minute))

	for _, c := range []string{"interceptor", "scaler"} {
		It("runs the "+c+" with its token until ready, hitting no forbidden call", func(ctx SpecContext) {
			p := startBinary(bins, c, tokenFiles[c], ns)
			Eventually(p.ready).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(), p.logs)
			Consistently(p.allowedSoFar).WithTimeout(3 * time.Second).Should(Succeed())
			p.stop()
		}, SpecTimeout(3*time.Minute))
	}

	It("lets the interceptor read exactly the TLS Secrets objects name: the operator grants them, the interceptor serves them", func(ctx SpecContext) {
		const appNS = "tls-app"
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = cs.CoreV1().Services(appNS).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		labels := map[string]string{"app": "web"}
		_, err = cs.AppsV1().Deployments(appNS).Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: appsv1.DeploymentSpec{
			Replicas: ptr[int32](0), Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}},
		}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		web, other := tlstermtest.NewCert("web.example.com"), tlstermtest.NewCert("other.example.com")
		for _, s := range []*corev1.Secret{web.Secret(appNS, "web-tls"), other.Secret(appNS, "other-tls")} {
			_, err = cs.CoreV1().Secrets(appNS).Create(ctx, s, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		hso := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "httpscale.dev/v1alpha1", "kind": "HTTPScaledObject",
			"metadata": map[string]any{"name": "web", "namespace": appNS},
			"spec": map[string]any{"hosts": []any{"web.example.com"}, "tls": map[string]any{"secretName": "web-tls"},
				"scaleTargetRef": map[string]any{"name": "web", "service": "web", "port": int64(80)}},
		}}
		// The API server here cannot reach the webhook Service (the operator runs out of cluster): let
		// the object in without it. The operator's own writes to the object afterwards (its finalizer)
		// leave the spec alone, so the webhook is not asked about them.
		policy := setWebhookPolicy(ctx, cs, admissionregistrationv1.Ignore)
		hsoGVR := schema.GroupVersionResource{Group: "httpscale.dev", Version: "v1alpha1", Resource: "httpscaledobjects"}
		_, err = dyn.Resource(hsoGVR).Namespace(appNS).Create(ctx, hso, metav1.CreateOptions{})
		setWebhookPolicy(ctx, cs, policy)
		Expect(err).NotTo(HaveOccurred())

		op := startBinary(bins, "operator", tokenFiles["operator"], ns)
		interceptor := kubernetes.NewForConfigOrDie(tokens["interceptor"])
		Eventually(func(g Gomega) {
			if err := op.allowedSoFar(); err != nil {
				StopTrying(err.Error()).Now()
			}
			g.Expect(allowed(ctx, interceptor, authorizationv1.ResourceAttributes{Namespace: appNS, Verb: "watch", Resource: "secrets", Name: "web-tls"})).To(BeTrue())
		}).WithContext(ctx).WithTimeout(90*time.Second).Should(Succeed(), op.logs)
		for _, verb := range []string{"get", "list", "watch"} {
			Expect(allowed(ctx, interceptor, authorizationv1.ResourceAttributes{Namespace: appNS, Verb: verb, Resource: "secrets", Name: "web-tls"})).To(BeTrue(), verb)
			Expect(allowed(ctx, interceptor, authorizationv1.ResourceAttributes{Namespace: appNS, Verb: verb, Resource: "secrets", Name: "other-tls"})).To(BeFalse(), verb+" a Secret no object names")
		}
		Expect(allowed(ctx, interceptor, authorizationv1.ResourceAttributes{Namespace: appNS, Verb: "list", Resource: "secrets"})).To(BeFalse(), "list the namespace's Secrets")

		tlsAddr := freeAddr()
		ic := startBinary(bins, "interceptor", tokenFiles["interceptor"], ns, "HTTPSCALE_TLS_BIND_ADDRESS="+tlsAddr)
		Eventually(func() error {
			if err := ic.allowedSoFar(); err != nil {
				return err
			}
			c, err := tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: "web.example.com", RootCAs: web.Pool})
			if err != nil {
				return err
			}
			return c.Close()
		}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), ic.logs)
		// A Secret no object names is not served (and could not be read).
		_, err = tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: "other.example.com", RootCAs: other.Pool})
		Expect(err).To(MatchError(ContainSubstring("unrecognized name")))
		Consistently(ic.allowedSoFar).WithTimeout(3 * time.Second).Should(Succeed())
		Expect(op.allowedSoFar()).To(Succeed())
		ic.stop()
		// The object goes (the operator removes its finalizer), then the grant.
		Expect(dyn.Resource(hsoGVR).Namespace(appNS).Delete(ctx, "web", metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() bool {
			return allowed(ctx, interceptor, authorizationv1.ResourceAttributes{Namespace: appNS, Verb: "get", Resource: "secrets", Name: "web-tls"})
		}).WithContext(ctx).WithTimeout(60*time.Second).Should(BeFalse(), op.logs)
		op.stop()
	}, SpecTimeout(4*time.Minute))

	It("keeps the operator's webhook certificate and caBundle across helm upgrade, and adds the fleet ScaledObject", func(ctx SpecContext) {
		secret, err := cs.CoreV1().Secrets(ns).Get(ctx, "httpscale-operator-webhook-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		secret.Data = map[string][]byte{"tls.crt": []byte("CERT"), "tls.key": []byte("KEY"), "ca.crt": []byte("CA")}
		_, err = cs.CoreV1().Secrets(ns).Update(ctx, secret, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "httpscale-operator-webhook", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		vwc.Webhooks[0].ClientConfig.CABundle = []byte("CA")
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		out, err := runHelm(GinkgoT(), helmArgs("upgrade", "httpscale", chartDir, "--set", "interceptor.autoscaling.enabled=true", "--set", "operator.replicas=3")...)
		Expect(err).NotTo(HaveOccurred(), out)

		op, err := cs.AppsV1().Deployments(ns).Get(ctx, "httpscale-operator", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(*op.Spec.Replicas).To(BeEquivalentTo(3), "the upgrade took effect")
		secret, err = cs.CoreV1().Secrets(ns).Get(ctx, "httpscale-operator-webhook-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(secret.Data).To(HaveKeyWithValue("tls.crt", []byte("CERT")))
		vwc, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "httpscale-operator-webhook", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(vwc.Webhooks[0].ClientConfig.CABundle).To(Equal([]byte("CA")))

		so := schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}
		obj, err := dyn.Resource(so).Namespace(ns).Get(ctx, "httpscale-interceptor", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		fleet, _, _ := unstructured.NestedSlice(obj.Object, "spec", "triggers")
		Expect(fleet).To(HaveLen(1))
	})

	It("creates the NetworkPolicies and, with scaler.tls, KEDA's ClusterTriggerAuthentication and both certificates, which a second upgrade keeps", func(ctx SpecContext) {
		nps, err := cs.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, np := range nps.Items {
			names = append(names, np.Name)
		}
		Expect(names).To(ConsistOf("httpscale-interceptor", "httpscale-operator", "httpscale-scaler"))

		_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "keda"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		out, err := runHelm(GinkgoT(), helmArgs("upgrade", "httpscale", chartDir, "--reuse-values", "--set", "scaler.tls.enabled=true")...)
		Expect(err).NotTo(HaveOccurred(), out)
		server, err := cs.CoreV1().Secrets(ns).Get(ctx, "httpscale-scaler-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		client, err := cs.CoreV1().Secrets("keda").Get(ctx, "httpscale-keda-client-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(client.Data["caCert"]).To(Equal(server.Data["ca.crt"]))
		cta := schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "clustertriggerauthentications"}
		_, err = dyn.Resource(cta).Get(ctx, "httpscale-scaler-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		so := schema.GroupVersionResource{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"}
		obj, err := dyn.Resource(so).Namespace(ns).Get(ctx, "httpscale-interceptor", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		triggers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "triggers")
		Expect(triggers[0]).To(HaveKeyWithValue("authenticationRef", HaveKeyWithValue("kind", "ClusterTriggerAuthentication")))

		// Generated once: an upgrade (any upgrade) keeps the CA and both certificates.
		out, err = runHelm(GinkgoT(), helmArgs("upgrade", "httpscale", chartDir, "--reuse-values")...)
		Expect(err).NotTo(HaveOccurred(), out)
		again, err := cs.CoreV1().Secrets(ns).Get(ctx, "httpscale-scaler-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Data).To(Equal(server.Data))
		againClient, err := cs.CoreV1().Secrets("keda").Get(ctx, "httpscale-keda-client-tls", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(againClient.Data).To(Equal(client.Data))

		out, err = runHelm(GinkgoT(), helmArgs("upgrade", "httpscale", chartDir, "--reuse-values", "--set", "scaler.tls.enabled=false")...)
		Expect(err).NotTo(HaveOccurred(), out)
		_, err = cs.CoreV1().Secrets("keda").Get(ctx, "httpscale-keda-client-tls", metav1.GetOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "KEDA's client certificate left behind: %v", err)
	})

	It("installs a second release for another fleet in the same namespace, whose webhook checks only that fleet's objects", func(ctx SpecContext) {
		out, err := runHelm(GinkgoT(), helmArgs("install", "blue", chartDir, "--set", "fleet=blue")...)
		Expect(err).NotTo(HaveOccurred(), out)
		for _, name := range []string{"httpscale-operator", "httpscale-blue-operator"} {
			_, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred(), "ClusterRole %s", name)
		}

		// No operator runs, so a webhook that is asked fails the request (failurePolicy Fail); the
		// error names the webhook, so it says which fleet's webhook the API server called.
		hsos := dyn.Resource(httpscalev1alpha1.GroupVersion.WithResource("httpscaledobjects")).Namespace("default")
		create := func(name, fleet string) error {
			spec := map[string]any{"hosts": []any{name + ".example.com"}, "scaleTargetRef": map[string]any{"name": name, "service": name, "port": int64(80)}}
			if fleet != "" {
				spec["fleet"] = fleet
			}
			obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": httpscalev1alpha1.GroupVersion.String(), "kind": "HTTPScaledObject",
				"metadata": map[string]any{"name": name}, "spec": spec}}
			_, err := hsos.Create(ctx, obj, metav1.CreateOptions{})
			return err
		}
		Expect(create("red", "")).To(MatchError(ContainSubstring(`failed calling webhook "httpscaledobjects.httpscale.dev"`)))
		Expect(create("blue", "blue")).To(MatchError(ContainSubstring(`failed calling webhook "blue.httpscaledobjects.httpscale.dev"`)))
		Expect(create("nobody", "nobody")).To(Succeed(), "no release serves fleet nobody, so no webhook is asked")
		Expect(hsos.Delete(ctx, "nobody", metav1.DeleteOptions{})).To(Succeed())

		out, err = runHelm(GinkgoT(), helmArgs("uninstall", "blue", "--wait")...)
		Expect(err).NotTo(HaveOccurred(), out)
		_, err = cs.RbacV1().ClusterRoles().Get(ctx, "httpscale-operator", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "uninstalling fleet blue leaves the default fleet's release alone")
		_, err = cs.AppsV1().Deployments(ns).Get(ctx, "httpscale-operator", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "uninstalling fleet blue leaves the default fleet's release alone")
	}, SpecTimeout(3*time.Minute))

	It("lets writes that leave the spec alone through while the webhook cannot answer; a spec change still needs it", func(ctx SpecContext) {
		// No operator runs here, so the webhook cannot answer and the chart's failurePolicy (Fail)
		// refuses whatever it is asked about. Let the object itself in without it.
		hsos := dyn.Resource(httpscalev1alpha1.GroupVersion.WithResource("httpscaledobjects")).Namespace("default")
		setWebhookPolicy(ctx, cs, admissionregistrationv1.Ignore)
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": httpscalev1alpha1.GroupVersion.String(), "kind": "HTTPScaledObject",
			"metadata": map[string]any{"name": "meta"},
			"spec":     map[string]any{"hosts": []any{"meta.example.com"}, "scaleTargetRef": map[string]any{"name": "meta", "service": "meta", "port": int64(80)}}}}
		_, err := hsos.Create(ctx, obj, metav1.CreateOptions{})
		setWebhookPolicy(ctx, cs, admissionregistrationv1.Fail)
		Expect(err).NotTo(HaveOccurred())

		patch := func(p string) error {
			_, err := hsos.Patch(ctx, "meta", types.MergePatchType, []byte(p), metav1.PatchOptions{})
			return err
		}
		// What the operator writes (its finalizer) and what users add (labels) pass without the webhook.
		Expect(patch(`{"metadata":{"labels":{"team":"a"},"finalizers":["example.com/hold"]}}`)).To(Succeed())
		// A spec change is still checked, so with the webhook unreachable it is refused.
		Expect(patch(`{"spec":{"hosts":["other.example.com"]}}`)).To(MatchError(ContainSubstring(`failed calling webhook "httpscaledobjects.httpscale.dev"`)))
		// A deletion completes: its finalizer removal leaves the spec alone too.
		Expect(hsos.Delete(ctx, "meta", metav1.DeleteOptions{})).To(Succeed())
		Expect(patch(`{"metadata":{"finalizers":null}}`)).To(Succeed())
		Eventually(func() bool {
			_, err := hsos.Get(ctx, "meta", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
	}, SpecTimeout(2*time.Minute))

	It("leaves nothing of the release behind on helm uninstall except the CRD and what the operator wrote (lease, routing table)", func(ctx SpecContext) {
		out, err := runHelm(GinkgoT(), helmArgs("uninstall", "httpscale", "--wait")...)
		Expect(err).NotTo(HaveOccurred(), out)

		kinds := []schema.GroupVersionResource{
			{Version: "v1", Resource: "configmaps"}, {Version: "v1", Resource: "secrets"}, {Version: "v1", Resource: "services"},
			{Version: "v1", Resource: "serviceaccounts"}, {Group: "apps", Version: "v1", Resource: "deployments"},
			{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, {Group: "coordination.k8s.io", Version: "v1", Resource: "leases"},
			{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
			{Group: "keda.sh", Version: "v1alpha1", Resource: "scaledobjects"},
		}
		var left []string
		for _, gvr := range kinds {
			list, err := dyn.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			for _, o := range list.Items {
				// Objects every namespace gets from the control plane, and the routing table the operator
				// writes at run time (documented in docs/install.md: deleting the namespace removes it).
				if o.GetName() == "kube-root-ca.crt" || (o.GetName() == "default" && gvr.Resource == "serviceaccounts") ||
					(gvr.Resource == "configmaps" && o.GetLabels()["httpscale.dev/routing-table"] != "") {
					continue
				}
				left = append(left, gvr.Resource+"/"+o.GetName())
			}
		}
		Expect(left).To(ConsistOf("leases/operator.httpscale.dev", "leases/default.fleet.httpscale.dev"))

		clusterKinds := []schema.GroupVersionResource{
			{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
			{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
			{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
		}
		for _, gvr := range clusterKinds {
			list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=httpscale"})
			Expect(err).NotTo(HaveOccurred())
			Expect(list.Items).To(BeEmpty(), "%s left behind", gvr.Resource)
		}
		crd := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
		_, err = dyn.Resource(crd).Get(ctx, "httpscaledobjects.httpscale.dev", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "Helm keeps CRDs by design")
	})
})

// resourceAttributes turns one generated rule entry into an access question; wildcards become a
// concrete example (any resource's scale subresource is asked as deployments/scale).
func resourceAttributes(ns, group, resource, verb string) authorizationv1.ResourceAttributes {
	res, sub, _ := strings.Cut(resource, "/")
	if res == "*" {
		res = "deployments"
	}
	if group == "*" {
		group = "apps"
	}
	return authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Resource: res, Subresource: sub, Verb: verb}
}

// allowed asks the API server, as the client's own identity, whether it may do attrs.
func allowed(ctx context.Context, client *kubernetes.Clientset, attrs authorizationv1.ResourceAttributes) bool {
	GinkgoHelper()
	review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return review.Status.Allowed
}

// process is one httpscale binary running out of cluster.
type process struct {
	cmd   *exec.Cmd
	probe string
	mu    sync.Mutex
	out   bytes.Buffer
	done  chan struct{} // closed when the process has exited; err is then set
	err   error
}

func (p *process) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = GinkgoWriter.Write(b)
	return p.out.Write(b)
}

func (p *process) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// allowedSoFar stops an Eventually at once when the binary has exited or logged an RBAC denial.
func (p *process) allowedSoFar() error {
	select {
	case <-p.done:
		return StopTrying(fmt.Sprintf("exited: %v", p.err))
	default:
	}
	logs := p.logs()
	if i := strings.Index(logs, "is forbidden"); i >= 0 {
		line := logs[strings.LastIndex(logs[:i], "\n")+1:]
		line, _, _ = strings.Cut(line, "\n")
		return StopTrying("missing permission: " + line)
	}
	return nil
}

// ready succeeds once the binary's /readyz answers 200.
func (p *process) ready() error {
	if err := p.allowedSoFar(); err != nil {
		return err
	}
	resp, err := http.Get("http://" + p.probe + "/readyz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz answered %d", resp.StatusCode)
	}
	return nil
}

// stop sends SIGTERM and expects a clean exit within 30 s (then SIGKILL).
func (p *process) stop() {
	GinkgoHelper()
	Expect(p.cmd.Process.Signal(syscall.SIGTERM)).To(Succeed())
	select {
	case <-p.done:
		Expect(p.err).NotTo(HaveOccurred(), "exit after SIGTERM; logs:\n%s", p.logs())
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		Fail("did not exit within 30s of SIGTERM")
	}
}

// startBinary runs bins/<name> against the API server with kubeconfig as its only credentials. Every
// address is a free loopback port, passed as flags the binary has today and as HTTPSCALE_* variables for
// the listeners it may add, so the test never collides with anything else on the machine; env adds
// or overrides variables.
func startBinary(bins, name, kubeconfig, ns string, env ...string) *process {
	GinkgoHelper()
	p := &process{probe: freeAddr(), done: make(chan struct{})}
	p.cmd = exec.Command(filepath.Join(bins, name), "--kubeconfig="+kubeconfig, "--health-probe-bind-address="+p.probe, "--metrics-bind-address=0")
	p.cmd.Env = append(os.Environ(),
		"POD_NAMESPACE="+ns,
		"POD_NAME="+name+"-0",
		"HTTPSCALE_PROXY_BIND_ADDRESS="+freeAddr(),
		"HTTPSCALE_ADMIN_BIND_ADDRESS="+freeAddr(),
		"HTTPSCALE_GRPC_BIND_ADDRESS="+freeAddr(),
		"HTTPSCALE_WEBHOOK_BIND_ADDRESS="+freeAddr(),
	)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p, p
	Expect(p.cmd.Start()).To(Succeed())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	DeferCleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// freeAddr returns a loopback host:port that was free a moment ago.
func freeAddr() string {
	GinkgoHelper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	defer l.Close()
	return l.Addr().String()
}

// setWebhookPolicy sets the failurePolicy of the chart's (default fleet's) webhook and returns the one
// it replaced. The API server of these tests cannot reach the webhook Service, so specs that need an
// object in switch it to Ignore for the create.
func setWebhookPolicy(ctx context.Context, cs kubernetes.Interface, p admissionregistrationv1.FailurePolicyType) admissionregistrationv1.FailurePolicyType {
	var old admissionregistrationv1.FailurePolicyType
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		vwc, err := cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "httpscale-operator-webhook", metav1.GetOptions{})
		if err != nil {
			return err
		}
		old = *vwc.Webhooks[0].FailurePolicy
		vwc.Webhooks[0].FailurePolicy = &p
		_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{})
		return err
	})).To(Succeed())
	return old
}
