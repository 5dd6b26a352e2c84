package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/controller"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

// A second installation in the same API server: fleet "blue" in its own namespace, with its own table
// and scaler, next to the suite's operator of the default fleet.
const (
	blueNS     = "blue-system"
	blueTable  = "httpscale-blue-routing-table"
	blueScaler = "httpscale-blue-scaler.blue-system.svc.cluster.local:9090"
	// blueSA is fleet blue's interceptor ServiceAccount, as the chart names it.
	blueSA = "httpscale-blue-interceptor"
)

var _ = Describe("Two fleets in one cluster", Ordered, func() {
	var blue *operator

	BeforeAll(func() {
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: blueNS}}))).To(Succeed())
		o := defaultOptions()
		o.Fleet = "blue"
		o.Namespace = blueNS
		o.TableName = blueTable
		o.ScalerAddress = blueScaler
		o.InterceptorSelector = labels.SelectorFromSet(labels.Set{serviceName: "httpscale-blue-interceptor-admin"})
		o.FleetLeaseInterval = time.Second
		o.InterceptorServiceAccount = blueSA
		blue = startOperator(o)
		DeferCleanup(func() { blue.stop() })
	})

	It("lets each fleet's interceptors read only the TLS Secrets of that fleet's objects", func() {
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		red, bl := app(ns, "red", "red."+ns+".example.com"), app(ns, "bl", "bl."+ns+".example.com")
		red.Spec.TLS = &v1.TLS{SecretName: "red-tls"}
		bl.Spec.TLS = &v1.TLS{SecretName: "blue-tls"}
		bl.Spec.Fleet = "blue"
		Expect(k8s.Create(ctx, red)).To(Succeed())
		Expect(k8s.Create(ctx, bl)).To(Succeed())
		onlyNames := func(names ...string) types.GomegaMatcher {
			return HaveField("Rules", ConsistOf(HaveField("ResourceNames", Equal(names))))
		}
		defaultMay := func(verb, name string) func() bool {
			return serviceAccountMay(installNS, interceptorSA, ns, verb, name)
		}
		blueMay := func(verb, name string) func() bool { return serviceAccountMay(blueNS, blueSA, ns, verb, name) }

		Eventually(tlsGrantFor(interceptorSA, ns)).Should(onlyNames("red-tls"))
		Eventually(tlsGrantFor(blueSA, ns)).Should(onlyNames("blue-tls"))
		Consistently(func() []*rbacv1.Role {
			return []*rbacv1.Role{tlsGrantFor(interceptorSA, ns)(), tlsGrantFor(blueSA, ns)()}
		}).
			Should(HaveExactElements(onlyNames("red-tls"), onlyNames("blue-tls")), "no fleet's Role names another fleet's Secret")
		for _, verb := range []string{"get", "list", "watch"} {
			// The authorizer learns of Roles and RoleBindings from its own watch: a grant takes effect a moment after it is written.
			Eventually(defaultMay(verb, "red-tls")).Should(BeTrue(), "default fleet: %s its own object's Secret", verb)
			Expect(defaultMay(verb, "blue-tls")()).To(BeFalse(), "default fleet: %s the blue object's Secret", verb)
			Eventually(blueMay(verb, "blue-tls")).Should(BeTrue(), "blue fleet: %s its own object's Secret", verb)
			Expect(blueMay(verb, "red-tls")()).To(BeFalse(), "blue fleet: %s the default object's Secret", verb)
		}

		By("moving the blue object to the default fleet: its Secret's grant moves with it")
		update(bl, func(h *v1.HTTPScaledObject) { h.Spec.Fleet = "" })
		Eventually(tlsGrantFor(interceptorSA, ns)).Should(onlyNames("blue-tls", "red-tls"))
		Eventually(tlsGrantFor(blueSA, ns)).Should(BeNil())
		Eventually(blueMay("get", "blue-tls")).Should(BeFalse())
		Eventually(defaultMay("get", "blue-tls")).Should(BeTrue())

		Expect(k8s.Delete(ctx, red)).To(Succeed())
		Expect(k8s.Delete(ctx, bl)).To(Succeed())
		Eventually(tlsGrantFor(interceptorSA, ns)).Should(BeNil())
	})

	It("routes and scales each object only by the fleet it names, and moves it when the fleet changes", func() {
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		red := app(ns, "red", "red."+ns+".example.com") // no fleet: the default one
		Expect(k8s.Create(ctx, red)).To(Succeed())
		bl := app(ns, "bl", "bl."+ns+".example.com")
		bl.Spec.Fleet = "blue"
		Expect(k8s.Create(ctx, bl)).To(Succeed())

		Eventually(entryOf(ns + "/red")).ShouldNot(BeNil())
		Eventually(blueEntryOf(ns + "/bl")).ShouldNot(BeNil())
		Eventually(scalerAddressOf(bl)).Should(Equal(blueScaler))
		Eventually(scalerAddressOf(red)).Should(Equal(scalerAddr))
		Consistently(func() []*routing.Entry { return []*routing.Entry{tableEntry(ns + "/bl"), blueEntry(ns + "/red")} }).
			Should(HaveExactElements(BeNil(), BeNil()), "each fleet's table holds only its own objects")
		Expect(current(red).Finalizers).To(ConsistOf(controller.Finalizer))
		Expect(current(bl).Finalizers).To(ConsistOf(controller.FinalizerFor("blue")))

		By("moving red to the blue fleet")
		cur := current(red)
		cur.Spec.Fleet = "blue"
		Expect(k8s.Update(ctx, cur)).To(Succeed())
		Eventually(blueEntryOf(ns + "/red")).ShouldNot(BeNil())
		Eventually(entryOf(ns + "/red")).Should(BeNil())
		Eventually(scalerAddressOf(red)).Should(Equal(blueScaler))
		Eventually(func() []string { return current(red).Finalizers }).Should(ConsistOf(controller.FinalizerFor("blue")))
		Consistently(scalerAddressOf(red)).Should(Equal(blueScaler), "the old fleet's operator leaves the ScaledObject alone")

		By("moving it to a fleet nobody serves")
		cur = current(red)
		cur.Spec.Fleet = "green"
		Expect(k8s.Update(ctx, cur)).To(Succeed())
		Eventually(blueEntryOf(ns + "/red")).Should(BeNil())
		Eventually(condition(red, v1.ConditionReady)).Should(And(haveCondition(False, controller.ReasonFleetNotServed),
			HaveField("Message", ContainSubstring(`fleet "green"`)), HaveField("Message", ContainSubstring("blue, default"))))
		Eventually(func() []string { return current(red).Finalizers }).Should(BeEmpty())
		Expect(current(red).Status.Routing).To(BeNil())

		By("deleting objects of either fleet")
		Expect(k8s.Delete(ctx, red)).To(Succeed())
		Expect(k8s.Delete(ctx, bl)).To(Succeed())
		Eventually(isNotFound(red)).Should(BeTrue())
		Eventually(isNotFound(bl)).Should(BeTrue())
		Eventually(blueEntryOf(ns + "/bl")).Should(BeNil())
	})

	It("redirects a Serve-mode app's Service to the interceptors of the object's own fleet, and follows the object to another fleet", func() {
		def := newFakeInterceptor("198.19.9.1")
		serveFleet(def)
		bl := newFakeInterceptor("198.19.9.2")
		publishBlueFleet(bl)
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		DeferCleanup(func() { Expect(k8s.DeleteAllOf(ctx, &v1.HTTPScaledObject{}, client.InNamespace(ns))).To(Succeed()) })
		h := serveApp(ns, "tide")
		h.Spec.Fleet = "blue"
		Expect(k8s.Create(ctx, h)).To(Succeed())
		key := ns + "/tide"

		// No ready pod yet: blue's interceptor gets the Service's traffic, not the default fleet's.
		Eventually(blueEntryOf(key), timeout).Should(HaveField("ServePort", Not(BeZero())), "blue's table gives the app its Serve port")
		Eventually(redirectTargets(ns, "tide"), timeout).Should(Equal(targetsAt(blueEntryOf(key)().ServePort)("198.19.9.2")))
		Eventually(condition(h, v1.ConditionServing), timeout).Should(haveCondition(False, v1.ServingReasonProxying))
		Eventually(blueEntryOf(key), timeout).Should(HaveField("Hosts", ContainElement("tide."+ns+".svc")))
		Consistently(func() *routing.Entry { return tableEntry(key) }).Should(BeNil(), "the default fleet does not route it")

		By("moving it to the default fleet")
		update(h, func(o *v1.HTTPScaledObject) { o.Spec.Fleet = "" })
		Eventually(servePortOf(key), timeout).ShouldNot(BeZero())
		Eventually(redirectTargets(ns, "tide"), timeout).Should(Equal(targetsAt(servePortOf(key)())("198.19.9.1")))
		Eventually(entryOf(key), timeout).Should(HaveField("Hosts", ContainElement("tide."+ns+".svc")))
		Eventually(blueEntryOf(key), timeout).Should(BeNil())

		By("moving it to a fleet nobody serves")
		update(h, func(o *v1.HTTPScaledObject) { o.Spec.Fleet = "violet" })
		Eventually(condition(h, v1.ConditionReady), timeout).Should(haveCondition(False, controller.ReasonFleetNotServed))
		Eventually(redirect(ns, "tide"), timeout).Should(BeNil(), "nothing routes the app: the Service is given back")
		Eventually(condition(h, v1.ConditionServing), timeout).Should(Equal(metav1.Condition{}))

		Expect(k8s.Delete(ctx, current(h))).To(Succeed())
		Eventually(redirect(ns, "tide"), timeout).Should(BeNil())
		Eventually(isNotFound(h), timeout).Should(BeTrue())
	})

	It("says in the status of an object whose fleet no operator serves why nothing routes it, until one does", func() {
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		lost := app(ns, "lost", "lost."+ns+".example.com")
		lost.Spec.Fleet = "green"
		Expect(k8s.Create(ctx, lost)).To(Succeed())

		Eventually(condition(lost, v1.ConditionReady)).Should(haveCondition(False, controller.ReasonFleetNotServed))
		Expect(condition(lost, v1.ConditionRoutingPropagated)()).To(haveCondition(False, controller.ReasonFleetNotServed))
		Expect(current(lost).Finalizers).To(BeEmpty())
		Expect(scaledObject(lost)()).To(BeNil())
		Expect(tableEntry(ns + "/lost")).To(BeNil())
		Expect(blueEntry(ns + "/lost")).To(BeNil())

		By("installing an operator for fleet green")
		Expect(client.IgnoreAlreadyExists(k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "green-system"}}))).To(Succeed())
		o := defaultOptions()
		o.Fleet = "green"
		o.Namespace = "green-system"
		o.TableName = "httpscale-green-routing-table"
		o.ScalerAddress = "httpscale-green-scaler.green-system.svc.cluster.local:9090"
		o.InterceptorSelector = labels.SelectorFromSet(labels.Set{serviceName: "httpscale-green-interceptor-admin"})
		o.FleetLeaseInterval = time.Second
		green := startOperator(o)
		DeferCleanup(func() { green.stop() })
		// Green has no interceptors: its operator routes the object and says so.
		Eventually(condition(lost, v1.ConditionRoutingPropagated)).Should(haveCondition(False, "NoInterceptors"))
		Eventually(scalerAddressOf(lost)).Should(Equal(o.ScalerAddress))
		Consistently(condition(lost, v1.ConditionReady)).ShouldNot(HaveField("Reason", controller.ReasonFleetNotServed))

		Expect(k8s.Delete(ctx, lost)).To(Succeed())
		Eventually(isNotFound(lost)).Should(BeTrue())
	})
})

