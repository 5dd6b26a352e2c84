package v1alpha1

// Condition types reported in HTTPScaledObjectStatus.Conditions.
const (
	// ConditionReady is True when the object is valid, not in conflict, its ScaledObject exists and every
	// ready interceptor routes its current generation.
	ConditionReady = "Ready"
	// ConditionValid is False when the object refers to something that does not exist or cannot work
	// (a missing Service or port, a workload without a /scale subresource). The object is then left out
	// of the routing table; other apps are unaffected.
	ConditionValid = "Valid"
	// ConditionConflict is True when an older object already claims the same host, path and headers.
	ConditionConflict = "Conflict"
	// ConditionRoutingPropagated is True when every ready interceptor serves a routing table that holds
	// this object's current generation.
	ConditionRoutingPropagated = "RoutingPropagated"
	// ConditionScaledObjectReady is True when the KEDA ScaledObject for this app exists and is in sync.
	ConditionScaledObjectReady = "ScaledObjectReady"
	// ConditionTLSReady is reported only for objects with spec.tls: True when the referenced Secret
	// exists, is of type kubernetes.io/tls and holds a certificate and key that belong together. It
	// does not change Ready: plain HTTP routing works whatever the Secret holds.
	ConditionTLSReady = "TLSReady"
	// ConditionHostsAccepted is False when some of the object's hosts are refused to its namespace:
	// another namespace owns them (reason HostClaimed) or the cluster's HTTPScalePolicies do not let
	// the namespace claim them (reason HostNotAllowed). The object is routed on its other hosts only;
	// the message lists the refused hosts and why, never another tenant's objects.
	ConditionHostsAccepted = "HostsAccepted"
	// ConditionServing is reported in Serve mode only. True (reason Direct): the app's Service sends
	// traffic straight to the app's pods. False with reason Proxying: the Service's port is redirected
	// to the interceptors (the app is at or going to zero, or its pods are not ready yet). False with
	// another reason: Serve mode cannot be applied to the Service (ServiceClaimed, UnsupportedService,
	// SelectorMismatch), the Service is left as it is and the app is reachable through the interceptor
	// Service only.
	ConditionServing = "Serving"
)

// Reasons of ConditionHostsAccepted.
const (
	HostsReasonAccepted   = "Accepted"
	HostsReasonClaimed    = "HostClaimed"
	HostsReasonNotAllowed = "HostNotAllowed"
)

// Reasons of ConditionServing.
const (
	ServingReasonDirect             = "Direct"
	ServingReasonProxying           = "Proxying"
	ServingReasonServiceClaimed     = "ServiceClaimed"
	ServingReasonUnsupportedService = "UnsupportedService"
	ServingReasonSelectorMismatch   = "SelectorMismatch"
)

// Annotations users may set on an HTTPScaledObject.
const (
	// AnnotationSkipScaledObject set to "true" means the user owns the KEDA ScaledObject; the operator
	// creates none (and deletes the one it created earlier).
	AnnotationSkipScaledObject = "httpscale.dev/skip-scaledobject"
)
