package controller

import (
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// Defaults for fields the API server normally fills in (CRD defaults); the builder applies them too so
// that an object written before a default existed still gets a working ScaledObject.
const (
	defaultMinReplicas       = 0
	defaultMaxReplicas       = 100
	defaultCooldownSeconds   = 300
	defaultConcurrencyTarget = 100
)

// LabelManagedBy marks ScaledObjects this operator created.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedByValue = "httpscale-operator"
)

// replicaBounds returns the min/max replicas the ScaledObject carries at time now. It is the one place
// that decides them: today they come from spec.replicas; time-based rules (schedules) plug in here and
// override them, which is why it takes now although the spec alone does not need it.
func replicaBounds(hso *v1.HTTPScaledObject, _ time.Time) (minReplicas, maxReplicas int32) {
	minReplicas, maxReplicas = defaultMinReplicas, defaultMaxReplicas
	if r := hso.Spec.Replicas; r != nil {
		if r.Min != nil {
			minReplicas = *r.Min
		}
		if r.Max != nil {
			maxReplicas = *r.Max
		}
	}
	return minReplicas, maxReplicas
}

// TriggerMetadata returns the scaler's view of hso: which app, and its per-replica targets, so that the
// scaler never reads the HTTPScaledObject itself. With no scalingMetric it scales on a concurrency of
// 100, the API's default.
func TriggerMetadata(hso *v1.HTTPScaledObject) trigger.Metadata {
	m := trigger.Metadata{App: hso.Namespace + "/" + hso.Name}
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
		window := (*v1.Duration)(nil)
		if rr.Window != "" {
			window = &rr.Window
		}
		granularity := (*v1.Duration)(nil)
		if rr.Granularity != "" {
			granularity = &rr.Granularity
		}
		m.Window = orDuration(parseDuration(window), trigger.DefaultWindow)
		m.Granularity = orDuration(parseDuration(granularity), trigger.DefaultGranularity)
	}
	return m
}

func orDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// buildScaledObject returns the KEDA ScaledObject that scales hso's workload on the scaler's metrics,
// with min/max from replicaBounds at now. The caller sets the owner reference.
func buildScaledObject(hso *v1.HTTPScaledObject, scalerAddress string, now time.Time) *kedav1alpha1.ScaledObject {
	minReplicas, maxReplicas := replicaBounds(hso, now)
	cooldown := int32(defaultCooldownSeconds)
	if hso.Spec.ScaledownPeriod != nil {
		cooldown = *hso.Spec.ScaledownPeriod
	}
	ref := hso.Spec.ScaleTargetRef
	return &kedav1alpha1.ScaledObject{
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
			Triggers: []kedav1alpha1.ScaleTriggers{{
				Type:     trigger.Type,
				Metadata: TriggerMetadata(hso).Encode(scalerAddress),
			}},
		},
	}
}
