package schedule

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// Default history limits, as in the CRD's defaults.
const (
	DefaultSuccessfulHistoryLimit = 3
	DefaultFailedHistoryLimit     = 3
)

// Options configure Evaluate.
type Options struct {
	// Location is the zone of rules that name none (the operator's zone). Nil means UTC.
	Location *time.Location
	// StartingDeadline is how late a missed execution may still be applied. An execution found later
	// than that (the operator was down) is recorded as failed instead.
	StartingDeadline time.Duration
	// CatchUpAfter is the lateness from which an applied execution is recorded as a catch-up rather
	// than an on-time one. Zero means one minute.
	CatchUpAfter time.Duration
}

// Active is the rule whose bounds stand: the one whose latest successful execution is the most recent.
type Active struct {
	Rule         string
	ScheduleTime time.Time
	// Min and Max are the bounds the execution applied; nil leaves spec.replicas in force.
	Min, Max *int32
}

// Execution is one execution Evaluate applied in this call.
type Execution struct {
	Rule         string
	ScheduleTime time.Time
	Min, Max     *int32
	CatchUp      bool
}

// Result is what Evaluate decided at one instant.
type Result struct {
	// Status is the new status.schedules, one entry per rule in spec order.
	Status []v1.ScheduleStatus
	// Active is the rule whose bounds stand now; nil before any rule has fired.
	Active *Active
	// Fired lists the executions applied in this call (empty on most calls).
	Fired []Execution
	// Missed lists the executions found too late (beyond the starting deadline) in this call.
	Missed []Execution
	// Next is the earliest upcoming execution of any rule; zero when no rule is scheduled.
	Next time.Time

	rules []v1.ScheduleRule
}

// Evaluate runs the rules at now, given the status written the last time (nil the first time). Each
// rule's nextExecutionTime in status is the cursor: executions from it up to now are due. Of those, the
// latest one is applied if it is no older than the starting deadline; otherwise the latest is recorded
// as missed. A new, resumed or edited rule starts from now without catching up.
func Evaluate(now time.Time, rules []v1.ScheduleRule, prev []v1.ScheduleStatus, o Options) Result {
	loc := o.Location
	if loc == nil {
		loc = time.UTC
	}
	catchUp := o.CatchUpAfter
	if catchUp <= 0 {
		catchUp = time.Minute
	}
	old := make(map[string]v1.ScheduleStatus, len(prev))
	for _, st := range prev {
		old[st.RuleName] = st
	}
	res := Result{rules: rules}
	for _, rule := range rules {
		st := v1.ScheduleStatus{RuleName: rule.Name}
		if p, ok := old[rule.Name]; ok {
			st.SuccessfulExecutions = append([]v1.SuccessfulExecution(nil), p.SuccessfulExecutions...)
			st.FailedExecutions = append([]v1.FailedExecution(nil), p.FailedExecutions...)
			st.NextExecutionTime = p.NextExecutionTime
		}
		cursor := st.NextExecutionTime
		st.NextExecutionTime = nil

		zone, err := LoadLocation(ptr.Deref(rule.TimeZone, ""), loc)
		if err == nil {
			st.TimeZone = zone.String()
		}
		var sched *Schedule
		if err == nil {
			sched, err = Parse(rule.Schedule, zone)
		}
		switch {
		case err != nil:
			st.Message = err.Error()
		case rule.Suspend:
			// No cursor: on resume the rule starts from the time it is resumed.
		default:
			if cursor != nil && !now.Before(cursor.Time) {
				res.run(now, &st, rule, sched, cursor.Time, o.StartingDeadline, catchUp)
			}
			if next := sched.Next(now); !next.IsZero() {
				st.NextExecutionTime = &metav1.Time{Time: next}
				if res.Next.IsZero() || next.Before(res.Next) {
					res.Next = next
				}
			}
		}
		trim(&st, rule)
		res.Status = append(res.Status, st)
	}
	res.Active = active(res.Status)
	return res
}

