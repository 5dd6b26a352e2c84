package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

var opts = Options{Location: time.UTC, StartingDeadline: time.Hour}

func rule(name, expr string, minR, maxR *int32) v1.ScheduleRule {
	return v1.ScheduleRule{Name: name, Schedule: expr, TargetMinReplicas: minR, TargetMaxReplicas: maxR}
}

func mt(s string) metav1.Time { return metav1.Time{Time: utc(s)} }

func mtp(s string) *metav1.Time { t := mt(s); return &t }

// roundTrip drops what the API server drops (sub-second precision), as status read back would.
func roundTrip(st []v1.ScheduleStatus) []v1.ScheduleStatus {
	out := make([]v1.ScheduleStatus, len(st))
	for i, s := range st {
		s = *s.DeepCopy()
		if s.NextExecutionTime != nil {
			s.NextExecutionTime.Time = s.NextExecutionTime.Time.Truncate(time.Second)
		}
		for j := range s.SuccessfulExecutions {
			s.SuccessfulExecutions[j].ExecutionTime.Time = s.SuccessfulExecutions[j].ExecutionTime.Time.Truncate(time.Second)
		}
		out[i] = s
	}
	return out
}

func TestFirstEvaluationOnlySchedules(t *testing.T) {
	rules := []v1.ScheduleRule{rule("morning", "0 8 * * *", ptr.To[int32](5), nil)}
	res := Evaluate(utc("2026-05-04T08:30:00Z"), rules, nil, opts)
	want := []v1.ScheduleStatus{{RuleName: "morning", TimeZone: "UTC", NextExecutionTime: mtp("2026-05-05T08:00:00Z")}}
	if d := cmp.Diff(want, res.Status); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
	if res.Active != nil || len(res.Fired) != 0 {
		t.Errorf("a new rule must not catch up on the execution before it existed: active %+v fired %+v", res.Active, res.Fired)
	}
	if !res.Next.Equal(utc("2026-05-05T08:00:00Z")) {
		t.Errorf("Next = %s", res.Next)
	}
}

// TestDayOfRules walks two rules through two days, waking exactly when Next says.
func TestDayOfRules(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	rules := []v1.ScheduleRule{
		rule("business-hours", "0 8 * * mon-fri", ptr.To[int32](4), ptr.To[int32](50)),
		rule("night", "0 20 * * *", ptr.To[int32](0), nil),
	}
	o := Options{Location: berlin, StartingDeadline: time.Hour}
	now := utc("2026-05-04T00:00:00Z") // Monday, 02:00 in Berlin
	res := Evaluate(now, rules, nil, o)
	type step struct {
		at     string
		rule   string
		minR   int32
		maxR   int32
		active string
	}
	var got []step
	for i := 0; i < 4; i++ {
		// The controller wakes a few hundred milliseconds after the requested time.
		now = res.Next.Add(300 * time.Millisecond)
		res = Evaluate(now, rules, roundTrip(res.Status), o)
		if len(res.Fired) != 1 {
			t.Fatalf("wake-up %d at %s fired %d executions, want 1", i, now, len(res.Fired))
		}
		if res.Fired[0].CatchUp {
			t.Errorf("an execution 300ms late is not a catch-up")
		}
		minR, maxR := res.Active.Bounds(0, 10)
		got = append(got, step{res.Fired[0].ScheduleTime.In(berlin).Format("Mon 15:04"), res.Fired[0].Rule, minR, maxR, res.Active.Rule})
	}
	want := []step{
		{"Mon 08:00", "business-hours", 4, 50, "business-hours"},
		{"Mon 20:00", "night", 0, 10, "night"},
		{"Tue 08:00", "business-hours", 4, 50, "business-hours"},
		{"Tue 20:00", "night", 0, 10, "night"},
	}
	if d := cmp.Diff(want, got, cmp.AllowUnexported(step{})); d != "" {
		t.Errorf("executions (-want +got):\n%s", d)
	}
	if res.Status[0].TimeZone != "Europe/Berlin" {
		t.Errorf("status must state the operator's zone used for rules without one, got %q", res.Status[0].TimeZone)
	}
}

