package scheduler_test

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/scheduler"
	rules "github.com/httpscale/httpscale/pkg/schedule"
)

// clock is the injected time.
type clock struct{ now time.Time }

func (c *clock) Now() time.Time { return c.now }

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	Expect(err).NotTo(HaveOccurred())
	return t
}

func app(ns, name string, rs ...v1.ScheduleRule) *v1.HTTPScaledObject {
	return &v1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{"shop.example.com"},
			ScaleTargetRef: v1.ScaleTargetRef{Name: name, Service: name, Port: ptr.To[int32](8080)},
			Replicas:       &v1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](10)},
			Schedules:      rs,
		},
	}
}

func kedaObject(ns, name, target string, minR, maxR int32) *kedav1alpha1.ScaledObject {
	return &kedav1alpha1.ScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: kedav1alpha1.ScaledObjectSpec{
			ScaleTargetRef:  &kedav1alpha1.ScaleTarget{Name: target},
			MinReplicaCount: ptr.To(minR),
			MaxReplicaCount: ptr.To(maxR),
			CooldownPeriod:  ptr.To[int32](120),
			Triggers:        []kedav1alpha1.ScaleTriggers{{Type: "cpu", Metadata: map[string]string{"value": "50"}}},
		},
	}
}

// reconcile does what the operator's reconciler does with a Scheduler: run the step, build the generated
// ScaledObject from spec.replicas with the schedule's bounds on top (unless the user owns it), and write
// status. It returns the requeue delay.
func reconcile(ctx context.Context, s *scheduler.Scheduler, key client.ObjectKey) time.Duration {
	hso := &v1.HTTPScaledObject{}
	Expect(k8s.Get(ctx, key, hso)).To(Succeed())
	orig := hso.DeepCopy()
	out, err := s.Reconcile(ctx, hso)
	Expect(err).NotTo(HaveOccurred())
	if hso.Annotations[v1.AnnotationSkipScaledObject] != "true" {
		minR, maxR := out.Active.Bounds(hso.Spec.Bounds()) // as the operator's ScaledObject builder does
		desired := kedaObject(hso.Namespace, hso.Name, hso.Spec.ScaleTargetRef.Name, minR, maxR)
		live := &kedav1alpha1.ScaledObject{}
		err := k8s.Get(ctx, key, live)
		if apierrors.IsNotFound(err) {
			Expect(k8s.Create(ctx, desired)).To(Succeed())
		} else {
			Expect(err).NotTo(HaveOccurred())
			live.Spec = desired.Spec
			Expect(k8s.Update(ctx, live)).To(Succeed())
		}
	}
	Expect(k8s.Status().Patch(ctx, hso, client.MergeFrom(orig))).To(Succeed())
	return out.RequeueAfter
}

func bounds(ctx context.Context, key client.ObjectKey) (int32, int32) {
	so := &kedav1alpha1.ScaledObject{}
	Expect(k8s.Get(ctx, key, so)).To(Succeed())
	return *so.Spec.MinReplicaCount, *so.Spec.MaxReplicaCount
}

func status(ctx context.Context, key client.ObjectKey) []v1.ScheduleStatus {
	hso := &v1.HTTPScaledObject{}
	Expect(k8s.Get(ctx, key, hso)).To(Succeed())
	return hso.Status.Schedules
}

