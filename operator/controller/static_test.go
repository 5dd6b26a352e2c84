package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

var _ = Describe("Ignored paths and static routes", func() {
	var ns string
	BeforeEach(func() { ns = ginkgoenv.NewNamespace(context.Background(), k8s, "app-") })

	It("are carried into the object's routing entry and routed by kind", func() {
		status := createService(ns, "status", corev1.ServicePort{Name: "http", Port: 8080, AppProtocol: ptr.To("kubernetes.io/h2c")})
		h := app(ns, "shop", "shop."+ns+".example.com")
		h.Spec.IgnoredPaths = []v1.PathPrefix{"/healthz/"}
		h.Spec.StaticRoutes = []v1.StaticRoute{
			{PathPrefix: "/status", Service: &v1.StaticService{Name: "status", Port: 8080}},
			{PathPrefix: "/ping", Response: &v1.StaticResponse{Headers: map[string]string{"Content-Type": "text/plain"}, Body: "pong"}},
		}
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(entryOf(ns + "/shop")).ShouldNot(BeNil())
		e := tableEntry(ns + "/shop")
		Expect(e.Ignored).To(Equal([]string{"/healthz"}))
		Expect(e.Static).To(Equal([]routing.StaticRoute{
			{PathPrefix: "/ping", Response: &routing.Placeholder{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "pong"}},
			// Resolved like the target: port name, target port, protocol, and the cluster IP to dial.
			{PathPrefix: "/status", Backend: &routing.Backend{Service: "status", Port: 8080, PortName: "http", TargetPort: 8080,
				Protocol: routing.ProtocolH2C, ClusterIP: status.Spec.ClusterIP}},
		}))
		t, err := readTable(ctx)
		Expect(err).NotTo(HaveOccurred())
		for path, kind := range map[string]routing.RouteKind{"/healthz/live": routing.RouteIgnored, "/ping": routing.RouteStatic, "/cart": routing.RouteApp} {
			r, ok := t.MatchRoute("shop."+ns+".example.com", path, nil)
			Expect(ok).To(BeTrue(), path)
			Expect(r.Kind).To(Equal(kind), path)
		}
		Eventually(condition(h, v1.ConditionConflict)).Should(haveCondition(False, "NoConflict"))
	})

	It("reports a static route another object already routes as a conflict of the younger object", func() {
		first := app(ns, "zz-first", "static-shared."+ns+".example.com")
		first.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/status", Response: &v1.StaticResponse{StatusCode: 204}}}
		Expect(k8s.Create(ctx, first)).To(Succeed())
		Eventually(entryOf(ns + "/zz-first")).ShouldNot(BeNil())
		created := current(first).CreationTimestamp.Time
		Eventually(func() time.Time { return time.Now().Truncate(time.Second) }).Should(BeTemporally(">", created))
		second := app(ns, "aa-second", "static-shared."+ns+".example.com")
		second.Spec.PathPrefixes = []v1.PathPrefix{"/status/"}
		Expect(k8s.Create(ctx, second)).To(Succeed())

		Eventually(condition(second, v1.ConditionConflict)).Should(And(haveCondition(True, "RouteClaimed"),
			HaveField("Message", ContainSubstring(`path prefix "/status"`)),
			HaveField("Message", ContainSubstring("already routed to "+ns+"/zz-first"))))
		Expect(tableEntry(ns + "/aa-second")).To(BeNil())
		Expect(condition(first, v1.ConditionConflict)()).To(haveCondition(False, "NoConflict"))
	})

	It("marks an object whose ignored path lies outside its path prefixes invalid and routes the others", func() {
		bad := app(ns, "bad", "bad."+ns+".example.com")
		bad.Spec.PathPrefixes = []v1.PathPrefix{"/api"}
		bad.Spec.IgnoredPaths = []v1.PathPrefix{"/healthz"}
		Expect(k8s.Create(ctx, bad)).To(Succeed()) // no webhook in this suite: the operator's own check
		good := app(ns, "good", "good."+ns+".example.com")
		Expect(k8s.Create(ctx, good)).To(Succeed())
		Eventually(condition(bad, v1.ConditionValid)).Should(And(haveCondition(False, "InvalidRoute"),
			HaveField("Message", ContainSubstring(`ignored path "/healthz" is not inside any of the path prefixes`))))
		Eventually(entryOf(ns + "/good")).ShouldNot(BeNil())
		Expect(tableEntry(ns + "/bad")).To(BeNil())
	})
})
