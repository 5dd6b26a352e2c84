package controller_test

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

// claimNamespace returns the namespace the HostClaim of host names ("" when there is none).
func claimNamespace(host string) func() string {
	return func() string {
		hc := &v1.HostClaim{}
		if err := k8s.Get(ctx, client.ObjectKey{Name: v1.HostClaimName(host)}, hc); err != nil {
			return ""
		}
		return string(hc.Spec.Namespace)
	}
}

// matched returns the key of the entry the stored table routes host/path (with headers) to.
func matched(host, path string, header map[string][]string) func() string {
	return func() string {
		t, err := readTable(ctx)
		if err != nil {
			return ""
		}
		e, ok := t.Match(host, path, routingHeader(header))
		if !ok {
			return ""
		}
		return e.Key()
	}
}

type routingHeader map[string][]string

func (h routingHeader) Values(k string) []string { return h[k] }

// createPolicy creates a cluster-scoped HTTPScalePolicy, deleted when the spec ends.
func createPolicy(name string, spec v1.HTTPScalePolicySpec) *v1.HTTPScalePolicy {
	GinkgoHelper()
	p := &v1.HTTPScalePolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	Expect(k8s.Create(ctx, p)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, p))).To(Succeed()) })
	return p
}

func names(ns ...string) v1.NamespaceSelection {
	var s v1.NamespaceSelection
	for _, n := range ns {
		s.Names = append(s.Names, v1.NamespaceName(n))
	}
	return s
}