var _ = Describe("Scheduled scaling", func() {
	ctx := context.Background()
	opts := rules.Options{Location: time.UTC, StartingDeadline: time.Hour}

	It("sets the generated ScaledObject's bounds when a rule fires, records history, and wakes at the next execution", func() {
		ns := suite.NewNamespace(ctx, "schedule-")
		hso := app(ns, "shop",
			v1.ScheduleRule{Name: "business", Schedule: "0 8 * * mon-fri", TimeZone: ptr.To("Europe/Berlin"), TargetMinReplicas: ptr.To[int32](4), TargetMaxReplicas: ptr.To[int32](20)},
			v1.ScheduleRule{Name: "night", Schedule: "0 20 * * *", TimeZone: ptr.To("Europe/Berlin"), TargetMinReplicas: ptr.To[int32](0)},
		)
		Expect(k8s.Create(ctx, hso)).To(Succeed())
		key := client.ObjectKeyFromObject(hso)
		clk := &clock{now: at("2026-05-04T05:00:00Z")} // Monday 07:00 in Berlin
		s := &scheduler.Scheduler{Client: k8s, Now: clk.Now, Options: opts, Log: logr.Discard()}

		By("before any rule fired, spec.replicas applies")
		Expect(reconcile(ctx, s, key)).To(Equal(time.Hour))
		minR, maxR := bounds(ctx, key)
		Expect([]int32{minR, maxR}).To(Equal([]int32{1, 10}))
		st := status(ctx, key)
		Expect(st).To(HaveLen(2))
		Expect(st[0].NextExecutionTime.Time).To(BeTemporally("==", at("2026-05-04T06:00:00Z")))
		Expect(st[0].TimeZone).To(Equal("Europe/Berlin"))

		By("at 08:00 Berlin the business rule fires")
		clk.now = at("2026-05-04T06:00:00.250Z")
		Expect(reconcile(ctx, s, key)).To(Equal(12*time.Hour - 250*time.Millisecond))
		minR, maxR = bounds(ctx, key)
		Expect([]int32{minR, maxR}).To(Equal([]int32{4, 20}))
		st = status(ctx, key)
		Expect(st[0].SuccessfulExecutions).To(HaveLen(1))
		e := st[0].SuccessfulExecutions[0]
		Expect(e.ScheduleTime.Time).To(BeTemporally("==", at("2026-05-04T06:00:00Z")))
		Expect(*e.AppliedMinReplicas).To(Equal(int32(4)))
		Expect(*e.AppliedMaxReplicas).To(Equal(int32(20)))
		Expect(e.CatchUp).To(BeFalse())
		Expect(st[0].NextExecutionTime.Time).To(BeTemporally("==", at("2026-05-05T06:00:00Z")))

		By("at 20:00 the night rule sets min 0 and leaves max to spec.replicas")
		clk.now = at("2026-05-04T18:00:00.100Z")
		reconcile(ctx, s, key)
		minR, maxR = bounds(ctx, key)
		Expect([]int32{minR, maxR}).To(Equal([]int32{0, 10}))

		By("after an outage the operator catches up on the missed 08:00 within the deadline")
		restarted := &scheduler.Scheduler{Client: k8s, Now: func() time.Time { return at("2026-05-05T06:40:00Z") }, Options: opts, Log: logr.Discard()}
		reconcile(ctx, restarted, key)
		minR, maxR = bounds(ctx, key)
		Expect([]int32{minR, maxR}).To(Equal([]int32{4, 20}))
		st = status(ctx, key)
		Expect(st[0].SuccessfulExecutions).To(HaveLen(2))
		Expect(st[0].SuccessfulExecutions[0].CatchUp).To(BeTrue())
		Expect(st[0].SuccessfulExecutions[0].ExecutionTime.Time).To(BeTemporally("==", at("2026-05-05T06:40:00Z")))

		By("an outage beyond the deadline is recorded as missed and the bounds in force stay")
		late := &scheduler.Scheduler{Client: k8s, Now: func() time.Time { return at("2026-05-05T21:30:00Z") }, Options: opts, Log: logr.Discard()}
		reconcile(ctx, late, key)
		minR, maxR = bounds(ctx, key)
		Expect([]int32{minR, maxR}).To(Equal([]int32{4, 20}))
		st = status(ctx, key)
		Expect(st[1].FailedExecutions).To(HaveLen(1))
		Expect(st[1].FailedExecutions[0].Message).To(ContainSubstring("beyond its starting deadline"))
	})

	It("patches only min/max of the user's own ScaledObject", func() {
		ns := suite.NewNamespace(ctx, "schedule-")
		user := kedaObject(ns, "my-scaler", "shop", 1, 5)
		Expect(k8s.Create(ctx, user)).To(Succeed())
		hso := app(ns, "shop", v1.ScheduleRule{Name: "peak", Schedule: "30 8 * * *", TargetMinReplicas: ptr.To[int32](8)})
		hso.Annotations = map[string]string{v1.AnnotationSkipScaledObject: "true"}
		Expect(k8s.Create(ctx, hso)).To(Succeed())
		key := client.ObjectKeyFromObject(hso)
		clk := &clock{now: at("2026-05-04T08:00:00Z")}
		s := &scheduler.Scheduler{Client: k8s, Now: clk.Now, Options: opts, Log: logr.Discard()}

		Expect(reconcile(ctx, s, key)).To(Equal(30 * time.Minute))
		clk.now = at("2026-05-04T08:30:01Z")
		reconcile(ctx, s, key)

		got := &kedav1alpha1.ScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(user), got)).To(Succeed())
		Expect(*got.Spec.MinReplicaCount).To(Equal(int32(8)))
		Expect(*got.Spec.MaxReplicaCount).To(Equal(int32(8)), "max is raised to the scheduled min so the ScaledObject stays valid")
		Expect(*got.Spec.CooldownPeriod).To(Equal(int32(120)), "fields the schedule does not own are untouched")
		Expect(got.Spec.Triggers).To(HaveLen(1))
		Expect(apierrors.IsNotFound(k8s.Get(ctx, key, &kedav1alpha1.ScaledObject{}))).To(BeTrue(), "no ScaledObject is generated for a user-owned app")
		st := status(ctx, key)
		Expect(st[0].SuccessfulExecutions).To(HaveLen(1))
		Expect(*st[0].SuccessfulExecutions[0].AppliedMinReplicas).To(Equal(int32(8)))
	})

	It("records a failed execution when the user's ScaledObject does not exist", func() {
		ns := suite.NewNamespace(ctx, "schedule-")
		hso := app(ns, "ghost", v1.ScheduleRule{Name: "peak", Schedule: "30 8 * * *", TargetMinReplicas: ptr.To[int32](8)})
		hso.Annotations = map[string]string{v1.AnnotationSkipScaledObject: "true"}
		Expect(k8s.Create(ctx, hso)).To(Succeed())
		key := client.ObjectKeyFromObject(hso)
		clk := &clock{now: at("2026-05-04T08:00:00Z")}
		s := &scheduler.Scheduler{Client: k8s, Now: clk.Now, Options: opts, Log: logr.Discard()}
		reconcile(ctx, s, key)
		clk.now = at("2026-05-04T08:30:00Z")
		Expect(reconcile(ctx, s, key)).To(Equal(24 * time.Hour))
		st := status(ctx, key)
		Expect(st[0].SuccessfulExecutions).To(BeEmpty())
		Expect(st[0].FailedExecutions).To(HaveLen(1))
		Expect(st[0].FailedExecutions[0].Message).To(ContainSubstring("no KEDA ScaledObject in namespace " + ns + " scales Deployment/ghost"))
	})
})
