package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ScheduleRule sets the app's replica bounds at the times a cron schedule names. The bounds of the rule
// that fired most recently stand until another rule fires; before any rule has fired, spec.replicas
// applies. Bounds a rule leaves unset come from spec.replicas.
// +kubebuilder:validation:XValidation:rule="has(self.targetMinReplicas) || has(self.targetMaxReplicas)",message="a schedule rule needs targetMinReplicas, targetMaxReplicas or both"
// +kubebuilder:validation:XValidation:rule="!has(self.targetMinReplicas) || !has(self.targetMaxReplicas) || self.targetMinReplicas <= self.targetMaxReplicas",message="targetMinReplicas must not be greater than targetMaxReplicas"
type ScheduleRule struct {
	// Name identifies the rule within the object; its execution history in status is kept under this
	// name, so renaming a rule discards its history.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')`,message="schedule name must be 1-32 lowercase letters, digits and -, starting and ending with a letter or digit"
	Name string `json:"name"`

	// Schedule is a standard 5-field cron expression (minute hour day-of-month month day-of-week), for
	// example "30 8 * * mon-fri". Month and weekday names (jan, mon) and @hourly, @daily, @weekly,
	// @monthly, @yearly are accepted.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:XValidation:rule=`!self.startsWith('@every')`,message="@every is not a cron schedule; write the times as 5 cron fields, e.g. */15 * * * * for every 15 minutes"
	// +kubebuilder:validation:XValidation:rule=`!self.contains('TZ=')`,message="set the time zone in timeZone, not inside the schedule"
	Schedule string `json:"schedule"`

	// TimeZone is the IANA time zone the schedule is read in, such as Europe/Berlin or America/New_York.
	// Unset uses the operator's time zone (reported in status.schedules[].timeZone).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$')`,message="timeZone must be an IANA time zone name such as Europe/Berlin or UTC"
	TimeZone *string `json:"timeZone,omitempty"`

	// TargetMinReplicas becomes the ScaledObject's minReplicaCount when the rule fires. Raising it ahead
	// of a known peak pre-warms capacity; traffic can still scale the app beyond it.
	// +optional
	// +kubebuilder:validation:Minimum=0
	TargetMinReplicas *int32 `json:"targetMinReplicas,omitempty"`

	// TargetMaxReplicas becomes the ScaledObject's maxReplicaCount when the rule fires.
	// +optional
	// +kubebuilder:validation:Minimum=1
	TargetMaxReplicas *int32 `json:"targetMaxReplicas,omitempty"`

	// Suspend stops the rule from firing. Executions that fall due while suspended are not caught up on
	// resume. Bounds the rule applied before it was suspended stand until another rule fires.
	// +optional
	// +kubebuilder:default=false
	Suspend bool `json:"suspend,omitempty"`

	// SuccessfulHistoryLimit is how many successful executions status keeps for this rule.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=32
	SuccessfulHistoryLimit *int32 `json:"successfulHistoryLimit,omitempty"`

	// FailedHistoryLimit is how many failed or missed executions status keeps for this rule.
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	FailedHistoryLimit *int32 `json:"failedHistoryLimit,omitempty"`
}

// ScheduleStatus reports one schedule rule: when it fires next and what its recent executions did.
type ScheduleStatus struct {
	// RuleName is the name of the rule in spec.schedules.
	RuleName string `json:"ruleName"`

	// TimeZone is the time zone the rule's schedule is read in (the operator's zone when the rule sets
	// none).
	// +optional
	TimeZone string `json:"timeZone,omitempty"`

	// NextExecutionTime is when the rule fires next; empty while the rule is suspended or invalid.
	// +optional
	NextExecutionTime *metav1.Time `json:"nextExecutionTime,omitempty"`

	// Message says why the rule is not scheduled (an invalid schedule or unknown time zone that reached
	// the operator without passing the admission webhook). Empty when the rule is scheduled or suspended.
	// +optional
	Message string `json:"message,omitempty"`

	// SuccessfulExecutions lists the rule's most recent successful executions, newest first.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	SuccessfulExecutions []SuccessfulExecution `json:"successfulExecutions,omitempty"`

	// FailedExecutions lists the rule's most recent failed or missed executions, newest first.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	FailedExecutions []FailedExecution `json:"failedExecutions,omitempty"`
}

// SuccessfulExecution records one execution that applied a rule's bounds.
type SuccessfulExecution struct {
	// ScheduleTime is the time the schedule named.
	ScheduleTime metav1.Time `json:"scheduleTime"`

	// ExecutionTime is when the operator applied the bounds.
	ExecutionTime metav1.Time `json:"executionTime"`

	// AppliedMinReplicas is the minReplicaCount the rule set, if it sets one.
	// +optional
	AppliedMinReplicas *int32 `json:"appliedMinReplicas,omitempty"`

	// AppliedMaxReplicas is the maxReplicaCount the rule set, if it sets one.
	// +optional
	AppliedMaxReplicas *int32 `json:"appliedMaxReplicas,omitempty"`

	// CatchUp is true when the execution was missed at its time (the operator was not running) and
	// applied later, within the operator's starting deadline.
	// +optional
	CatchUp bool `json:"catchUp,omitempty"`
}

// FailedExecution records one execution that did not apply a rule's bounds.
type FailedExecution struct {
	// ScheduleTime is the time the schedule named.
	ScheduleTime metav1.Time `json:"scheduleTime"`

	// ExecutionTime is when the operator noticed the failure.
	ExecutionTime metav1.Time `json:"executionTime"`

	// Message says what went wrong and what to do about it.
	Message string `json:"message"`
}
