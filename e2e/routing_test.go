//go:build e2e

package e2e

import (
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
)

var _ = Describe("Routing", Ordered, func() {
	var (
		h        *framework.HTTPScale
		ns1, ns2 string
		suffix   string
	)
	hosts := func(hs ...string) []httpscalev1alpha1.Host {
		var out []httpscalev1alpha1.Host
		for _, h := range hs {
			out = append(out, httpscalev1alpha1.Host(h))
		}
		return out
	}

	BeforeAll(func(ctx SpecContext) {
		var err error
		h, err = f.HTTPScale(ctx)
		Expect(err).NotTo(HaveOccurred())
		expectProxying(ctx, h)
		ns1, err = f.CreateNamespace(ctx, "route-a")
		Expect(err).NotTo(HaveOccurred())
		ns2, err = f.CreateNamespace(ctx, "route-b")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(f.DeleteNamespace(ctx, ns1)).To(Succeed())
			Expect(f.DeleteNamespace(ctx, ns2)).To(Succeed())
		})
		suffix = ns1 + ".example"
		// Every app keeps one replica, so these specs are about routing, not waking.
		one := func(s *httpscalev1alpha1.HTTPScaledObjectSpec) { s.Replicas.Min = ptr.To[int32](1) }
		routedApp(ctx, ns1, "exact", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			one(s)
			s.Hosts = hosts("exact." + suffix)
		})
		// Wildcard hosts need the platform team's grant (docs/security.md).
		grant := &httpscalev1alpha1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: "routing-" + ns1}, Spec: httpscalev1alpha1.HTTPScalePolicySpec{
			Hosts: []httpscalev1alpha1.HostRule{{Pattern: httpscalev1alpha1.Host("*.wild." + suffix), Wildcards: true,
				Namespaces: httpscalev1alpha1.NamespaceSelection{Names: []httpscalev1alpha1.NamespaceName{httpscalev1alpha1.NamespaceName(ns1)}}}}}}
		Expect(f.Client.Create(ctx, grant)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(f.Client.Delete(ctx, grant))).To(Succeed()) })
		Eventually(func() error { // the webhook's cache has the policy
			probe := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: "wild", Namespace: ns1}, Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
				Hosts: hosts("*.wild." + suffix), ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{Name: "wild", Service: "wild", Port: ptr.To[int32](80)}}}
			return f.Client.Create(ctx, probe, client.DryRunAll)
		}).WithContext(ctx).Should(Succeed())
		routedApp(ctx, ns1, "wild", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			one(s)
			s.Hosts = hosts("*.wild." + suffix)
		})
		routedApp(ctx, ns2, "web", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			one(s)
			s.Hosts = hosts("paths." + suffix)
		})
		routedApp(ctx, ns2, "api", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			one(s)
			s.Hosts = hosts("paths." + suffix)
			s.PathPrefixes = []httpscalev1alpha1.PathPrefix{"/api"}
		})
		routedApp(ctx, ns2, "stable", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			one(s)
			s.Hosts = hosts("hdr." + suffix)
		})
		routedApp(ctx, ns2, "canary", 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			one(s)
			s.Hosts = hosts("hdr." + suffix)
			s.Headers = []httpscalev1alpha1.HeaderMatch{{Name: "X-Canary", Value: ptr.To("1")}}
		})
	})

	servedBy := func(ctx SpecContext, host, path string, headers map[string]string, ns, app string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			ips := podIPs(ctx, ns, app)
			g.Expect(ips).NotTo(BeEmpty())
			a, err := ask(ctx, h, 0, host, path, headers)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Status).To(Equal(http.StatusOK))
			g.Expect(ips).To(ContainElement(a.PodIP), "%s%s went to %s, not to %s/%s", host, path, a.PodIP, ns, app)
			g.Expect(a.Host).To(Equal(host))
			g.Expect(a.Path).To(Equal(path))
		}).WithContext(ctx).Should(Succeed())
	}

	It("routes an exact host", func(ctx SpecContext) {
		servedBy(ctx, "exact."+suffix, "/", nil, ns1, "exact")
	})
	It("routes any host under a wildcard", func(ctx SpecContext) {
		servedBy(ctx, "a.wild."+suffix, "/x", nil, ns1, "wild")
		servedBy(ctx, "b.wild."+suffix, "/y", nil, ns1, "wild")
	})
	It("routes by the longest path prefix, across namespaces", func(ctx SpecContext) {
		servedBy(ctx, "paths."+suffix, "/api/v1/items", nil, ns2, "api")
		servedBy(ctx, "paths."+suffix, "/index.html", nil, ns2, "web")
	})
	It("routes by header when the header matches", func(ctx SpecContext) {
		servedBy(ctx, "hdr."+suffix, "/", map[string]string{"X-Canary": "1"}, ns2, "canary")
		servedBy(ctx, "hdr."+suffix, "/", map[string]string{"X-Canary": "0"}, ns2, "stable")
		servedBy(ctx, "hdr."+suffix, "/", nil, ns2, "stable")
	})
	It("answers 404 for a host nobody claims", func(ctx SpecContext) {
		for zone := range h.Interceptors {
			a, err := ask(ctx, h, zone, "nobody."+suffix, "/", nil)
			Expect(err).NotTo(HaveOccurred())
			Expect(a.Status).To(Equal(http.StatusNotFound))
		}
	})
})
