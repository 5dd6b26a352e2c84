package scheduler_test

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/scheduler"
	rules "github.com/httpscale/httpscale/pkg/schedule"
)

var _ = Describe("Wake-up at the next execution", func() {
	It("fires a rule at its time through the controller's requeue alone, with no other event", func(ctx SpecContext) {
		// A clock a few seconds before a minute boundary, running at real speed.
		start := time.Now()
		offset := start.Truncate(time.Minute).Add(time.Minute - 4*time.Second).Sub(start)
		now := func() time.Time { return time.Now().Add(offset) }

		ns := suite.NewNamespace(ctx, "schedule-")
		hso := app(ns, "ticker", v1.ScheduleRule{Name: "every-minute", Schedule: "* * * * *", TargetMinReplicas: ptr.To[int32](6)})
		key := client.ObjectKeyFromObject(hso)
		s := &scheduler.Scheduler{Client: k8s, Now: now, Options: rules.Options{Location: time.UTC, StartingDeadline: time.Minute}, Log: logr.Discard()}

		mgr, err := ctrl.NewManager(suite.Env.Config, ctrl.Options{Scheme: k8s.Scheme(), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		Expect(err).NotTo(HaveOccurred())
		// Like the operator's controller: status writes and ScaledObject changes do not trigger reconciles.
		err = ctrl.NewControllerManagedBy(mgr).Named("schedule-test").
			For(&v1.HTTPScaledObject{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			Complete(ctrlFunc(func(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
				if req.Namespace != ns {
					return ctrl.Result{}, nil
				}
				return ctrl.Result{RequeueAfter: reconcile(ctx, s, req.NamespacedName)}, nil
			}))
		Expect(err).NotTo(HaveOccurred())
		mctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() { defer GinkgoRecover(); Expect(mgr.Start(mctx)).To(Succeed()) }()

		Expect(k8s.Create(ctx, hso)).To(Succeed())
		Eventually(func() []v1.ScheduleStatus { return status(ctx, key) }, 30*time.Second, 100*time.Millisecond).Should(HaveLen(1))
		minR, _ := bounds(ctx, key)
		Expect(minR).To(Equal(int32(1)), "spec.replicas applies before the rule fires")

		Eventually(func() int32 { m, _ := bounds(ctx, key); return m }, 90*time.Second, 100*time.Millisecond).Should(Equal(int32(6)))
		// The bounds and the status are two writes: wait for the status to record the execution too.
		var st v1.ScheduleStatus
		Eventually(func() []v1.SuccessfulExecution {
			st = status(ctx, key)[0]
			return st.SuccessfulExecutions
		}, 10*time.Second, 100*time.Millisecond).ShouldNot(BeEmpty())
		e := st.SuccessfulExecutions[0]
		Expect(e.ExecutionTime.Sub(e.ScheduleTime.Time)).To(BeNumerically("<", 3*time.Second), "executed on time, not by a later poll")
		Expect(e.CatchUp).To(BeFalse())
	})
})

type ctrlFunc func(context.Context, ctrl.Request) (ctrl.Result, error)

func (f ctrlFunc) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return f(ctx, req)
}