func TestBeforeAnyRuleFiredSpecReplicasApply(t *testing.T) {
	var a *Active
	if minR, maxR := a.Bounds(1, 7); minR != 1 || maxR != 7 {
		t.Errorf("no active rule: bounds %d/%d, want the spec's 1/7", minR, maxR)
	}
	a = &Active{Min: ptr.To[int32](12)}
	if minR, maxR := a.Bounds(1, 7); minR != 12 || maxR != 12 {
		t.Errorf("min above spec max: bounds %d/%d, want 12/12 (max raised to the pre-warm)", minR, maxR)
	}
	a = &Active{Max: ptr.To[int32](3)}
	if minR, maxR := a.Bounds(1, 7); minR != 1 || maxR != 3 {
		t.Errorf("max only: bounds %d/%d, want 1/3", minR, maxR)
	}
}

func TestSuspendAndResume(t *testing.T) {
	rules := []v1.ScheduleRule{rule("hourly", "0 * * * *", ptr.To[int32](3), nil)}
	res := Evaluate(utc("2026-05-04T09:30:00Z"), rules, nil, opts)
	res = Evaluate(utc("2026-05-04T10:00:01Z"), rules, res.Status, opts)
	if len(res.Fired) != 1 {
		t.Fatalf("fired %d, want 1", len(res.Fired))
	}

	rules[0].Suspend = true
	res = Evaluate(utc("2026-05-04T10:20:00Z"), rules, res.Status, opts)
	if res.Status[0].NextExecutionTime != nil || !res.Next.IsZero() {
		t.Errorf("suspended rule has next execution %v / %s, want none", res.Status[0].NextExecutionTime, res.Next)
	}
	for _, at := range []string{"2026-05-04T11:00:00Z", "2026-05-04T12:00:00Z", "2026-05-04T12:30:00Z"} {
		res = Evaluate(utc(at), rules, res.Status, opts)
		if len(res.Fired)+len(res.Missed) != 0 {
			t.Fatalf("suspended rule ran at %s: fired %+v missed %+v", at, res.Fired, res.Missed)
		}
	}
	if res.Active == nil || res.Active.Rule != "hourly" || *res.Active.Min != 3 {
		t.Errorf("bounds applied before suspension must stand, active = %+v", res.Active)
	}

	rules[0].Suspend = false
	res = Evaluate(utc("2026-05-04T12:30:00Z"), rules, res.Status, opts)
	if len(res.Fired)+len(res.Missed) != 0 {
		t.Errorf("resume must not catch up on executions skipped while suspended: fired %+v missed %+v", res.Fired, res.Missed)
	}
	if got := res.Status[0].NextExecutionTime; got == nil || !got.Time.Equal(utc("2026-05-04T13:00:00Z")) {
		t.Errorf("after resume next = %v, want 13:00", got)
	}
	res = Evaluate(utc("2026-05-04T13:00:00Z"), rules, res.Status, opts)
	if len(res.Fired) != 1 {
		t.Errorf("resumed rule did not fire at 13:00")
	}
	if n := len(res.Status[0].SuccessfulExecutions); n != 2 {
		t.Errorf("history has %d successes, want 2 (10:00 and 13:00)", n)
	}
}

func TestHistoryIsTrimmedNewestFirst(t *testing.T) {
	r := rule("every-5m", "*/5 * * * *", ptr.To[int32](2), nil)
	r.SuccessfulHistoryLimit = ptr.To[int32](2)
	r.FailedHistoryLimit = ptr.To[int32](1)
	rules := []v1.ScheduleRule{r}
	res := Evaluate(utc("2026-05-04T10:00:30Z"), rules, nil, opts)
	for _, at := range []string{"10:05", "10:10", "10:15", "10:20"} {
		res = Evaluate(utc("2026-05-04T"+at+":00Z"), rules, res.Status, opts)
	}
	var gotOK []string
	for _, e := range res.Status[0].SuccessfulExecutions {
		gotOK = append(gotOK, e.ScheduleTime.UTC().Format("15:04"))
	}
	if d := cmp.Diff([]string{"10:20", "10:15"}, gotOK); d != "" {
		t.Errorf("successful history (-want +got):\n%s", d)
	}
	// Two outages beyond the deadline: only the newest failure is kept.
	daily := rule("daily", "0 8 * * *", ptr.To[int32](2), nil)
	daily.FailedHistoryLimit = ptr.To[int32](1)
	prev := []v1.ScheduleStatus{{RuleName: "daily", NextExecutionTime: mtp("2026-05-04T08:00:00Z")}}
	res = Evaluate(utc("2026-05-04T10:00:00Z"), []v1.ScheduleRule{daily}, prev, opts)
	res = Evaluate(utc("2026-05-05T11:00:00Z"), []v1.ScheduleRule{daily}, res.Status, opts)
	var gotFailed []string
	for _, e := range res.Status[0].FailedExecutions {
		gotFailed = append(gotFailed, e.ScheduleTime.UTC().Format(time.DateTime))
	}
	if d := cmp.Diff([]string{"2026-05-05 08:00:00"}, gotFailed); d != "" {
		t.Errorf("failed history (-want +got):\n%s", d)
	}

	daily.FailedHistoryLimit = ptr.To[int32](0)
	res = Evaluate(utc("2026-05-06T11:00:00Z"), []v1.ScheduleRule{daily}, res.Status, opts)
	if len(res.Missed) != 1 || res.Status[0].FailedExecutions != nil {
		t.Errorf("failedHistoryLimit 0: missed %d, kept %d failures; want 1 missed and none kept", len(res.Missed), len(res.Status[0].FailedExecutions))
	}
}

