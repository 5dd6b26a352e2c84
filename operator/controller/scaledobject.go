package controller

import (
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// Trigger metadata keys the scaler reads to know which app a ScaledObject is for.
const (
	TriggerType              = "external-push"
	MetadataScalerAddress    = "scalerAddress"
	MetadataHTTPScaledObject = "httpScaledObject"
	// LabelManagedBy marks ScaledObjects this operator created.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedByValue = "httpscale-operator"
)

// replicaBounds returns the min/max replicas the ScaledObject should carry.
func replicaBounds(hso *v1.HTTPScaledObject) (minReplicas, maxReplicas int32) {
	minReplicas, maxReplicas = 0, 100
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

// buildScaledObject returns the KEDA ScaledObject that scales hso's workload on the scaler's metrics.
// The caller sets the owner reference.
func buildScaledObject(hso *v1.HTTPScaledObject, scalerAddress string) *kedav1alpha1.ScaledObject {
	minReplicas, maxReplicas := replicaBounds(hso)
	cooldown := int32(300)
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
				Type: TriggerType,
				Metadata: map[string]string{
					MetadataScalerAddress:    scalerAddress,
					MetadataHTTPScaledObject: hso.Namespace + "/" + hso.Name,
				},
			}},
		},
	}
}