// Every spec is an attack by tenant A (its own namespace) on tenant B's host, against the operator
// on a real API server; the webhook is not running, so what reaches the operator is what a tenant
// gets past admission (a race, or the webhook turned off).
var _ = Describe("Hosts between namespaces", func() {
	var a, b, host string
	BeforeEach(func() {
		a, b = ginkgoenv.NewNamespace(context.Background(), k8s, "app-"), ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		host = "shop-" + utilrand.String(8) + ".example.com"
	})

	// owner creates B's object on host and waits until it is routed and its namespace owns the host.
	owner := func(name string) *v1.HTTPScaledObject {
		GinkgoHelper()
		h := app(b, name, host)
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(entryOf(b + "/" + name)).ShouldNot(BeNil())
		Expect(claimNamespace(host)()).To(Equal(b))
		return h
	}
	refused := func(h *v1.HTTPScaledObject, reason string) {
		GinkgoHelper()
		Eventually(condition(h, v1.ConditionHostsAccepted)).Should(And(haveCondition(False, reason),
			HaveField("Message", ContainSubstring(host))))
		msg := condition(h, v1.ConditionHostsAccepted)().Message
		Expect(msg).NotTo(ContainSubstring(b), "the refusal must not name the other tenant")
	}

	It("refuses another namespace's header, path and static-route claims on an owned host", func() {
		shop := owner("shop")
		header := app(a, "hdr", host)
		header.Spec.Headers = []v1.HeaderMatch{{Name: "Authorization"}}
		path := app(a, "path", host)
		path.Spec.PathPrefixes = []v1.PathPrefix{"/login"}
		acme := app(a, "acme", host)
		acme.Spec.PathPrefixes = []v1.PathPrefix{"/app"}
		acme.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/.well-known/acme-challenge", Response: &v1.StaticResponse{Body: "token"}}}
		for _, h := range []*v1.HTTPScaledObject{header, path, acme} {
			Expect(k8s.Create(ctx, h)).To(Succeed())
		}
		for _, h := range []*v1.HTTPScaledObject{header, path, acme} {
			refused(h, v1.HostsReasonClaimed)
			Eventually(condition(h, v1.ConditionRoutingPropagated)).Should(haveCondition(False, "HostsRefused"))
			Expect(condition(h, v1.ConditionReady)()).To(HaveField("Status", False))
			Expect(tableEntry(a + "/" + h.Name)).To(BeNil())
		}
		By("the owner's clients keep getting the owner, token, cookie, login page and ACME challenge alike")
		for _, r := range []struct {
			path   string
			header map[string][]string
		}{
			{"/", map[string][]string{"Authorization": {"Bearer x"}, "Cookie": {"session=1"}}},
			{"/login", nil},
			{"/.well-known/acme-challenge/abc", nil},
		} {
			Expect(matched(host, r.path, r.header)()).To(Equal(b+"/shop"), r.path)
		}
		Expect(condition(shop, v1.ConditionHostsAccepted)()).To(haveCondition(True, v1.HostsReasonAccepted))
		Expect(condition(shop, v1.ConditionConflict)()).To(haveCondition(False, "NoConflict"))
	})

	It("routes a loser on its other hosts", func() {
		owner("shop")
		own := "own-" + utilrand.String(8) + ".example.com"
		h := app(a, "both", host)
		h.Spec.Hosts = append(h.Spec.Hosts, v1.Host(own))
		Expect(k8s.Create(ctx, h)).To(Succeed())
		refused(h, v1.HostsReasonClaimed)
		Eventually(entryOf(a + "/both")).Should(HaveField("Hosts", []string{own}))
		Expect(condition(h, v1.ConditionHostsAccepted)().Message).To(ContainSubstring("routed on [" + own + "] only"))
		Expect(matched(host, "/", nil)()).To(Equal(b + "/shop"))
		Expect(matched(own, "/", nil)()).To(Equal(a + "/both"))
	})

	It("keeps the host with its namespace while the owner's object is deleted and created again", func() {
		shop := owner("shop")
		squat := app(a, "squat", host)
		Expect(k8s.Create(ctx, squat)).To(Succeed())
		refused(squat, v1.HostsReasonClaimed)

		By("deleting the owner's object, as a GitOps replace or helm uninstall does")
		Expect(k8s.Delete(ctx, shop)).To(Succeed())
		Eventually(isNotFound(shop)).Should(BeTrue())
		Consistently(matched(host, "/", nil), "1s").Should(BeEmpty(), "the squatter, now the oldest claimant, must not get the host")
		Expect(claimNamespace(host)()).To(Equal(b))

		By("creating it again: the host is the owner's, not the older squatter's")
		again := hso(b, "shop", host)
		Expect(k8s.Create(ctx, again)).To(Succeed())
		Eventually(matched(host, "/", nil)).Should(Equal(b + "/shop"))
		Expect(condition(squat, v1.ConditionHostsAccepted)()).To(haveCondition(False, v1.HostsReasonClaimed))
	})

	It("releases a host once its namespace left it for the retention period, or at once when an admin deletes the claim", func() {
		shop := owner("shop")
		waiting := app(a, "waiting", host)
		Expect(k8s.Create(ctx, waiting)).To(Succeed())
		refused(waiting, v1.HostsReasonClaimed)
		Expect(k8s.Delete(ctx, shop)).To(Succeed())
		Eventually(func() *metav1.Time {
			hc := &v1.HostClaim{}
			if err := k8s.Get(ctx, client.ObjectKey{Name: v1.HostClaimName(host)}, hc); err != nil {
				return nil
			}
			return hc.Status.ReleasedAt
		}).ShouldNot(BeNil())
		Eventually(claimNamespace(host), suiteClaimRetention*4).Should(Equal(a), "after the retention period the next claimant gets the host")
		Eventually(matched(host, "/", nil)).Should(Equal(a + "/waiting"))
		Eventually(condition(waiting, v1.ConditionHostsAccepted)).Should(haveCondition(True, v1.HostsReasonAccepted))

		By("an admin releases a host at once by deleting its HostClaim")
		other := "other-" + utilrand.String(8) + ".example.com"
		first := app(b, "first", other)
		Expect(k8s.Create(ctx, first)).To(Succeed())
		Eventually(claimNamespace(other)).Should(Equal(b))
		second := app(a, "second", other)
		Expect(k8s.Create(ctx, second)).To(Succeed())
		Eventually(condition(second, v1.ConditionHostsAccepted)).Should(haveCondition(False, v1.HostsReasonClaimed))
		Expect(k8s.Delete(ctx, first)).To(Succeed())
		Eventually(isNotFound(first)).Should(BeTrue())
		Expect(k8s.Delete(ctx, &v1.HostClaim{ObjectMeta: metav1.ObjectMeta{Name: v1.HostClaimName(other)}})).To(Succeed())
		Eventually(claimNamespace(other), suiteClaimRetention/2).Should(Equal(a))
		Eventually(matched(other, "/", nil)).Should(Equal(a + "/second"))
	})

	It("gives wildcard hosts and the catch-all only where a policy grants them, and follows the policy as it widens and narrows", func() {
		domain := "wild-" + utilrand.String(8) + ".example.com"
		wild := app(a, "wild", "*."+domain)
		Expect(k8s.Create(ctx, wild)).To(Succeed())
		Eventually(condition(wild, v1.ConditionHostsAccepted)).Should(And(haveCondition(False, v1.HostsReasonNotAllowed),
			HaveField("Message", ContainSubstring("wildcard host"))))
		all := app(a, "all", "*")
		Expect(k8s.Create(ctx, all)).To(Succeed())
		Eventually(condition(all, v1.ConditionHostsAccepted)).Should(haveCondition(False, v1.HostsReasonNotAllowed))

		By("widening: a policy grants namespace A wildcards under the domain")
		pol := createPolicy("wild-"+a, v1.HTTPScalePolicySpec{Hosts: []v1.HostRule{{Pattern: v1.Host("*." + domain), Namespaces: names(a), Wildcards: true}}})
		Eventually(condition(wild, v1.ConditionHostsAccepted)).Should(haveCondition(True, v1.HostsReasonAccepted))
		Eventually(matched("x."+domain, "/", nil)).Should(Equal(a + "/wild"))

		By("another namespace cannot take a name below A's wildcard")
		below := app(b, "below", "x."+domain)
		Expect(k8s.Create(ctx, below)).To(Succeed())
		Eventually(condition(below, v1.ConditionHostsAccepted)).Should(haveCondition(False, v1.HostsReasonNotAllowed))

		By("narrowing: the policy now reserves the domain for namespace B; A loses the wildcard it owned")
		update2 := func(mutate func(*v1.HTTPScalePolicy)) {
			Eventually(func() error {
				cur := &v1.HTTPScalePolicy{}
				if err := k8s.Get(ctx, client.ObjectKeyFromObject(pol), cur); err != nil {
					return err
				}
				mutate(cur)
				return k8s.Update(ctx, cur)
			}).Should(Succeed())
		}
		update2(func(p *v1.HTTPScalePolicy) { p.Spec.Hosts[0].Namespaces = names(b) })
		Eventually(condition(wild, v1.ConditionHostsAccepted)).Should(haveCondition(False, v1.HostsReasonNotAllowed))
		Eventually(entryOf(a + "/wild")).Should(BeNil())
		Eventually(matched("x."+domain, "/", nil)).Should(Equal(b + "/below"))

		By("the catch-all goes to a namespace the policy names in catchAll")
		createPolicy("all-"+a, v1.HTTPScalePolicySpec{CatchAll: ptr.To(names(a))})
		Eventually(condition(all, v1.ConditionHostsAccepted)).Should(haveCondition(True, v1.HostsReasonAccepted))
		Expect(k8s.Delete(ctx, all)).To(Succeed()) // other specs route nothing by *
		Eventually(isNotFound(all)).Should(BeTrue())
	})

	It("selects namespaces by label in a policy", func() {
		domain := "team-" + utilrand.String(8) + ".example.com"
		createPolicy("label-"+a, v1.HTTPScalePolicySpec{Hosts: []v1.HostRule{{Pattern: v1.Host("*." + domain),
			Namespaces: v1.NamespaceSelection{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": a}}}}}})
		h := app(a, "labelled", "api."+domain)
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(condition(h, v1.ConditionHostsAccepted)).Should(haveCondition(False, v1.HostsReasonNotAllowed))
		nsObj := &corev1.Namespace{}
		Expect(k8s.Get(ctx, client.ObjectKey{Name: a}, nsObj)).To(Succeed())
		nsObj.Labels = map[string]string{"team": a}
		Expect(k8s.Update(ctx, nsObj)).To(Succeed())
		Eventually(condition(h, v1.ConditionHostsAccepted)).Should(haveCondition(True, v1.HostsReasonAccepted))
	})

	It("refuses another namespace's Service DNS names and grants a namespace its own", func() {
		theirs := app(a, "theirs", "shop."+b+".svc.cluster.local")
		Expect(k8s.Create(ctx, theirs)).To(Succeed())
		Eventually(condition(theirs, v1.ConditionHostsAccepted)).Should(And(haveCondition(False, v1.HostsReasonNotAllowed),
			HaveField("Message", ContainSubstring("another namespace's Services"))))
		short := app(a, "short", "shop."+b)
		Expect(k8s.Create(ctx, short)).To(Succeed())
		Eventually(condition(short, v1.ConditionHostsAccepted)).Should(haveCondition(False, v1.HostsReasonNotAllowed))
		mine := app(b, "mine", "shop."+b+".svc.cluster.local")
		Expect(k8s.Create(ctx, mine)).To(Succeed())
		Eventually(condition(mine, v1.ConditionHostsAccepted)).Should(haveCondition(True, v1.HostsReasonAccepted))
		Eventually(matched("shop."+b+".svc.cluster.local", "/", nil)).Should(Equal(b + "/mine"))
	})

	It("refuses static routes, fallbacks and Service forwarding through ExternalName or headless Services, and records cluster IPs", func() {
		Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "pivot", Namespace: a},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "shop." + b + ".svc.cluster.local",
				Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})).To(Succeed())
		Expect(k8s.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "headless", Namespace: a},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "x"},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}})).To(Succeed())
		status := createService(a, "status")

		ext := app(a, "ext", "ext-"+host)
		ext.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/status", Service: &v1.StaticService{Name: "pivot", Port: 80}}}
		Expect(k8s.Create(ctx, ext)).To(Succeed())
		Eventually(condition(ext, v1.ConditionValid)).Should(And(haveCondition(False, "UnsupportedService"),
			HaveField("Message", ContainSubstring("staticRoutes[0].service: Service pivot is of type ExternalName"))))

		headless := app(a, "hl", "hl-"+host)
		headless.Spec.ColdStart = &v1.ColdStart{Fallback: &v1.FallbackService{Service: "headless", Port: ptr.To[int32](80)}}
		Expect(k8s.Create(ctx, headless)).To(Succeed())
		Eventually(condition(headless, v1.ConditionValid)).Should(And(haveCondition(False, "UnsupportedService"),
			HaveField("Message", ContainSubstring("coldStart.fallback: Service headless is headless"))))
		Expect(tableEntry(a + "/ext")).To(BeNil())
		Expect(tableEntry(a + "/hl")).To(BeNil())

		ok := app(a, "ok", "ok-"+host)
		ok.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/status", Service: &v1.StaticService{Name: "status", Port: 80}}}
		ok.Spec.Forwarding = &v1.Forwarding{ViaService: true}
		Expect(k8s.Create(ctx, ok)).To(Succeed())
		Eventually(entryOf(a + "/ok")).ShouldNot(BeNil())
		e := tableEntry(a + "/ok")
		Expect(e.Static[0].Backend).To(Equal(&routing.Backend{Service: "status", Port: 80, PortName: "http", TargetPort: 8080,
			Protocol: routing.ProtocolHTTP, ClusterIP: current2(status).Spec.ClusterIP}))
		Expect(e.ClusterIP).NotTo(BeEmpty())

		By("a Service turned into an ExternalName afterwards takes the object out")
		Eventually(func() error {
			cur := current2(status)
			cur.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "shop." + b + ".svc.cluster.local",
				Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}
			return k8s.Update(ctx, cur)
		}).Should(Succeed())
		Eventually(condition(ok, v1.ConditionValid)).Should(haveCondition(False, "UnsupportedService"))
		Eventually(entryOf(a + "/ok")).Should(BeNil())
	})

	It("leaves an object over the per-object budget out and keeps writing the table for everyone", func() {
		// Every free-form field near its CRD limit, with random content gzip cannot shrink: about
		// 1.3 MB, under etcd's request limit, and more than a routing-table shard holds compressed
		// (900 KiB), which is how one object stopped every table write before the budget.
		big := app(a, "big", "big-"+host)
		filler := func(n int) string { // 6 bits of entropy per character
			b := make([]byte, n)
			_, _ = cryptorand.Read(b)
			return base64.StdEncoding.EncodeToString(b)[:n]
		}
		headers := func(n int) map[string]string {
			m := map[string]string{}
			for i := range n {
				m[fmt.Sprintf("X-H%d", i)] = filler(4096)
			}
			return m
		}
		big.Spec.ColdStart = &v1.ColdStart{Placeholder: &v1.Placeholder{Body: filler(65536), Headers: headers(32)},
			WaitingPage: &v1.WaitingPage{Enabled: true, HTML: filler(16384)}}
		for i := range 16 {
			big.Spec.StaticRoutes = append(big.Spec.StaticRoutes, v1.StaticRoute{PathPrefix: v1.PathPrefix("/s" + strings.Repeat("x", i)),
				Response: &v1.StaticResponse{Body: filler(4096), Headers: headers(16)}})
		}
		Expect(k8s.Create(ctx, big)).To(Succeed()) // no webhook here: what gets past admission

		By("another tenant's new object is routed and a deletion completes meanwhile")
		other := app(b, "other", "other-"+host)
		Expect(k8s.Create(ctx, other)).To(Succeed())
		Eventually(entryOf(b + "/other")).ShouldNot(BeNil())
		Expect(k8s.Delete(ctx, other)).To(Succeed())
		Eventually(isNotFound(other)).Should(BeTrue())

		By("the oversized object alone is left out, with its size and the limit")
		Eventually(condition(big, v1.ConditionValid)).Should(And(haveCondition(False, "RouteTooLarge"),
			HaveField("Message", MatchRegexp(`routing entry is \d+ bytes, over the per-object budget of 131072 bytes`))))
		Expect(tableEntry(a + "/big")).To(BeNil())
	})

	It("lets a namespace name a ClusterTriggerAuthentication only when a policy allows it", func() {
		h := app(a, "cta", "cta-"+host)
		h.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1)}
		h.Spec.Scaling = &v1.Scaling{Triggers: []v1.ScalingTrigger{{Type: "prometheus", Metadata: map[string]string{"query": "up"},
			AuthenticationRef: &v1.TriggerAuthenticationRef{Name: "cluster-creds", Kind: "ClusterTriggerAuthentication"}}}}
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(condition(h, v1.ConditionValid)).Should(And(haveCondition(False, "ClusterTriggerAuthenticationNotAllowed"),
			HaveField("Message", ContainSubstring("scaling.triggers[0].authenticationRef"))))
		Expect(scaledObject(h)()).To(BeNil())
		createPolicy("cta-"+a, v1.HTTPScalePolicySpec{ClusterTriggerAuthentication: ptr.To(names(a))})
		Eventually(condition(h, v1.ConditionValid)).Should(HaveField("Status", True))
		Eventually(scaledObject(h)).ShouldNot(BeNil())
		Expect(scaledObject(h)().Spec.Triggers[1].AuthenticationRef).To(HaveField("Kind", "ClusterTriggerAuthentication"))
	})
})