// blueEntry returns fleet blue's stored table entry for key, or nil.
func blueEntry(key string) *routing.Entry {
	GinkgoHelper()
	c, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	t, err := testenv.StoredTable(c, k8s, blueNS, blueTable)
	if err != nil {
		return nil
	}
	e, ok := t.Lookup(key)
	if !ok {
		return nil
	}
	out := e.Clone()
	return &out
}

func blueEntryOf(key string) func() *routing.Entry {
	return func() *routing.Entry { return blueEntry(key) }
}

// scalerAddressOf yields the scaler address in the trigger of h's ScaledObject ("" without one).
func scalerAddressOf(h *v1.HTTPScaledObject) func() string {
	return func() string {
		so := scaledObject(h)()
		if so == nil || len(so.Spec.Triggers) == 0 {
			return ""
		}
		return so.Spec.Triggers[0].Metadata["scalerAddress"]
	}
}

// publishBlueFleet publishes the fake interceptors as fleet blue's admin Service endpoints for one spec.
func publishBlueFleet(fakes ...*fakeInterceptor) {
	GinkgoHelper()
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "blue-fleet", Namespace: blueNS,
		Labels: map[string]string{serviceName: "httpscale-blue-interceptor-admin"}}}
	slice.AddressType = discoveryv1.AddressTypeIPv4
	slice.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("admin"), Port: ptr.To[int32](adminPort)}}
	for _, f := range fakes {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{f.ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	Expect(k8s.Create(ctx, slice)).To(Succeed())
	DeferCleanup(func() { Expect(client.IgnoreNotFound(k8s.Delete(ctx, slice))).To(Succeed()) })
}