func TestRestartCatchUp(t *testing.T) {
	rules := []v1.ScheduleRule{
		rule("sale", "30 8 * * *", ptr.To[int32](20), nil),
		rule("night", "0 22 * * *", ptr.To[int32](0), nil),
	}
	// Written by the operator before it went down at 08:00: night fired yesterday, sale is due 08:30.
	prev := []v1.ScheduleStatus{
		{RuleName: "sale", NextExecutionTime: mtp("2026-05-04T08:30:00Z")},
		{RuleName: "night", NextExecutionTime: mtp("2026-05-04T22:00:00Z"), SuccessfulExecutions: []v1.SuccessfulExecution{
			{ScheduleTime: mt("2026-05-03T22:00:00Z"), ExecutionTime: mt("2026-05-03T22:00:00Z"), AppliedMinReplicas: ptr.To[int32](0)},
		}},
	}

	t.Run("within the deadline the missed execution is applied and recorded as a catch-up", func(t *testing.T) {
		now := utc("2026-05-04T09:10:00Z")
		res := Evaluate(now, rules, prev, opts)
		want := []v1.SuccessfulExecution{{ScheduleTime: mt("2026-05-04T08:30:00Z"), ExecutionTime: metav1.Time{Time: now}, AppliedMinReplicas: ptr.To[int32](20), CatchUp: true}}
		if d := cmp.Diff(want, res.Status[0].SuccessfulExecutions); d != "" {
			t.Errorf("sale history (-want +got):\n%s", d)
		}
		if res.Active == nil || res.Active.Rule != "sale" || *res.Active.Min != 20 {
			t.Errorf("active = %+v, want sale with min 20", res.Active)
		}
		if !res.Next.Equal(utc("2026-05-04T22:00:00Z")) {
			t.Errorf("next wake-up %s, want 22:00", res.Next)
		}
	})

	t.Run("beyond the deadline it is recorded as missed and the earlier bounds stand", func(t *testing.T) {
		now := utc("2026-05-04T10:00:00Z")
		res := Evaluate(now, rules, prev, opts)
		if len(res.Fired) != 0 || len(res.Status[0].SuccessfulExecutions) != 0 {
			t.Fatalf("an execution 90m late with a 1h deadline was applied: %+v", res.Fired)
		}
		f := res.Status[0].FailedExecutions
		if len(f) != 1 || !f[0].ScheduleTime.Time.Equal(utc("2026-05-04T08:30:00Z")) || !strings.Contains(f[0].Message, "beyond its starting deadline of 1h0m0s") {
			t.Fatalf("failed history = %+v, want the 08:30 execution recorded as missed", f)
		}
		if res.Active == nil || res.Active.Rule != "night" {
			t.Errorf("active = %+v, want night (the last rule that fired)", res.Active)
		}
	})

	t.Run("of several missed executions only the latest is applied", func(t *testing.T) {
		every := []v1.ScheduleRule{rule("tick", "*/10 * * * *", ptr.To[int32](1), nil)}
		res := Evaluate(utc("2026-05-04T09:35:00Z"), every, []v1.ScheduleStatus{{RuleName: "tick", NextExecutionTime: mtp("2026-05-04T09:00:00Z")}}, opts)
		if len(res.Fired) != 1 || !res.Fired[0].ScheduleTime.Equal(utc("2026-05-04T09:30:00Z")) || !res.Fired[0].CatchUp {
			t.Errorf("fired %+v, want only 09:30 as a catch-up", res.Fired)
		}
	})
}

