package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// A Serve-mode problem the user must fix is what Ready says while the interceptors still catch up
// with the table: propagation lagging (a busy fleet) must not hide it.
func TestReadyNamesAServeProblemBeforePropagation(t *testing.T) {
	base := []metav1.Condition{
		{Type: v1.ConditionValid, Status: metav1.ConditionTrue, Reason: "Valid"},
		{Type: v1.ConditionHostsAccepted, Status: metav1.ConditionTrue, Reason: "Accepted"},
		{Type: v1.ConditionConflict, Status: metav1.ConditionFalse, Reason: "NoConflict"},
		{Type: v1.ConditionScaledObjectReady, Status: metav1.ConditionTrue, Reason: "Ready"},
	}
	propagating := metav1.Condition{Type: v1.ConditionRoutingPropagated, Status: metav1.ConditionFalse, Reason: "Propagating", Message: "0 of 1"}
	propagated := metav1.Condition{Type: v1.ConditionRoutingPropagated, Status: metav1.ConditionTrue, Reason: "Propagated"}
	claimed := metav1.Condition{Type: v1.ConditionServing, Status: metav1.ConditionFalse, Reason: v1.ServingReasonServiceClaimed, Message: "already served by HTTPScaledObject web"}
	proxying := metav1.Condition{Type: v1.ConditionServing, Status: metav1.ConditionFalse, Reason: v1.ServingReasonProxying}

	for _, tc := range []struct {
		name        string
		conds       []metav1.Condition
		wantBlocked bool
		wantReason  string
	}{
		{"serve problem while propagating", append(append([]metav1.Condition{}, base...), propagating, claimed), true, v1.ServingReasonServiceClaimed},
		{"serve problem once propagated", append(append([]metav1.Condition{}, base...), propagated, claimed), true, v1.ServingReasonServiceClaimed},
		{"proxying while propagating", append(append([]metav1.Condition{}, base...), propagating, proxying), true, "Propagating"},
		{"propagation not known yet", append([]metav1.Condition{}, base...), true, "Unknown"},
		{"invalid before anything else", append([]metav1.Condition{{Type: v1.ConditionValid, Status: metav1.ConditionFalse, Reason: "Invalid"}}, propagating, claimed), true, "Invalid"},
		{"ready", append(append([]metav1.Condition{}, base...), propagated, proxying), false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, msg, blocked := readyBlocker(tc.conds)
			if blocked != tc.wantBlocked || reason != tc.wantReason {
				t.Errorf("readyBlocker = %q (%q), blocked %v; want %q, blocked %v", reason, msg, blocked, tc.wantReason, tc.wantBlocked)
			}
		})
	}
}
