package controller_test

import (
	"context"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

// interceptorSA is the interceptor's ServiceAccount the suite's operator grants TLS Secrets to.
const interceptorSA = "httpscale-interceptor"

// tlsGrant is the Role the operator keeps in ns for the interceptor (nil when absent).
func tlsGrant(ns string) func() *rbacv1.Role { return tlsGrantFor(interceptorSA, ns) }

// tlsGrantFor is the Role the operator keeps in ns for the interceptor ServiceAccount sa.
func tlsGrantFor(sa, ns string) func() *rbacv1.Role {
	return func() *rbacv1.Role {
		r := &rbacv1.Role{}
		if err := k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: sa + "-tls-secrets"}, r); err != nil {
			return nil
		}
		return r
	}
}

// interceptorMay asks the API server whether the interceptor's ServiceAccount may verb the Secret
// name ("" for a list of the namespace's Secrets) in ns.
func interceptorMay(ns, verb, name string) func() bool {
	return serviceAccountMay(installNS, interceptorSA, ns, verb, name)
}

// serviceAccountMay asks whether the ServiceAccount saNS/sa may verb the Secret name in ns.
func serviceAccountMay(saNS, sa, ns, verb, name string) func() bool {
	return func() bool {
		cs := kubernetes.NewForConfigOrDie(restCfg)
		review, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:" + saNS + ":" + sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + saNS, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Resource: "secrets", Name: name},
		}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		return review.Status.Allowed
	}
}

var _ = Describe("spec.tls", func() {
	It("reports TLSReady from the Secret as it changes, for that object only", func() {
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		shop, blog := app(ns, "shop", "shop."+ns+".example.com"), app(ns, "blog", "blog."+ns+".example.com")
		shop.Spec.TLS = &v1.TLS{SecretName: "shop-tls"}
		blog.Spec.TLS = &v1.TLS{SecretName: "blog-tls"}
		blogCert := tlstermtest.NewCert("blog." + ns + ".example.com")
		Expect(k8s.Create(ctx, blogCert.Secret(ns, "blog-tls"))).To(Succeed())
		Expect(k8s.Create(ctx, shop)).To(Succeed())
		Expect(k8s.Create(ctx, blog)).To(Succeed())

		Eventually(condition(shop, v1.ConditionTLSReady)).Should(And(haveCondition(False, "SecretNotFound"),
			HaveField("Message", ContainSubstring("Secret "+ns+"/shop-tls does not exist"))))
		Eventually(condition(blog, v1.ConditionTLSReady)).Should(haveCondition(True, "CertificateLoaded"))

		// The wrong type, then a certificate for other names, then a key of another certificate.
		opaque := &corev1.Secret{Type: corev1.SecretTypeOpaque}
		opaque.Namespace, opaque.Name = ns, "shop-tls"
		opaque.Data = map[string][]byte{"tls.crt": []byte("x"), "tls.key": []byte("y")}
		Expect(k8s.Create(ctx, opaque)).To(Succeed())
		Eventually(condition(shop, v1.ConditionTLSReady)).Should(And(haveCondition(False, "WrongSecretType"),
			HaveField("Message", ContainSubstring("must be of type kubernetes.io/tls"))))
		Expect(k8s.Delete(ctx, opaque)).To(Succeed())
		other := tlstermtest.NewCert("other.example.com")
		Expect(k8s.Create(ctx, other.Secret(ns, "shop-tls"))).To(Succeed())
		Eventually(condition(shop, v1.ConditionTLSReady)).Should(And(haveCondition(True, "CertificateLoaded"),
			HaveField("Message", ContainSubstring("does not cover [shop."+ns+".example.com]"))))
		s := &corev1.Secret{}
		Expect(k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: "shop-tls"}, s)).To(Succeed())
		s.Data["tls.key"] = blogCert.KeyPEM
		Expect(k8s.Update(ctx, s)).To(Succeed())
		Eventually(condition(shop, v1.ConditionTLSReady)).Should(And(haveCondition(False, "InvalidCertificate"),
			HaveField("Message", ContainSubstring("do not make a certificate"))))
		Eventually(events(shop), eventWait).Should(ContainElement("Warning TLSReadyFalse"))
		Consistently(condition(blog, v1.ConditionTLSReady)).Should(haveCondition(True, "CertificateLoaded"))

		good := tlstermtest.NewCert("shop." + ns + ".example.com")
		s.Data = good.Secret(ns, "shop-tls").Data
		Expect(k8s.Update(ctx, s)).To(Succeed())
		Eventually(condition(shop, v1.ConditionTLSReady)).Should(haveCondition(True, "CertificateLoaded"))
		Expect(tableEntry(ns + "/shop")).To(HaveField("TLSSecret", "shop-tls"))

		// Dropping spec.tls drops the condition.
		update(shop, func(h *v1.HTTPScaledObject) { h.Spec.TLS = nil })
		Eventually(condition(shop, v1.ConditionTLSReady)).Should(HaveField("Type", BeEmpty()))
	})

	It("lets the interceptor read exactly the Secrets its namespace's objects name, and no more", func() {
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		a, b, plain := app(ns, "a", "a."+ns+".example.com"), app(ns, "b", "b."+ns+".example.com"), app(ns, "plain", "plain."+ns+".example.com")
		a.Spec.TLS = &v1.TLS{SecretName: "a-tls"}
		b.Spec.TLS = &v1.TLS{SecretName: "b-tls"}
		for _, h := range []*v1.HTTPScaledObject{a, b, plain} {
			Expect(k8s.Create(ctx, h)).To(Succeed())
		}
		Eventually(tlsGrant(ns)).Should(HaveField("Rules", ConsistOf(HaveField("ResourceNames", Equal([]string{"a-tls", "b-tls"})))))
		// The RoleBinding is written after the Role, and the API server's authorizer learns of both
		// from its own watch: the grant takes effect a moment after the Role appears.
		for _, verb := range []string{"get", "list", "watch"} {
			Eventually(interceptorMay(ns, verb, "a-tls")).Should(BeTrue(), "%s a-tls", verb)
			Eventually(interceptorMay(ns, verb, "b-tls")).Should(BeTrue(), "%s b-tls", verb)
			Expect(interceptorMay(ns, verb, "other")()).To(BeFalse(), "%s a Secret no object names", verb)
		}
		Expect(interceptorMay(ns, "list", "")()).To(BeFalse(), "list every Secret of the namespace")
		Expect(interceptorMay("default", "get", "a-tls")()).To(BeFalse(), "a Secret of that name in another namespace")

		Expect(k8s.Delete(ctx, b)).To(Succeed())
		Eventually(tlsGrant(ns)).Should(HaveField("Rules", ConsistOf(HaveField("ResourceNames", Equal([]string{"a-tls"})))))
		Eventually(interceptorMay(ns, "get", "b-tls")).Should(BeFalse())

		update(a, func(h *v1.HTTPScaledObject) { h.Spec.TLS = nil })
		Eventually(tlsGrant(ns)).Should(BeNil())
		Eventually(interceptorMay(ns, "get", "a-tls")).Should(BeFalse())
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: interceptorSA + "-tls-secrets"}}
		Eventually(isNotFound(binding)).Should(BeTrue())
	})
})