func current2(s *corev1.Service) *corev1.Service {
	GinkgoHelper()
	cur := &corev1.Service{}
	Expect(k8s.Get(ctx, client.ObjectKeyFromObject(s), cur)).To(Succeed())
	return cur
}

// Traffic redirected from a Service must reach only that Service's own app: a Serve-mode object that
// does not own its routes gets no Serve port and its Service is not redirected; once it owns them,
// it gets a port no other app has.
var _ = Describe("Serve mode between namespaces", func() {
	It("redirects no Service of an object that does not own its routes, and gives each app a port of its own", func() {
		a, b := ginkgoenv.NewNamespace(context.Background(), k8s, "app-"), ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		fake := newFakeInterceptor("198.19.2.1")
		serveFleet(fake)
		taken := "taken-" + utilrand.String(8) + ".example.com"
		owner := app(a, "owner", taken)
		Expect(k8s.Create(ctx, owner)).To(Succeed())
		Eventually(claimNamespace(taken)).Should(Equal(a))

		h := serveApp(b, "shop")
		h.Spec.Hosts = append(h.Spec.Hosts, v1.Host(taken))
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(condition(h, v1.ConditionServing)).Should(haveCondition(False, "RoutesNotOwned"))
		Consistently(redirect(b, "shop"), "1s").Should(BeNil())
		Expect(servePortOf(b + "/shop")()).To(BeZero())

		update(h, func(o *v1.HTTPScaledObject) { o.Spec.Hosts = o.Spec.Hosts[:1] })
		Eventually(servePortOf(b + "/shop")).ShouldNot(BeZero())
		port := servePortOf(b + "/shop")()
		Eventually(redirectTargets(b, "shop")).Should(Equal(targetsAt(port)("198.19.2.1")))

		other := serveApp(a, "cart")
		Expect(k8s.Create(ctx, other)).To(Succeed())
		Eventually(servePortOf(a + "/cart")).ShouldNot(BeZero())
		Expect(servePortOf(a+"/cart")()).NotTo(Equal(port), "each app has a port of its own")
	})
})
