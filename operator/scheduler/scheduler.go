// Package scheduler runs an HTTPScaledObject's schedule rules inside the operator's reconcile: it decides
// which replica bounds apply now, maintains status.schedules, patches the user's own ScaledObject when a
// rule fires on an object with the skip-scaledobject annotation, and says when to reconcile again (at
// the next execution, not by polling).
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/config"
	rules "github.com/httpscale/httpscale/pkg/schedule"
)

// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;patch

// DefaultStartingDeadline is how late a missed execution may still be applied after an operator outage.
const DefaultStartingDeadline = time.Hour

// Outcome is what the schedules decided at one reconcile.
type Outcome struct {
	rules.Result
	// RequeueAfter is the time until the next execution of any rule; zero when none is scheduled.
	RequeueAfter time.Duration
}

// Apply evaluates hso's schedule rules at now against the status it carries, without side effects. The
// Outcome's Status replaces hso.Status.Schedules; Active (nil before any rule fired) says which bounds
// stand, and RequeueAfter when to come back.
func Apply(now time.Time, hso *v1.HTTPScaledObject, o rules.Options) Outcome {
	res := rules.Evaluate(now, hso.Spec.Schedules, hso.Status.Schedules, o)
	out := Outcome{Result: res}
	if !res.Next.IsZero() {
		out.RequeueAfter = max(res.Next.Sub(now), time.Millisecond)
	}
	return out
}

// Scheduler runs schedules as one step of the HTTPScaledObject reconcile. It is safe for concurrent use
// by parallel reconciles of different objects.
type Scheduler struct {
	// Client patches user-owned ScaledObjects (and lists them to find the one scaling the workload).
	Client client.Client
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Options carry the operator's time zone and the starting deadline.
	Options rules.Options
	// Recorder, if set, receives an event per execution (applied, missed or failed).
	Recorder events.EventRecorder
	Log      logr.Logger
}

// Reconcile runs hso's schedules now. It sets hso.Status.Schedules (the caller writes status), and when
// the user owns the ScaledObject (annotation httpscale.dev/skip-scaledobject: "true") and a rule fired,
// patches that ScaledObject's min/max. A missing or ambiguous user ScaledObject is recorded as a failed
// execution; API errors are returned so the reconcile is retried (status is then not written, so the
// execution is still due on the retry). An operator-generated ScaledObject takes the bounds of
// Outcome.Active over spec.replicas when it is built (Active.Bounds).
func (s *Scheduler) Reconcile(ctx context.Context, hso *v1.HTTPScaledObject) (Outcome, error) {
	if len(hso.Spec.Schedules) == 0 && len(hso.Status.Schedules) == 0 {
		return Outcome{}, nil
	}
	now := time.Now()
	if s.Now != nil {
		now = s.Now()
	}
	out := Apply(now, hso, s.Options)
	if len(out.Fired) > 0 && hso.Annotations[v1.AnnotationSkipScaledObject] == "true" {
		// The active rule is the latest of the executions that just fired.
		so, err := PatchUserScaledObject(ctx, s.Client, hso, out.Active.Min, out.Active.Max)
		var user *UserError
		switch {
		case errors.As(err, &user):
			out.Fail(now, user.Error())
		case err != nil:
			return Outcome{}, err
		default:
			s.Log.V(1).Info("patched user-owned ScaledObject", "scaledObject", client.ObjectKeyFromObject(so), "min", ptr.Deref(so.Spec.MinReplicaCount, 0), "max", ptr.Deref(so.Spec.MaxReplicaCount, 100))
		}
	}
	hso.Status.Schedules = out.Status
	s.record(hso, out, now)
	return out, nil
}

func (s *Scheduler) record(hso *v1.HTTPScaledObject, out Outcome, now time.Time) {
	if s.Recorder == nil {
		return
	}
	for _, e := range out.Fired {
		note := "applied"
		if e.CatchUp {
			note = "caught up on (missed while the operator was down)"
		}
		s.Recorder.Eventf(hso, nil, corev1.EventTypeNormal, "ScheduleExecuted", "Scale",
			"schedule %s %s its %s execution: %s", e.Rule, note, e.ScheduleTime.Format(time.RFC3339), describe(e.Min, e.Max))
	}
	for _, e := range out.Missed {
		s.Recorder.Eventf(hso, nil, corev1.EventTypeWarning, "ScheduleMissed", "Scale",
			"schedule %s missed its %s execution by %s, beyond the starting deadline", e.Rule, e.ScheduleTime.Format(time.RFC3339), now.Sub(e.ScheduleTime).Round(time.Second))
	}
	for _, st := range out.Status {
		if len(st.FailedExecutions) > 0 && st.FailedExecutions[0].ExecutionTime.Time.Equal(now) && !isMissed(out.Missed, st.RuleName) {
			s.Recorder.Eventf(hso, nil, corev1.EventTypeWarning, "ScheduleFailed", "Scale", "schedule %s: %s", st.RuleName, st.FailedExecutions[0].Message)
		}
	}
}

func isMissed(missed []rules.Execution, rule string) bool {
	for _, e := range missed {
		if e.Rule == rule {
			return true
		}
	}
	return false
}

func describe(minReplicas, maxReplicas *int32) string {
	switch {
	case minReplicas != nil && maxReplicas != nil:
		return fmt.Sprintf("min %d, max %d replicas", *minReplicas, *maxReplicas)
	case minReplicas != nil:
		return fmt.Sprintf("min %d replicas", *minReplicas)
	case maxReplicas != nil:
		return fmt.Sprintf("max %d replicas", *maxReplicas)
	}
	return "no bounds"
}

// New returns a Scheduler for the operator: the manager's client, the real clock, the
// operator's time zone for rules without one, and the configured starting deadline.
func New(c client.Client, cfg config.Schedules, recorder events.EventRecorder, log logr.Logger) *Scheduler {
	deadline := cfg.StartingDeadline
	if deadline <= 0 {
		deadline = DefaultStartingDeadline
	}
	return &Scheduler{
		Client:   c,
		Options:  rules.Options{Location: time.Local, StartingDeadline: deadline},
		Recorder: recorder,
		Log:      log.WithName("schedule"),
	}
}
