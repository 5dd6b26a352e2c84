package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ColdStartProbe says how an interceptor that holds requests for the app finds out that a starting
// pod can serve. By default (no probe, or one with neither httpGet nor tcpSocket) it runs the pod's
// own readiness probes (HTTP GET or TCP; exec and gRPC probes it cannot run) against the pod's IP
// every few tens of milliseconds, and forwards the held requests the moment they pass, instead of
// waiting for the kubelet's next readiness probe (Kubernetes' default period is 10 s). This assumes
// the readiness probe means "can serve requests". Warm traffic follows the kubelet's readiness as
// usual.
// +kubebuilder:validation:XValidation:rule=`!(has(self.httpGet) && has(self.tcpSocket))`,message="coldStart.probe: set at most one of httpGet or tcpSocket"
// +kubebuilder:validation:XValidation:rule=`!(has(self.disabled) && self.disabled && (has(self.httpGet) || has(self.tcpSocket)))`,message="coldStart.probe: disabled turns probing off; remove httpGet and tcpSocket, or set disabled to false"
type ColdStartProbe struct {
	// Disabled turns the interceptor's own probes off for this app: held requests are forwarded once
	// the kubelet reports a pod ready. Use it when the pods' readiness probes pass before the app can
	// serve.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// HTTPGet probes with a GET of path on port of the pod's IP; a status of 200-399 is success.
	// +optional
	HTTPGet *ColdStartHTTPGet `json:"httpGet,omitempty"`

	// TCPSocket probes by opening a TCP connection to port of the pod's IP.
	// +optional
	TCPSocket *ColdStartTCPSocket `json:"tcpSocket,omitempty"`
}

// ColdStartHTTPGet is an HTTP cold-start probe.
type ColdStartHTTPGet struct {
	// Path to GET.
	// +optional
	// +kubebuilder:default="/"
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule=`self.startsWith('/') && !self.matches(r'[?#\s]')`,message="coldStart.probe.httpGet.path must start with / and contain no query (?), fragment (#) or whitespace"
	Path string `json:"path,omitempty"`

	// Port of the pod (the container port, not the Service port).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// ColdStartTCPSocket is a TCP cold-start probe.
type ColdStartTCPSocket struct {
	// Port of the pod (the container port, not the Service port).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
}

// ColdStartStatus is the latest cold start of the app, step by step, as the interceptor that held its
// first request recorded it (with the time KEDA scaled the workload, as the operator saw it).
type ColdStartStatus struct {
	// HeldAt is when the first request of the cold start was held.
	HeldAt metav1.MicroTime `json:"heldAt"`

	// Interceptor is the interceptor pod that held it.
	// +optional
	Interceptor string `json:"interceptor,omitempty"`

	// Pod is the app's pod the held requests went to.
	// +optional
	Pod string `json:"pod,omitempty"`

	// Probe is how the interceptor learnt that the pod could serve: the probe it ran, or why it ran
	// none and waited for the kubelet's readiness.
	// +optional
	Probe string `json:"probe,omitempty"`

	// Outcome is Forwarded (the held requests went to the app), TimedOut (the readiness timeout
	// passed first) or Abandoned (every held request went away first).
	Outcome string `json:"outcome"`

	// Total is the time from HeldAt to the first held request forwarded, such as 1.62s.
	// +optional
	Total string `json:"total,omitempty"`

	// Steps are the steps that happened, in time order.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Steps []ColdStartStep `json:"steps,omitempty"`
}

// ColdStartStep is one step of a cold start.
type ColdStartStep struct {
	// Name of the step: Held, WakeSent, Scaled (KEDA scaled the workload from zero), PodCreated,
	// PodScheduled, ContainersStarted, EndpointListed (the pod's address appeared in the
	// EndpointSlice, not ready yet), AppAnswered (the interceptor's probe passed), EndpointReady (the
	// kubelet's readiness reached the EndpointSlice), Forwarded (the first held request was sent).
	Name string `json:"name"`

	// At is when the step happened.
	At metav1.MicroTime `json:"at"`

	// After is At minus heldAt, such as 1.532s.
	After string `json:"after"`

	// Source is who saw the step: interceptor or operator (to the millisecond, when they saw it), or
	// kubernetes (times the API server keeps to the second: pod creation, scheduling, container
	// start).
	Source string `json:"source"`
}
