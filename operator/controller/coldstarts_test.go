package controller_test

import (
	"context"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

var _ = Describe("Cold-start breakdown in status", func() {
	// setActive sets the ScaledObject's Active condition as KEDA does after it scaled the workload.
	setActive := func(h *v1.HTTPScaledObject, status metav1.ConditionStatus) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			so := scaledObject(h)()
			g.Expect(so).NotTo(BeNil())
			so.Status.Conditions = kedav1alpha1.Conditions{{Type: kedav1alpha1.ConditionActive, Status: status, Reason: "ScalerActive"}}
			g.Expect(k8s.Status().Update(ctx, so)).To(Succeed())
		}).Should(Succeed())
	}
	lastColdStart := func(h *v1.HTTPScaledObject) func() *v1.ColdStartStatus {
		return func() *v1.ColdStartStatus {
			var cur v1.HTTPScaledObject
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(h), &cur); err != nil {
				return nil
			}
			return cur.Status.LastColdStart
		}
	}
	record := func(app, interceptor, pod string, held time.Time, steps map[string]time.Duration) admin.ColdStart {
		rec := admin.ColdStart{App: app, Interceptor: interceptor, Pod: pod, Outcome: admin.OutcomeForwarded,
			Probe: "httpGet :8000/ready (the pod's readiness probe)", Steps: []admin.ColdStartStep{{Name: admin.StepHeld, At: held}}}
		for _, name := range []string{admin.StepWakeSent, admin.StepEndpointListed, admin.StepAppAnswered, admin.StepForwarded, admin.StepEndpointReady} {
			if d, ok := steps[name]; ok {
				rec.Steps = append(rec.Steps, admin.ColdStartStep{Name: name, At: held.Add(d)})
			}
		}
		return rec
	}
	step := func(name, after, source string) any {
		return And(HaveField("Name", name), HaveField("After", after), HaveField("Source", source))
	}

	It("shows the latest cold start the interceptors recorded, with the moment KEDA scaled the workload", func() {
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		a, b := newFakeInterceptor("192.0.2.40"), newFakeInterceptor("192.0.2.41")
		publishFleet("coldstart-fleet", []*fakeInterceptor{a, b})
		DeferCleanup(func() {
			Expect(k8s.Delete(ctx, &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "coldstart-fleet", Namespace: installNS}})).To(Succeed())
		})
		h := app(ns, "cold", "cold."+ns+".example.com")
		Expect(k8s.Create(ctx, h)).To(Succeed())
		Eventually(condition(h, v1.ConditionReady)).Should(haveCondition(True, "Ready"))
		key := ns + "/cold"

		setActive(h, metav1.ConditionFalse)
		held := time.Now()
		time.Sleep(100 * time.Millisecond)
		setActive(h, metav1.ConditionTrue) // KEDA scaled the workload from zero
		scaledBy := time.Since(held)
		// The interceptors' steps come after the operator's Scaled step, whenever a loaded machine
		// let setActive take effect (it is asserted below to be seen within scaledBy + 1 s).
		listed := (scaledBy + 2*time.Second).Round(time.Millisecond)
		after := func(d time.Duration) string { return (listed + d).String() }
		steps := map[string]time.Duration{admin.StepWakeSent: time.Millisecond, admin.StepEndpointListed: listed,
			admin.StepAppAnswered: listed + 600*time.Millisecond, admin.StepForwarded: listed + 601*time.Millisecond, admin.StepEndpointReady: listed + 8*time.Second}
		// Both replicas held requests of the same cold start; the earlier one's record is shown.
		a.recordColdStarts(record(key, "interceptor-a", "cold-1", held, steps))
		b.recordColdStarts(record(key, "interceptor-b", "cold-1", held.Add(300*time.Millisecond), steps))

		Eventually(lastColdStart(h)).Should(And(
			HaveField("Interceptor", "interceptor-a"), HaveField("Pod", "cold-1"), HaveField("Outcome", "Forwarded"),
			HaveField("Total", after(601*time.Millisecond)), HaveField("Probe", "httpGet :8000/ready (the pod's readiness probe)"),
		))
		st := lastColdStart(h)()
		Expect(st.HeldAt.Time).To(BeTemporally("~", held, time.Microsecond))
		Expect(st.Steps).To(HaveExactElements(
			step("Held", "0s", "interceptor"),
			step("WakeSent", "1ms", "interceptor"),
			And(HaveField("Name", "Scaled"), HaveField("Source", "operator")),
			step("EndpointListed", after(0), "interceptor"),
			step("AppAnswered", after(600*time.Millisecond), "interceptor"),
			step("Forwarded", after(601*time.Millisecond), "interceptor"),
			step("EndpointReady", after(8*time.Second), "interceptor"),
		))
		scaled, err := time.ParseDuration(st.Steps[2].After)
		Expect(err).NotTo(HaveOccurred())
		Expect(scaled).To(BeNumerically(">=", 100*time.Millisecond))
		Expect(scaled).To(BeNumerically("<=", scaledBy+time.Second), "the operator saw KEDA's Active condition when it changed")

		By("replacing it with the next cold start, whichever replica recorded it")
		time.Sleep(time.Second) // KEDA stays active: a cold start now has no Scaled step of its own
		next := time.Now()
		b.recordColdStarts(record(key, "interceptor-b", "cold-2", next, map[string]time.Duration{admin.StepForwarded: 2 * time.Second}))
		Eventually(lastColdStart(h)).Should(And(HaveField("Pod", "cold-2"), HaveField("Interceptor", "interceptor-b"), HaveField("Total", "2s")))
		Expect(lastColdStart(h)().Steps).To(HaveLen(2), "KEDA did not turn active during this one: no Scaled step")

		By("ignoring a replica whose answer is not believable, record by record")
		bad := record("not-a-key", "interceptor-a", "x", time.Now(), nil)
		a.recordColdStarts(record(key, "interceptor-a", "cold-3", time.Now(), nil), bad)
		Consistently(lastColdStart(h), 2*time.Second).Should(HaveField("Pod", "cold-2"))
	})
})
