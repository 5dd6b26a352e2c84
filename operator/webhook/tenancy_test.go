package webhook_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// The webhook's half of tenancy: what a tenant tries is turned away at admission, with a message
// naming the field, the host and why, and never the other tenant's namespace or objects. No operator
// runs in this suite, so HostClaims are created here as the operator would.
var _ = Describe("Admission between tenants", func() {
	ctx := context.Background()
	var a, b, host string
	BeforeEach(func() {
		// Specs run in random order: the first may start before the webhook serves its certificate.
		acceptsValidObjects(ctx, "ready-"+utilrand.String(5))
		a, b = "tenant-a-"+utilrand.String(5), "tenant-b-"+utilrand.String(5)
		for _, ns := range []string{a, b} {
			Expect(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
		host = "shop-" + utilrand.String(6) + ".example.com"
	})
	object := func(ns, name string, hosts ...string) *v1.HTTPScaledObject {
		o := valid(name)
		o.Namespace = ns
		o.Spec.Hosts = nil
		for _, h := range hosts {
			o.Spec.Hosts = append(o.Spec.Hosts, v1.Host(h))
		}
		return o
	}
	claim := func(h, ns string) {
		GinkgoHelper()
		hc := &v1.HostClaim{ObjectMeta: metav1.ObjectMeta{Name: v1.HostClaimName(h)}, Spec: v1.HostClaimSpec{Host: v1.Host(h), Namespace: v1.NamespaceName(ns)}}
		Expect(k8s.Create(ctx, hc)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, hc))).To(Succeed()) })
	}
	// refused creates obj and expects the webhook to deny it naming the field and the reason.
	refused := func(obj *v1.HTTPScaledObject, field, message string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			err := k8s.Create(ctx, obj)
			if err == nil {
				_ = k8s.Delete(ctx, obj)
			}
			g.Expect(err).To(HaveOccurred(), "admitted")
			g.Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
			g.Expect(err.Error()).To(ContainSubstring(`admission webhook "httpscaledobjects.httpscale.dev" denied the request`))
			g.Expect(err.Error()).To(ContainSubstring(field))
			g.Expect(err.Error()).To(ContainSubstring(message))
			text := err.Error()
			for _, h := range obj.Spec.Hosts { // a host may name a namespace (shop.<ns>.svc...): the tenant wrote it
				text = strings.ReplaceAll(text, string(h), "")
			}
			g.Expect(text).NotTo(ContainSubstring(b), "the denial must not name the other tenant")
		}).Should(Succeed()) // the webhook's cache sees a claim or object a moment after it is written
	}
	admitted := func(obj *v1.HTTPScaledObject) {
		GinkgoHelper()
		Eventually(func() error { return k8s.Create(ctx, obj) }).Should(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, obj))).To(Succeed()) })
	}

	It("denies a header, path or static-route claim on another namespace's host, and lets the owner's namespace share it", func() {
		claim(host, b)
		hdr := object(a, "hdr", host)
		hdr.Spec.Headers = []v1.HeaderMatch{{Name: "Cookie"}}
		refused(hdr, "spec.hosts[0]", "host "+host+" belongs to another namespace")
		path := object(a, "login", host)
		path.Spec.PathPrefixes = []v1.PathPrefix{"/login"}
		refused(path, "spec.hosts[0]", "belongs to another namespace")
		acme := object(a, "acme", "mine-"+host, host)
		acme.Spec.PathPrefixes = []v1.PathPrefix{"/app"}
		acme.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/.well-known/acme-challenge", Response: &v1.StaticResponse{Body: "x"}}}
		refused(acme, "spec.hosts[1]", "belongs to another namespace")

		shared := object(b, "login", host)
		shared.Spec.PathPrefixes = []v1.PathPrefix{"/login"}
		admitted(shared)
	})

	It("denies a new host an older object of another namespace already asks for", func() {
		admitted(object(b, "first", host))
		refused(object(a, "second", host), "spec.hosts[0]", "claimed by an older object of another namespace")
	})

	It("denies wildcards and the catch-all without a policy, admits them with one, and denies names below another namespace's wildcard", func() {
		domain := "wild-" + utilrand.String(6) + ".example.com"
		refused(object(a, "wild", "*."+domain), "spec.hosts[0]", "a wildcard host covers names other namespaces may own")
		refused(object(a, "all", "*"), "spec.hosts[0]", "the catch-all host *")
		p := &v1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: "wild-" + a}, Spec: v1.HTTPScalePolicySpec{
			Hosts: []v1.HostRule{{Pattern: v1.Host("*." + domain), Wildcards: true, Namespaces: v1.NamespaceSelection{Names: []v1.NamespaceName{v1.NamespaceName(a), v1.NamespaceName(b)}}}}}}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, p)).To(Succeed()) })
		admitted(object(a, "wild", "*."+domain))
		claim("*."+domain, a)
		refused(object(b, "below", "api."+domain), "spec.hosts[0]", "lies below the wildcard host *."+domain)
	})

	It("denies another namespace's Service names and cluster IPs", func() {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: b},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "shop"}, Ports: []corev1.ServicePort{{Port: 80}}}}
		Expect(k8s.Create(ctx, svc)).To(Succeed())
		refused(object(a, "dns", "shop."+b+".svc.cluster.local"), "spec.hosts[0]", "cluster DNS names of another namespace's Services")
		refused(object(a, "ip", svc.Spec.ClusterIP), "spec.hosts[0]", "the cluster IP of a Service in another namespace")
		admitted(object(b, "own", "shop."+b+".svc.cluster.local", svc.Spec.ClusterIP))
	})

	It("denies ExternalName Services anywhere and headless ones where the interceptors dial the Service", func() {
		Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pivot", Namespace: a},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "shop." + b + ".svc.cluster.local"}})).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: a},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "x"}, Ports: []corev1.ServicePort{{Port: 80}}}})).To(Succeed())
		static := object(a, "static", host)
		static.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/status", Service: &v1.StaticService{Name: "pivot", Port: 80}}}
		err := k8s.Create(ctx, static)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.staticRoutes[0].service.name"))
		Expect(err.Error()).To(ContainSubstring("Service pivot is of type ExternalName"))
		fb := object(a, "fallback", host)
		fb.Spec.ColdStart = &v1.ColdStart{Fallback: &v1.FallbackService{Service: "headless", Port: ptr.To[int32](80)}}
		err = k8s.Create(ctx, fb)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.coldStart.fallback.service: Forbidden: Service headless is headless"))
		target := object(a, "target", host)
		target.Spec.ScaleTargetRef.Service = "pivot"
		err = k8s.Create(ctx, target)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.scaleTargetRef.service"))
	})

	It("denies an object whose routing entry is over the per-object budget, with its size and the limit", func() {
		big := object(a, "big", host)
		big.Spec.ColdStart = &v1.ColdStart{Placeholder: &v1.Placeholder{Body: utilrand.String(65536)},
			WaitingPage: &v1.WaitingPage{Enabled: true, HTML: utilrand.String(16384)}}
		for i := range 16 {
			big.Spec.StaticRoutes = append(big.Spec.StaticRoutes, v1.StaticRoute{PathPrefix: v1.PathPrefix("/s" + strings.Repeat("x", i)),
				Response: &v1.StaticResponse{Body: utilrand.String(4096)}})
		}
		err := k8s.Create(ctx, big)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(MatchRegexp(`spec: Forbidden: the object's routing entry would be \d+ bytes, over the per-object budget of 131072 bytes`))
	})

	It("denies a ClusterTriggerAuthentication unless a policy allows the namespace", func() {
		o := object(a, "cta", host)
		o.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{Type: "prometheus", Metadata: map[string]string{"query": "up"},
			AuthenticationRef: &v1.TriggerAuthenticationRef{Name: "cluster-creds", Kind: "ClusterTriggerAuthentication"}}}}
		refused(o.DeepCopy(), "spec.scaling.triggers[0].authenticationRef", "no HTTPScalePolicy lets this namespace use one")
		p := &v1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: "cta-" + a}, Spec: v1.HTTPScalePolicySpec{
			ClusterTriggerAuthentication: &v1.NamespaceSelection{Names: []v1.NamespaceName{v1.NamespaceName(a)}}}}
		Expect(k8s.Create(ctx, p)).To(Succeed())
		DeferCleanup(func() { Expect(k8s.Delete(ctx, p)).To(Succeed()) })
		admitted(o)
	})

	It("lets an object keep a host it was admitted with when the host is refused later, so unrelated edits still pass", func() {
		o := object(a, "kept", host)
		admitted(o)
		claim(host, b) // a race the operator decided for the other namespace
		Eventually(func() error {
			cur := &v1.HTTPScaledObject{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
				return err
			}
			cur.Spec.Replicas.Max = ptr.To[int32](3)
			return k8s.Update(ctx, cur)
		}).Should(Succeed())
		cur := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(o), cur)).To(Succeed())
		cur.Spec.Hosts = append(cur.Spec.Hosts, v1.Host("*.x-"+host))
		err := k8s.Update(ctx, cur)
		Expect(err).To(HaveOccurred(), "a new host is decided")
		Expect(err.Error()).To(ContainSubstring("spec.hosts[1]"))
	})

	It("denies a policy whose namespace selector does not parse", func() {
		p := &v1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad-" + a}, Spec: v1.HTTPScalePolicySpec{Hosts: []v1.HostRule{{
			Pattern: "*.example.org", Namespaces: v1.NamespaceSelection{Selector: &metav1.LabelSelector{
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Has"}}}}}}}}
		err := k8s.Create(ctx, p)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring(`admission webhook "httpscalepolicies.httpscale.dev" denied the request`))
		Expect(err.Error()).To(ContainSubstring("spec.hosts[0].namespaces.selector"))
	})
})
