package schedule

import (
	"testing"

	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// BenchmarkEvaluateSteady is the common reconcile: ten rules, nothing due.
func BenchmarkEvaluateSteady(b *testing.B) {
	rules := make([]v1.ScheduleRule, 10)
	for i := range rules {
		rules[i] = v1.ScheduleRule{Name: string(rune('a' + i)), Schedule: "*/5 8-18 * * mon-fri", TimeZone: ptr.To("America/New_York"), TargetMinReplicas: ptr.To[int32](int32(i))}
	}
	now := utc("2026-05-04T12:01:00Z")
	status := Evaluate(now, rules, nil, opts).Status
	b.ResetTimer()
	for b.Loop() {
		Evaluate(now, rules, status, opts)
	}
}

// BenchmarkEvaluateCatchUpAfterAYear is the worst restart: an every-minute rule whose cursor is a
// year old (525,600 missed executions), with a one-hour deadline.
func BenchmarkEvaluateCatchUpAfterAYear(b *testing.B) {
	rules := []v1.ScheduleRule{rule("tick", "* * * * *", ptr.To[int32](1), nil)}
	prev := []v1.ScheduleStatus{{RuleName: "tick", NextExecutionTime: mtp("2025-05-04T12:00:00Z")}}
	now := utc("2026-05-04T12:00:30Z")
	for b.Loop() {
		res := Evaluate(now, rules, prev, opts)
		if len(res.Fired) != 1 {
			b.Fatal("no catch-up")
		}
	}
}

// BenchmarkMissedBeyondDeadlineAfterAYear finds the latest missed execution before the deadline window.
func BenchmarkMissedBeyondDeadlineAfterAYear(b *testing.B) {
	rules := []v1.ScheduleRule{rule("daily", "0 8 * * *", ptr.To[int32](1), nil)}
	prev := []v1.ScheduleStatus{{RuleName: "daily", NextExecutionTime: mtp("2025-05-04T08:00:00Z")}}
	now := utc("2026-05-04T12:00:00Z")
	for b.Loop() {
		if res := Evaluate(now, rules, prev, opts); len(res.Missed) != 1 {
			b.Fatal("no missed execution recorded")
		}
	}
}
