package controller

import (
	"cmp"
	"maps"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
	rules "github.com/httpscale/httpscale/pkg/schedule"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// Defaults for fields the API server normally fills in (CRD defaults); the builder applies them too so
// that an object written before a default existed still gets a working ScaledObject.
const (
	defaultCooldownSeconds   = 300
	defaultConcurrencyTarget = 100
)

// LabelManagedBy marks ScaledObjects this operator created.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedByValue = "httpscale-operator"
)

// TriggerMetadata returns the scaler's view of hso: which app, and its per-replica targets, so that the
// scaler never reads the HTTPScaledObject itself. With no scalingMetric it scales on a concurrency of
// 100, the API's default.
func TriggerMetadata(hso *v1.HTTPScaledObject) trigger.Metadata {
	m := trigger.Metadata{App: appkey.New(hso.Namespace, hso.Name).String()}
	sm := hso.Spec.ScalingMetric
	if sm == nil || (sm.Concurrency == nil && sm.RequestRate == nil) {
		m.ConcurrencyTarget = defaultConcurrencyTarget
		return m
	}
	if c := sm.Concurrency; c != nil {
		m.ConcurrencyTarget = float64(c.TargetValue)
		if c.TargetValue <= 0 {
			m.ConcurrencyTarget = defaultConcurrencyTarget
		}
	}
	if rr := sm.RequestRate; rr != nil {
		m.RequestRateTarget = float64(rr.TargetValue)
		// Admission only lets positive durations through; "" (unset) parses as 0.
		m.Window = cmp.Or(rr.Window.Parsed(), trigger.DefaultWindow)
		m.Granularity = cmp.Or(rr.Granularity.Parsed(), trigger.DefaultGranularity)
	}
	return m
}

// buildScaledObject returns the KEDA ScaledObject that scales hso's workload on the scaler's metrics,
// with min/max from spec.replicas, overridden by active, the most recently fired schedule rule (nil:
// none). The caller sets the owner reference.
func buildScaledObject(hso *v1.HTTPScaledObject, scalerAddress string, active *rules.Active) *kedav1alpha1.ScaledObject {
	minReplicas, maxReplicas := active.Bounds(hso.Spec.Bounds())
	cooldown := int32(defaultCooldownSeconds)
	if hso.Spec.ScaledownPeriod != nil {
		cooldown = *hso.Spec.ScaledownPeriod
	}
	ref := hso.Spec.ScaleTargetRef
	so := &kedav1alpha1.ScaledObject{
		ObjectMeta: metav1.ObjectMeta{
			Name:      hso.Name,
			Namespace: hso.Namespace,
			Labels:    map[string]string{LabelManagedBy: managedByValue},
		},
		Spec: kedav1alpha1.ScaledObjectSpec{
			ScaleTargetRef:  &kedav1alpha1.ScaleTarget{APIVersion: ref.APIVersion, Kind: ref.Kind, Name: ref.Name},
			MinReplicaCount: ptr.To(minReplicas),
			MaxReplicaCount: ptr.To(maxReplicas),
			CooldownPeriod:  ptr.To(cooldown),
			Triggers:        triggers(hso, scalerAddress),
		},
	}
	if hso.Spec.Serve() {
		so.Spec.PollingInterval = servePollingInterval(cooldown)
	}
	return so
}

// kedaDefaultPollingInterval is KEDA's pollingInterval when the ScaledObject sets none.
const kedaDefaultPollingInterval = 30

// servePollingInterval is the pollingInterval of a Serve-mode app's ScaledObject: KEDA's default,
// lowered to half the cooldown (at least 1 s). KEDA scales to zero at the first poll that finds the
// triggers inactive more than the cooldown after the last active poll; polling at most every half
// cooldown, the poll that first finds them inactive (condition Active=False, when the operator puts
// the redirect in place) comes at least half a cooldown before the scale to zero, instead of being
// the same poll when the cooldown is shorter than the polling interval. nil keeps KEDA's default.
func servePollingInterval(cooldown int32) *int32 {
	if cooldown >= 2*kedaDefaultPollingInterval {
		return nil
	}
	return ptr.To(max(1, cooldown/2))
}

// triggers returns the interceptor's external-push trigger, then spec.scaling.triggers as written.
func triggers(hso *v1.HTTPScaledObject, scalerAddress string) []kedav1alpha1.ScaleTriggers {
	out := []kedav1alpha1.ScaleTriggers{{
		Type:     trigger.Type,
		Metadata: TriggerMetadata(hso).Encode(scalerAddress),
	}}
	if sc := hso.Spec.Scaling; sc != nil {
		for _, t := range sc.Triggers {
			kt := kedav1alpha1.ScaleTriggers{
				Type:       t.Type,
				Name:       t.Name,
				Metadata:   maps.Clone(t.Metadata),
				MetricType: autoscalingv2.MetricTargetType(t.MetricType),
			}
			if kt.Metadata == nil {
				kt.Metadata = map[string]string{} // KEDA requires the field
			}
			if a := t.AuthenticationRef; a != nil {
				kt.AuthenticationRef = &kedav1alpha1.AuthenticationRef{Name: a.Name, Kind: a.Kind}
			}
			out = append(out, kt)
		}
	}
	return out
}

// KEDA's external scaler settings for TLS (pkg/scalers/external_scaler.go in KEDA v2.21): the
// trigger metadata key enableTLS, and the authentication parameters caCert, tlsClientCert and
// tlsClientKey, which a TriggerAuthentication or ClusterTriggerAuthentication
// (kindClusterTriggerAuthentication) provides.
const kedaEnableTLS = "enableTLS"

// withScalerTLS makes the interceptor's trigger of so (the first) reach the scaler over mutual TLS
// with the certificates of ClusterTriggerAuthentication auth; "" leaves so as it is. The
// authentication is cluster-scoped, so its client key sits in KEDA's namespace and no tenant
// namespace holds a copy.
func withScalerTLS(so *kedav1alpha1.ScaledObject, auth string) {
	if auth == "" || len(so.Spec.Triggers) == 0 {
		return
	}
	t := &so.Spec.Triggers[0]
	t.Metadata[kedaEnableTLS] = "true"
	t.AuthenticationRef = &kedav1alpha1.AuthenticationRef{Name: auth, Kind: kindClusterTriggerAuthentication}
}