// run applies or records the executions of one rule that fell due in [cursor, now].
func (res *Result) run(now time.Time, st *v1.ScheduleStatus, rule v1.ScheduleRule, sched *Schedule, cursor time.Time, deadline, catchUp time.Duration) {
	windowStart := now.Add(-deadline)
	if windowStart.Before(cursor) {
		windowStart = cursor
	}
	if t, ok := sched.Latest(windowStart, now); ok {
		e := Execution{Rule: rule.Name, ScheduleTime: t, Min: rule.TargetMinReplicas, Max: rule.TargetMaxReplicas, CatchUp: now.Sub(t) > catchUp}
		st.SuccessfulExecutions = append([]v1.SuccessfulExecution{{
			ScheduleTime:       metav1.Time{Time: t},
			ExecutionTime:      metav1.Time{Time: now},
			AppliedMinReplicas: copyInt(e.Min),
			AppliedMaxReplicas: copyInt(e.Max),
			CatchUp:            e.CatchUp,
		}}, st.SuccessfulExecutions...)
		res.Fired = append(res.Fired, e)
		return
	}
	if t, ok := sched.Latest(cursor, windowStart.Add(-time.Nanosecond)); ok {
		st.FailedExecutions = append([]v1.FailedExecution{{
			ScheduleTime:  metav1.Time{Time: t},
			ExecutionTime: metav1.Time{Time: now},
			Message: fmt.Sprintf("missed: the operator was not running at %s and found this execution %s late, beyond its starting deadline of %s; the bounds of the previously fired rule stay in force (raise the operator's --schedule-starting-deadline to catch up longer outages)",
				t.In(sched.Location()).Format(time.RFC3339), now.Sub(t).Round(time.Second), deadline),
		}}, st.FailedExecutions...)
		res.Missed = append(res.Missed, Execution{Rule: rule.Name, ScheduleTime: t, Min: rule.TargetMinReplicas, Max: rule.TargetMaxReplicas})
	}
}

// Fail turns the executions applied in this call into failed ones with message (for example when the
// user's ScaledObject they should have patched does not exist), and recomputes Active.
func (res *Result) Fail(now time.Time, message string) {
	if len(res.Fired) == 0 {
		return
	}
	fired := make(map[string]Execution, len(res.Fired))
	for _, e := range res.Fired {
		fired[e.Rule] = e
	}
	for i := range res.Status {
		st := &res.Status[i]
		e, ok := fired[st.RuleName]
		if !ok || len(st.SuccessfulExecutions) == 0 || !st.SuccessfulExecutions[0].ScheduleTime.Time.Equal(e.ScheduleTime) {
			continue
		}
		st.SuccessfulExecutions = st.SuccessfulExecutions[1:]
		st.FailedExecutions = append([]v1.FailedExecution{{
			ScheduleTime:  metav1.Time{Time: e.ScheduleTime},
			ExecutionTime: metav1.Time{Time: now},
			Message:       message,
		}}, st.FailedExecutions...)
		for _, r := range res.rules {
			if r.Name == st.RuleName {
				trim(st, r)
			}
		}
	}
	res.Fired = nil
	res.Active = active(res.Status)
}

// Bounds applies the active rule's bounds over the spec's. A rule that raises min above the effective
// max raises max with it: pre-warming is what the schedule asks for.
func (a *Active) Bounds(specMin, specMax int32) (minReplicas, maxReplicas int32) {
	minReplicas, maxReplicas = specMin, specMax
	if a == nil {
		return minReplicas, maxReplicas
	}
	if a.Min != nil {
		minReplicas = *a.Min
	}
	if a.Max != nil {
		maxReplicas = *a.Max
	}
	if minReplicas > maxReplicas {
		maxReplicas = minReplicas
	}
	return minReplicas, maxReplicas
}

// active picks the rule whose newest successful execution is the latest; on a tie the rule listed later
// in spec.schedules wins.
func active(status []v1.ScheduleStatus) *Active {
	var best *Active
	for _, st := range status {
		if len(st.SuccessfulExecutions) == 0 {
			continue
		}
		e := st.SuccessfulExecutions[0]
		if best == nil || !e.ScheduleTime.Time.Before(best.ScheduleTime) {
			best = &Active{Rule: st.RuleName, ScheduleTime: e.ScheduleTime.Time, Min: copyInt(e.AppliedMinReplicas), Max: copyInt(e.AppliedMaxReplicas)}
		}
	}
	return best
}

// trim keeps the newest executions within the rule's history limits.
func trim(st *v1.ScheduleStatus, rule v1.ScheduleRule) {
	okLimit, failLimit := limit(rule.SuccessfulHistoryLimit, DefaultSuccessfulHistoryLimit), limit(rule.FailedHistoryLimit, DefaultFailedHistoryLimit)
	// The newest success is kept whatever the limit says: it is what the bounds in force come from.
	okLimit = max(okLimit, 1)
	if len(st.SuccessfulExecutions) > okLimit {
		st.SuccessfulExecutions = st.SuccessfulExecutions[:okLimit]
	}
	if len(st.FailedExecutions) > failLimit {
		st.FailedExecutions = st.FailedExecutions[:failLimit]
	}
	if len(st.SuccessfulExecutions) == 0 {
		st.SuccessfulExecutions = nil
	}
	if len(st.FailedExecutions) == 0 {
		st.FailedExecutions = nil
	}
}

func limit(p *int32, def int) int {
	if p == nil {
		return def
	}
	return max(int(*p), 0)
}

func copyInt(p *int32) *int32 {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