func TestLaterListedRuleWinsATie(t *testing.T) {
	rules := []v1.ScheduleRule{rule("a", "0 8 * * *", ptr.To[int32](1), nil), rule("b", "0 8 * * *", ptr.To[int32](2), nil)}
	res := Evaluate(utc("2026-05-04T07:00:00Z"), rules, nil, opts)
	res = Evaluate(utc("2026-05-04T08:00:00Z"), rules, res.Status, opts)
	if res.Active == nil || res.Active.Rule != "b" {
		t.Errorf("active = %+v, want b", res.Active)
	}
}

func TestFailMovesTheExecutionToFailedHistory(t *testing.T) {
	rules := []v1.ScheduleRule{rule("a", "0 8 * * *", ptr.To[int32](1), nil), rule("b", "0 9 * * *", ptr.To[int32](2), nil)}
	res := Evaluate(utc("2026-05-04T07:00:00Z"), rules, nil, opts)
	res = Evaluate(utc("2026-05-04T08:00:00Z"), rules, res.Status, opts)
	res = Evaluate(utc("2026-05-04T09:00:00Z"), rules, res.Status, opts)
	res.Fail(utc("2026-05-04T09:00:01Z"), "no ScaledObject")
	if res.Active == nil || res.Active.Rule != "a" {
		t.Errorf("active after failure = %+v, want a", res.Active)
	}
	if got := res.Status[1]; len(got.SuccessfulExecutions) != 0 || len(got.FailedExecutions) != 1 || got.FailedExecutions[0].Message != "no ScaledObject" {
		t.Errorf("b status = %+v", got)
	}
	if got := res.Status[1].NextExecutionTime; got == nil || !got.Time.Equal(utc("2026-05-05T09:00:00Z")) {
		t.Errorf("a failed execution is not retried: next = %v, want tomorrow 09:00", got)
	}
}

func TestEditsAndRenames(t *testing.T) {
	rules := []v1.ScheduleRule{rule("a", "0 12 * * *", ptr.To[int32](1), nil)}
	res := Evaluate(utc("2026-05-04T07:00:00Z"), rules, nil, opts)
	rules[0].Schedule = "0 9 * * *"
	res = Evaluate(utc("2026-05-04T07:01:00Z"), rules, res.Status, opts)
	if got := res.Status[0].NextExecutionTime; !got.Time.Equal(utc("2026-05-04T09:00:00Z")) {
		t.Errorf("edited schedule: next = %v, want 09:00", got)
	}
	res = Evaluate(utc("2026-05-04T09:00:00Z"), rules, res.Status, opts)
	rules[0].Name = "renamed"
	res = Evaluate(utc("2026-05-04T09:05:00Z"), rules, res.Status, opts)
	if len(res.Status) != 1 || res.Status[0].RuleName != "renamed" || res.Status[0].SuccessfulExecutions != nil || res.Active != nil {
		t.Errorf("renaming must discard history: %+v active %+v", res.Status, res.Active)
	}
}

func TestInvalidRuleIsReportedNotScheduled(t *testing.T) {
	rules := []v1.ScheduleRule{
		{Name: "tz", Schedule: "0 8 * * *", TimeZone: ptr.To("Europe/Atlantis"), TargetMinReplicas: ptr.To[int32](1)},
		rule("cron", "0 25 * * *", ptr.To[int32](1), nil),
	}
	res := Evaluate(utc("2026-05-04T07:00:00Z"), rules, nil, opts)
	for i, want := range []string{"not a known IANA time zone", "not a valid 5-field cron expression"} {
		if st := res.Status[i]; st.NextExecutionTime != nil || !strings.Contains(st.Message, want) {
			t.Errorf("rule %d status = %+v, want message containing %q and no next execution", i, st, want)
		}
	}
	if !res.Next.IsZero() {
		t.Errorf("Next = %s, want zero", res.Next)
	}
}
