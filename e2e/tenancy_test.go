//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// Two tenants of one fleet, each acting with its own namespace-limited token (framework.Tenant):
// team B owns a host and team A tries every attack of a hostile tenant on it. Each is refused, at
// admission with a message naming the host and why (never team B), or with a condition on A's own
// object; B's clients keep getting B's answers through the interceptor Service; the platform
// team's policy widens and narrows what A may claim; traffic redirected from B's Service (Serve
// mode) reaches B whatever Host it carries.
var _ = Describe("Tenancy", Ordered, func() {
	var (
		h              *framework.HTTPScale
		nsA, nsB, host string
		a, b           client.Client // the tenants' own clients
	)
	BeforeAll(func(ctx SpecContext) {
		var err error
		h, err = f.HTTPScale(ctx)
		Expect(err).NotTo(HaveOccurred())
		expectProxying(ctx, h)
		for _, p := range []*string{&nsA, &nsB} {
			*p, err = f.CreateNamespace(ctx, "tenant")
			Expect(err).NotTo(HaveOccurred())
			ns := *p
			DeferCleanup(func(ctx SpecContext) { Expect(f.DeleteNamespace(ctx, ns)).To(Succeed()) })
		}
		a, err = f.Tenant(ctx, nsA)
		Expect(err).NotTo(HaveOccurred())
		b, err = f.Tenant(ctx, nsB)
		Expect(err).NotTo(HaveOccurred())
		host = "shop." + nsB + ".example"
	})

	// app creates, as tenant c in ns, the sample app name (replicas pods) and an HTTPScaledObject
	// for it on host with mods applied, and returns the object (not waiting for routing).
	app := func(ctx context.Context, c client.Client, ns, name string, replicas int32, hosts []string, mods ...func(*httpscalev1alpha1.HTTPScaledObjectSpec)) (*httpscalev1alpha1.HTTPScaledObject, error) {
		dep, svc := f.SampleApp(ns, name, replicas)
		for _, o := range []client.Object{dep, svc} {
			if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
				return nil, err
			}
		}
		o := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
				ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{APIVersion: "apps/v1", Kind: "Deployment", Name: name, Service: name, Port: ptr.To[int32](80)},
				Replicas:       &httpscalev1alpha1.ReplicaBounds{Min: ptr.To(replicas), Max: ptr.To[int32](2)},
			}}
		for _, hs := range hosts {
			o.Spec.Hosts = append(o.Spec.Hosts, httpscalev1alpha1.Host(hs))
		}
		for _, m := range mods {
			m(&o.Spec)
		}
		return o, c.Create(ctx, o)
	}
	// routed waits, reading with the tenant's own client, until every interceptor routes o.
	routed := func(ctx context.Context, c client.Client, o *httpscalev1alpha1.HTTPScaledObject) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(o), o)).To(Succeed())
			g.Expect(o.Status.Routing).NotTo(BeNil())
			g.Expect(o.Status.Routing.InterceptorsTotal).To(BeEquivalentTo(len(f.Cluster.Real)))
			g.Expect(o.Status.Routing.InterceptorsReady).To(Equal(o.Status.Routing.InterceptorsTotal))
		}).WithContext(ctx).Should(Succeed())
	}
	// viaService sends GET path with host and headers to the interceptor Service, as a client does.
	viaService := func(ctx context.Context, hostHeader, path string, headers map[string]string) (answer, error) {
		return askURL(ctx, fmt.Sprintf("http://%s:%d%s", h.InterceptorService, localcluster.ProxyPort, path), hostHeader, headers)
	}
	// servedBy expects requests for hostHeader/path with headers to be answered 200 by a pod of app in ns.
	servedBy := func(ctx context.Context, hostHeader, path string, headers map[string]string, ns, name string) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			got, err := viaService(ctx, hostHeader, path, headers)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got.Status).To(Equal(http.StatusOK))
			g.Expect(got.Path).To(Equal(path))
			g.Expect(podIPs(ctx, ns, name)).To(ContainElement(got.PodIP))
		}).WithContext(ctx).Should(Succeed())
	}
	// refused expects tenant A's create of an object for hosts to be denied by the webhook, naming
	// field and why, and never tenant B's namespace beyond what names (the hosts, and any policy
	// pattern the refusal may quote) themselves contain.
	refused := func(name string, names []string, create func() error, field, why string) {
		GinkgoHelper()
		err := create()
		Expect(err).To(HaveOccurred(), "%s was admitted", name)
		Expect(err.Error()).To(ContainSubstring("denied the request"))
		Expect(err.Error()).To(ContainSubstring(field))
		Expect(err.Error()).To(ContainSubstring(why))
		text := err.Error()
		for _, n := range names {
			text = strings.ReplaceAll(text, n, "")
		}
		Expect(text).NotTo(ContainSubstring(nsB), "a refusal must not name the other tenant")
	}
	hostsAccepted := func(ctx context.Context, c client.Client, o *httpscalev1alpha1.HTTPScaledObject) func() metav1.Condition {
		return func() metav1.Condition {
			cur := &httpscalev1alpha1.HTTPScaledObject{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(o), cur); err != nil {
				return metav1.Condition{}
			}
			if cond := meta.FindStatusCondition(cur.Status.Conditions, httpscalev1alpha1.ConditionHostsAccepted); cond != nil {
				return *cond
			}
			return metav1.Condition{}
		}
	}
	// admitted waits until the webhook's cache sees what a spec just wrote: a server-side dry run
	// of o by tenant c passes admission.
	admitted := func(ctx context.Context, c client.Client, o *httpscalev1alpha1.HTTPScaledObject) {
		GinkgoHelper()
		Eventually(func() error { return c.Create(ctx, o.DeepCopy(), client.DryRunAll) }).WithContext(ctx).Should(Succeed())
	}

	It("routes the victim's host to the victim", func(ctx SpecContext) {
		shop, err := app(ctx, b, nsB, "shop", 1, []string{host})
		Expect(err).NotTo(HaveOccurred())
		routed(ctx, b, shop)
		servedBy(ctx, host, "/", nil, nsB, "shop")
		Eventually(hostsAccepted(ctx, b, shop)).WithContext(ctx).Should(HaveField("Status", metav1.ConditionTrue))
	})

	It("refuses every attack of the other tenant at admission and keeps the victim's clients with the victim", func(ctx SpecContext) {
		// attack is tenant A's attempt: the sample app and an HTTPScaledObject named name for hosts.
		attack := func(name string, hosts []string, mods ...func(*httpscalev1alpha1.HTTPScaledObjectSpec)) (string, []string, func() error) {
			// At zero replicas: no pod runs for an object that is never admitted.
			return name, hosts, func() error { _, err := app(ctx, a, nsA, name, 0, hosts, mods...); return err }
		}
		By("a header match on the victim's host (tokens and session cookies)")
		name, hosts, create := attack("hdr", []string{host}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Headers = []httpscalev1alpha1.HeaderMatch{{Name: "Authorization"}}
		})
		refused(name, hosts, create, "spec.hosts[0]", "host "+host+" belongs to another namespace")
		By("a more specific path on the victim's host")
		name, hosts, create = attack("path", []string{host}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.PathPrefixes = []httpscalev1alpha1.PathPrefix{"/login"}
		})
		refused(name, hosts, create, "spec.hosts[0]", "belongs to another namespace")
		By("an ACME challenge route on the victim's host, for a certificate of its domain")
		name, hosts, create = attack("acme", []string{"acme." + nsA + ".example", host}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.PathPrefixes = []httpscalev1alpha1.PathPrefix{"/app"}
			s.StaticRoutes = []httpscalev1alpha1.StaticRoute{{PathPrefix: "/.well-known/acme-challenge", Response: &httpscalev1alpha1.StaticResponse{Body: "token"}}}
		})
		refused(name, hosts, create, "spec.hosts[1]", "belongs to another namespace")
		By("a wildcard over the victim's host, and the catch-all, without a policy")
		name, hosts, create = attack("wild", []string{"*." + nsB + ".example"})
		refused(name, hosts, create, "spec.hosts[0]", "a wildcard host covers names other namespaces may own")
		name, hosts, create = attack("all", []string{"*"})
		refused(name, hosts, create, "spec.hosts[0]", "catch-all host *")
		By("the victim's Service DNS name")
		name, hosts, create = attack("dns", []string{"shop." + nsB + ".svc." + localcluster.ClusterDomain})
		refused(name, hosts, create, "spec.hosts[0]", "another namespace's Services")
		By("a pivot through an ExternalName Service to the victim's Service")
		Expect(a.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pivot", Namespace: nsA}, Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeExternalName, ExternalName: "shop." + nsB + ".svc." + localcluster.ClusterDomain}})).To(Succeed())
		name, hosts, create = attack("pivot", []string{"pivot." + nsA + ".example"}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.PathPrefixes = []httpscalev1alpha1.PathPrefix{"/app"}
			s.StaticRoutes = []httpscalev1alpha1.StaticRoute{{PathPrefix: "/", Service: &httpscalev1alpha1.StaticService{Name: "pivot", Port: 80}}}
		})
		refused(name, hosts, create, "spec.staticRoutes[0].service.name", "Service pivot is of type ExternalName")
		By("cluster-wide KEDA credentials")
		name, hosts, create = attack("cta", []string{"cta." + nsA + ".example"}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Scaling = &httpscalev1alpha1.Scaling{Triggers: []httpscalev1alpha1.ScalingTrigger{{Type: "prometheus",
				Metadata:          map[string]string{"serverAddress": "http://prometheus:9090", "query": "up", "threshold": "1"},
				AuthenticationRef: &httpscalev1alpha1.TriggerAuthenticationRef{Name: "cluster-creds", Kind: "ClusterTriggerAuthentication"}}}}
		})
		refused(name, hosts, create, "spec.scaling.triggers[0].authenticationRef", "no HTTPScalePolicy lets this namespace use one")
		By("one object large enough to stop the routing table for everyone")
		name, hosts, create = attack("big", []string{"big." + nsA + ".example"}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.ColdStart = &httpscalev1alpha1.ColdStart{Placeholder: &httpscalev1alpha1.Placeholder{Body: strings.Repeat("x", 65536)},
				WaitingPage: &httpscalev1alpha1.WaitingPage{Enabled: true, HTML: strings.Repeat("y", 16384)}}
			for i := range 16 {
				s.StaticRoutes = append(s.StaticRoutes, httpscalev1alpha1.StaticRoute{PathPrefix: httpscalev1alpha1.PathPrefix(fmt.Sprintf("/s%d", i)),
					Response: &httpscalev1alpha1.StaticResponse{Body: strings.Repeat("z", 4096)}})
			}
		})
		refused(name, hosts, create, "spec", "over the per-object budget of 131072 bytes")
		By("writing the ownership records or the policy itself, which its Role cannot")
		err := a.Create(ctx, &httpscalev1alpha1.HostClaim{ObjectMeta: metav1.ObjectMeta{Name: httpscalev1alpha1.HostClaimName("mine.example")},
			Spec: httpscalev1alpha1.HostClaimSpec{Host: "mine.example", Namespace: httpscalev1alpha1.NamespaceName(nsA)}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		err = a.Delete(ctx, &httpscalev1alpha1.HostClaim{ObjectMeta: metav1.ObjectMeta{Name: httpscalev1alpha1.HostClaimName(host)}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)
		err = a.Create(ctx, &httpscalev1alpha1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: "mine-" + nsA}})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%v", err)

		By("the victim's clients get the victim's answers: tokens, cookies, the login page, the ACME challenge")
		servedBy(ctx, host, "/", map[string]string{"Authorization": "Bearer secret", "Cookie": "session=1"}, nsB, "shop")
		servedBy(ctx, host, "/login", nil, nsB, "shop")
		servedBy(ctx, host, "/.well-known/acme-challenge/abc", nil, nsB, "shop")
		By("and the other tenant's own objects still work")
		mine, err := app(ctx, a, nsA, "mine", 1, []string{"mine." + nsA + ".example"})
		Expect(err).NotTo(HaveOccurred())
		routed(ctx, a, mine)
		servedBy(ctx, "mine."+nsA+".example", "/", nil, nsA, "mine")
	})

	It("keeps sharing a host between objects of the owning namespace", func(ctx SpecContext) {
		login, err := app(ctx, b, nsB, "login", 1, []string{host}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.PathPrefixes = []httpscalev1alpha1.PathPrefix{"/login"}
		})
		Expect(err).NotTo(HaveOccurred())
		routed(ctx, b, login)
		servedBy(ctx, host, "/login", nil, nsB, "login")
		servedBy(ctx, host, "/cart", nil, nsB, "shop")
	})

	It("keeps the host with its namespace while the owner's objects are deleted and created again", func(ctx SpecContext) {
		for _, name := range []string{"shop", "login"} {
			o := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nsB}}
			Expect(b.Delete(ctx, o)).To(Succeed())
			Eventually(func() bool { return apierrors.IsNotFound(b.Get(ctx, client.ObjectKeyFromObject(o), o)) }).WithContext(ctx).Should(BeTrue())
		}
		Eventually(func() int {
			got, err := viaService(ctx, host, "/", nil)
			if err != nil {
				return 0
			}
			return got.Status
		}).WithContext(ctx).Should(Equal(http.StatusNotFound))
		By("the other tenant's identical claim, now the oldest, is still refused")
		refused("squat", []string{host}, func() error { _, err := app(ctx, a, nsA, "squat", 0, []string{host}); return err },
			"spec.hosts[0]", "belongs to another namespace")
		By("the owner creates its object again and gets its host back")
		shop, err := app(ctx, b, nsB, "shop", 1, []string{host})
		Expect(err).NotTo(HaveOccurred())
		routed(ctx, b, shop)
		servedBy(ctx, host, "/", nil, nsB, "shop")
	})

	It("widens and narrows what a tenant may claim as the platform team's policy says", func(ctx SpecContext) {
		domain := nsA + ".wild.example"
		policy := &httpscalev1alpha1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: "wild-" + nsA}, Spec: httpscalev1alpha1.HTTPScalePolicySpec{
			Hosts: []httpscalev1alpha1.HostRule{
				{Pattern: httpscalev1alpha1.Host("*." + domain), Wildcards: true, Namespaces: httpscalev1alpha1.NamespaceSelection{Names: []httpscalev1alpha1.NamespaceName{httpscalev1alpha1.NamespaceName(nsA)}}},
				{Pattern: httpscalev1alpha1.Host("*.reserved." + nsB + ".example"), Namespaces: httpscalev1alpha1.NamespaceSelection{Names: []httpscalev1alpha1.NamespaceName{httpscalev1alpha1.NamespaceName(nsB)}}},
			}}}
		Expect(f.Client.Create(ctx, policy)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(f.Client.Delete(ctx, policy))).To(Succeed()) })

		By("widening: tenant A may claim wildcards below its domain")
		probe := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: "wild", Namespace: nsA}, Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
			Hosts: toHosts([]string{"*." + domain}), ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{Name: "wild", Service: "wild", Port: ptr.To[int32](80)}}}
		admitted(ctx, a, probe)
		wild, err := app(ctx, a, nsA, "wild", 1, []string{"*." + domain})
		Expect(err).NotTo(HaveOccurred())
		routed(ctx, a, wild)
		servedBy(ctx, "anything."+domain, "/", nil, nsA, "wild")

		By("narrowing: a reserved domain is refused to tenant A, naming the policy")
		reserved := []string{"api.reserved." + nsB + ".example"}
		// The refusal names the host and the platform team's pattern (which this test builds from
		// team B's namespace name), and nothing else of team B.
		refused("reserved", append(reserved, string(policy.Spec.Hosts[1].Pattern)),
			func() error { _, err := app(ctx, a, nsA, "reserved", 0, reserved); return err },
			"spec.hosts[0]", "HTTPScalePolicy wild-"+nsA+" reserves the hosts of pattern "+string(policy.Spec.Hosts[1].Pattern))

		By("narrowing what was granted: tenant A loses its wildcard, reported on its own object")
		Eventually(func() error {
			cur := &httpscalev1alpha1.HTTPScalePolicy{}
			if err := f.Client.Get(ctx, client.ObjectKeyFromObject(policy), cur); err != nil {
				return err
			}
			cur.Spec.Hosts[0].Namespaces = httpscalev1alpha1.NamespaceSelection{}
			return f.Client.Update(ctx, cur)
		}).WithContext(ctx).Should(Succeed())
		Eventually(hostsAccepted(ctx, a, wild)).WithContext(ctx).Should(And(HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", httpscalev1alpha1.HostsReasonNotAllowed)))
		Eventually(func() int {
			got, err := viaService(ctx, "anything."+domain, "/", nil)
			if err != nil {
				return 0
			}
			return got.Status
		}).WithContext(ctx).Should(Equal(http.StatusNotFound))
	})

	It("sends traffic redirected from the victim's Service to the victim whatever Host it carries, even with a catch-all granted to the other tenant", func(ctx SpecContext) {
		catchAll := &httpscalev1alpha1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: "catch-all-" + nsA}, Spec: httpscalev1alpha1.HTTPScalePolicySpec{
			CatchAll: &httpscalev1alpha1.NamespaceSelection{Names: []httpscalev1alpha1.NamespaceName{httpscalev1alpha1.NamespaceName(nsA)}}}}
		Expect(f.Client.Create(ctx, catchAll)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(f.Client.Delete(ctx, catchAll))).To(Succeed()) })
		probe := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: "all", Namespace: nsA}, Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
			Hosts: toHosts([]string{"*"}), ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{Name: "all", Service: "all", Port: ptr.To[int32](80)}}}
		admitted(ctx, a, probe)
		all, err := app(ctx, a, nsA, "all", 1, []string{"*"})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(a.Delete(ctx, all))).To(Succeed()) }) // other specs route nothing by *
		routed(ctx, a, all)
		servedBy(ctx, "nobody-routes-this.example", "/", nil, nsA, "all")

		By("the victim's Serve-mode app at zero: its Service is redirected to its own Serve port")
		api, err := app(ctx, b, nsB, "api", 0, []string{"api." + nsB + ".example"}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Mode = httpscalev1alpha1.ModeServe
			s.ScaledownPeriod = ptr.To[int32](300)
			// Serve mode at min 0 needs a trigger for warm traffic; this one is active one minute a year.
			s.Scaling = &httpscalev1alpha1.Scaling{Triggers: []httpscalev1alpha1.ScalingTrigger{{Type: "cron",
				Metadata: map[string]string{"timezone": "UTC", "start": "0 0 1 1 *", "end": "1 0 1 1 *", "desiredReplicas": "1"}}}}
		})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			g.Expect(b.Get(ctx, client.ObjectKeyFromObject(api), api)).To(Succeed())
			c := meta.FindStatusCondition(api.Status.Conditions, httpscalev1alpha1.ConditionServing)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(httpscalev1alpha1.ServingReasonProxying))
		}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
		svc := &corev1.Service{}
		Expect(b.Get(ctx, client.ObjectKey{Namespace: nsB, Name: "api"}, svc)).To(Succeed())

		By("a client of the victim's Service sends a Host the other tenant's catch-all routes")
		for _, hostHeader := range []string{"nobody-routes-this.example", "mine." + nsA + ".example", "api"} {
			Eventually(func(g Gomega) {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/hello", svc.Spec.ClusterIP), nil)
				g.Expect(err).NotTo(HaveOccurred())
				req.Host = hostHeader
				resp, err := f.HTTP.Do(req)
				g.Expect(err).NotTo(HaveOccurred())
				got, err := readAnswer(resp)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got.Status).To(Equal(http.StatusOK), "Host %s", hostHeader)
				g.Expect(podIPs(ctx, nsB, "api")).To(ContainElement(got.PodIP), "Host %s answered by a pod of the victim's app", hostHeader)
			}).WithContext(ctx).WithTimeout(3 * time.Minute).Should(Succeed())
		}
	})
})

func toHosts(hs []string) []httpscalev1alpha1.Host {
	out := make([]httpscalev1alpha1.Host, len(hs))
	for i, h := range hs {
		out[i] = httpscalev1alpha1.Host(h)
	}
	return out
}
