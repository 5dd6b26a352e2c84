//go:build e2e

package e2e

import (
	"fmt"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// A schedule rule pre-warms an app before a known peak: at the cron time the operator raises the
// generated ScaledObject's minReplicaCount, KEDA scales the app up without any traffic, and the rule's
// status records the execution. Rules the API server's schema cannot judge (cron syntax, time zones)
// are rejected by the operator's validating webhook.
var _ = Describe("Schedules", Ordered, func() {
	var ns, host string

	BeforeAll(func(ctx SpecContext) { _, ns, host = scenario(ctx, "schedules") })

	It("raises min replicas at the scheduled time, not before, and records the execution", func(ctx SpecContext) {
		// The next minute boundary at least 40s away: time to set up, and to see nothing happen early.
		now := time.Now().UTC()
		at := now.Truncate(time.Minute).Add(time.Minute)
		if at.Sub(now) < 40*time.Second {
			at = at.Add(time.Minute)
		}
		cron := fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour())
		By(fmt.Sprintf("a rule %q (UTC) raising min replicas to 2, due in %s", cron, time.Until(at).Round(time.Second)))
		hso := routedApp(ctx, ns, "app", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.Schedules = []httpscalev1alpha1.ScheduleRule{{
				Name: "morning-peak", Schedule: cron, TimeZone: ptr.To("UTC"), TargetMinReplicas: ptr.To[int32](2),
			}}
		})

		minReplicaCount := func() (int32, error) {
			var so kedav1alpha1.ScaledObject
			if err := f.Client.Get(ctx, client.ObjectKeyFromObject(hso), &so); err != nil {
				return -1, err
			}
			return ptr.Deref(so.Spec.MinReplicaCount, -1), nil
		}
		schedule := func(g Gomega) httpscalev1alpha1.ScheduleStatus {
			g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso)).To(Succeed())
			g.Expect(hso.Status.Schedules).To(HaveLen(1))
			return hso.Status.Schedules[0]
		}

		By("status names the next execution; the app stays at zero until then")
		Eventually(func(g Gomega) {
			st := schedule(g)
			g.Expect(st.RuleName).To(Equal("morning-peak"))
			g.Expect(st.TimeZone).To(Equal("UTC"))
			g.Expect(st.NextExecutionTime).NotTo(BeNil())
			g.Expect(st.NextExecutionTime.Time).To(BeTemporally("==", at))
			g.Expect(st.SuccessfulExecutions).To(BeEmpty())
		}).WithContext(ctx).Should(Succeed())
		Eventually(minReplicaCount).WithContext(ctx).Should(BeEquivalentTo(0))
		Consistently(func(g Gomega) {
			g.Expect(minReplicaCount()).To(BeEquivalentTo(0))
			g.Expect(replicas(ctx, ns, "app")).To(BeEquivalentTo(0))
		}).WithContext(ctx).WithTimeout(time.Until(at) - time.Second).WithPolling(time.Second).Should(Succeed())

		By("at the scheduled time the generated ScaledObject's minReplicaCount becomes 2")
		Eventually(minReplicaCount).WithContext(ctx).WithTimeout(time.Minute).Should(BeEquivalentTo(2))
		Expect(time.Now()).To(BeTemporally(">=", at))

		By("KEDA scales the app to 2 replicas without any traffic")
		Eventually(func(g Gomega) {
			var d appsv1.Deployment
			g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &d)).To(Succeed())
			g.Expect(ptr.Deref(d.Spec.Replicas, 1)).To(BeNumerically(">=", 2))
			g.Expect(d.Status.ReadyReplicas).To(BeNumerically(">=", 2))
		}).WithContext(ctx).Should(Succeed())

		By("status records the execution and names the next one, a day later")
		Eventually(func(g Gomega) {
			st := schedule(g)
			g.Expect(st.SuccessfulExecutions).To(HaveLen(1))
			e := st.SuccessfulExecutions[0]
			g.Expect(e.ScheduleTime.Time).To(BeTemporally("==", at))
			g.Expect(e.ExecutionTime.Time).To(BeTemporally(">=", at))
			g.Expect(e.AppliedMinReplicas).To(HaveValue(BeEquivalentTo(2)))
			g.Expect(e.CatchUp).To(BeFalse())
			g.Expect(st.FailedExecutions).To(BeEmpty())
			g.Expect(st.NextExecutionTime).NotTo(BeNil())
			g.Expect(st.NextExecutionTime.Time).To(BeTemporally("==", at.Add(24*time.Hour)))
		}).WithContext(ctx).Should(Succeed())
	})

	DescribeTable("the validating webhook rejects a rule the schema cannot judge, saying what to fix",
		func(ctx SpecContext, rule httpscalev1alpha1.ScheduleRule, message string) {
			hso := &httpscalev1alpha1.HTTPScaledObject{
				ObjectMeta: metav1.ObjectMeta{Name: "bad-schedule", Namespace: ns},
				Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
					Hosts: []httpscalev1alpha1.Host{"bad-schedule.example"},
					ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{
						APIVersion: "apps/v1", Kind: "Deployment", Name: "app", Service: "app", Port: ptr.To[int32](80)},
					Schedules: []httpscalev1alpha1.ScheduleRule{rule},
				},
			}
			err := f.Client.Create(ctx, hso)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(`admission webhook "httpscaledobjects.httpscale.dev" denied the request`))
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a minute of 61", httpscalev1alpha1.ScheduleRule{
			Name: "bad", Schedule: "61 8 * * *", TargetMinReplicas: ptr.To[int32](1),
		}, `spec.schedules[0].schedule: Invalid value: "61 8 * * *": schedule "61 8 * * *" is not a valid 5-field cron expression`),
		Entry("a date that never comes", httpscalev1alpha1.ScheduleRule{
			Name: "bad", Schedule: "0 0 31 2 *", TargetMinReplicas: ptr.To[int32](1),
		}, "never fires (no such date)"),
		Entry("an unknown time zone", httpscalev1alpha1.ScheduleRule{
			Name: "bad", Schedule: "0 8 * * *", TimeZone: ptr.To("Mars/Olympus_Mons"), TargetMinReplicas: ptr.To[int32](1),
		}, `timeZone "Mars/Olympus_Mons" is not a known IANA time zone`),
	)
})
