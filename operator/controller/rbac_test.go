package controller_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

// The API server enforces RBAC; this runs the operator as a user holding only the roles generated
// from the operator's RBAC markers (config/rbac/operator), with leader election on.
var _ = Describe("The operator's generated RBAC", func() {
	It("is enough to route, scale, finalize, probe, report and redirect a Serve-mode Service", func() {
		const user = "httpscale-operator"
		raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "operator", "role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			if strings.TrimSpace(strings.Trim(doc, "-")) == "" {
				continue
			}
			obj := &unstructured.Unstructured{}
			Expect(yaml.Unmarshal([]byte(doc), &obj.Object)).To(Succeed())
			Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, obj))).To(Succeed())
			subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
			ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: obj.GetKind(), Name: obj.GetName()}
			meta := metav1.ObjectMeta{Name: user + "-test", Namespace: obj.GetNamespace()}
			if obj.GetKind() == "ClusterRole" {
				Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, Subjects: subject, RoleRef: ref}))).To(Succeed())
			} else {
				Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subject, RoleRef: ref}))).To(Succeed())
			}
		}
		u, err := env.AddUser(envtest.User{Name: user}, nil)
		Expect(err).NotTo(HaveOccurred())

		// One writer of the table at a time: the suite's operator steps aside for this spec.
		op.stop()
		DeferCleanup(func() { op = startOperator(defaultOptions()) })
		limited := startOperatorAs(u.Config(), defaultOptions(), true)
		DeferCleanup(limited.stop)

		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		fake := newFakeInterceptor("192.0.2.20")
		publishFleet("rbac-fleet", []*fakeInterceptor{fake})
		DeferCleanup(func() {
			Expect(k8s.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "rbac-fleet", Namespace: installNS}})).To(Succeed())
		})
		createService(ns, "sts")
		createStatefulSet(ns, "sts")
		h := hso(ns, "sts", "rbac."+ns+".example.com")
		h.Spec.ScaleTargetRef.Kind = "StatefulSet"
		// A TLS Secret: granting the interceptor access to it passes the API server's escalation check
		// only if the operator holds that access itself.
		h.Spec.TLS = &v1.TLS{SecretName: "sts-tls"}
		Expect(k8s.Create(ctx, h)).To(Succeed())

		// A new leader first reconciles every existing object of the suite (and holds its first write
		// up to 30 s for them), so allow for that before each of this object's turns: after the
		// spec that creates 200 objects, its client-side rate limit queues them for a minute or more.
		const turn = 2 * time.Minute
		Eventually(entryOf(ns+"/sts"), turn).ShouldNot(BeNil())
		Eventually(scaledObject(h), turn).ShouldNot(BeNil())
		Eventually(condition(h, v1.ConditionReady), turn).Should(haveCondition(True, "Ready"))
		Eventually(events(h), eventWait).Should(ContainElement("Normal ScaledObjectCreated"))
		Eventually(condition(h, v1.ConditionTLSReady), turn).Should(haveCondition(False, "SecretNotFound"))
		Eventually(tlsGrant(ns), turn).Should(HaveField("Rules", ConsistOf(HaveField("ResourceNames", Equal([]string{"sts-tls"})))))

		// Serve mode: the app's EndpointSlices and Deployment are read uncached, the redirect slice
		// created and deleted in the app's namespace.
		web := serveApp(ns, "web")
		Expect(k8s.Create(ctx, web)).To(Succeed())
		Eventually(redirectTargets(ns, "web"), turn).Should(ConsistOf(MatchRegexp(`^192\.0\.2\.20:2\d{4} http$`)), "the app's Serve port")
		appSlice(ns, "web", "10.244.3.3", true)
		Eventually(condition(web, v1.ConditionServing), turn).Should(haveCondition(True, v1.ServingReasonDirect))
		Expect(redirect(ns, "web")()).To(BeNil())
		scaleDeployment(ns, "web", 0)
		Eventually(redirect(ns, "web"), turn).ShouldNot(BeNil())

		Expect(k8s.Delete(ctx, h)).To(Succeed())
		Expect(k8s.Delete(ctx, web)).To(Succeed())
		Eventually(isNotFound(h), turn).Should(BeTrue())
		Eventually(isNotFound(web), turn).Should(BeTrue())
		Expect(redirect(ns, "web")()).To(BeNil())
		Expect(tableEntry(ns + "/sts")).To(BeNil())
	})
})
