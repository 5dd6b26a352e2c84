package controller_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

var _ = Describe("Routing propagation", func() {
	It("counts the ready interceptors that serve the object's current generation", func() {
		ns := newNamespace()
		// Documentation addresses (TEST-NET-1): EndpointSlice validation rejects loopback, so the
		// slices carry these and the operator's probe transport dials each fake on loopback instead.
		a, b := newFakeInterceptor("192.0.2.10"), newFakeInterceptor("192.0.2.11")
		publishFleet("fleet", []*fakeInterceptor{a, b})
		DeferCleanup(func() {
			Expect(k8s.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: installNS}})).To(Succeed())
		})

		h := app(ns, "prop", "prop.example.com")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(func() *v1.RoutingStatus { return current(h).Status.Routing }).Should(And(
			HaveField("InterceptorsReady", int32(2)), HaveField("InterceptorsTotal", int32(2))))
		Expect(current(h).Status.Routing.TableVersion).To(Equal(tableVersion()))
		Eventually(condition(h, v1.ConditionRoutingPropagated)).Should(haveCondition(True, "AllInterceptors"))
		Eventually(condition(h, v1.ConditionReady)).Should(haveCondition(True, "Ready"))
		// No ReadyTrue event yet: a new object that is Ready at its first status is not news (and under
		// load the table can propagate before the first status is written).

		By("holding Ready back while one replica still serves the previous table")
		b.pin(tableVersion())
		update(h, func(h *v1.HTTPScaledObject) { h.Spec.Hosts = append(h.Spec.Hosts, "prop2.example.com") })
		Eventually(entryOf(ns + "/prop")).Should(HaveField("Generation", int64(2)))
		Eventually(func() *v1.RoutingStatus { return current(h).Status.Routing }).Should(And(
			HaveField("TableVersion", tableVersion()),
			HaveField("InterceptorsReady", int32(1)), HaveField("InterceptorsTotal", int32(2))))
		Eventually(condition(h, v1.ConditionRoutingPropagated)).Should(And(haveCondition(False, "Propagating"),
			HaveField("Message", ContainSubstring("1 of 2 ready interceptors")), HaveField("ObservedGeneration", int64(2))))
		Eventually(condition(h, v1.ConditionReady)).Should(haveCondition(False, "Propagating"))
		Eventually(events(h), eventWait).Should(ContainElement("Normal ReadyFalse"))

		By("not counting a replica whose endpoint is not ready")
		publishFleet("fleet", []*fakeInterceptor{a, b}, b)
		Eventually(func() *v1.RoutingStatus { return current(h).Status.Routing }).Should(And(
			HaveField("InterceptorsReady", int32(1)), HaveField("InterceptorsTotal", int32(1))))
		Eventually(condition(h, v1.ConditionReady)).Should(haveCondition(True, "Ready"))
		Eventually(events(h), eventWait).Should(ContainElement("Normal ReadyTrue"))

		By("counting a replica once it catches up")
		b.follow()
		publishFleet("fleet", []*fakeInterceptor{a, b})
		Eventually(func() *v1.RoutingStatus { return current(h).Status.Routing }).Should(And(
			HaveField("InterceptorsReady", int32(2)), HaveField("InterceptorsTotal", int32(2))))

		By("counting a ready replica that does not answer as not serving the table")
		silent := newFakeInterceptor("192.0.2.12")
		silent.srv.Close()
		publishFleet("fleet", []*fakeInterceptor{a, b, silent})
		Eventually(func() *v1.RoutingStatus { return current(h).Status.Routing }).Should(And(
			HaveField("InterceptorsReady", int32(2)), HaveField("InterceptorsTotal", int32(3))))
		Eventually(condition(h, v1.ConditionReady)).Should(haveCondition(False, "Propagating"))
	})
})
