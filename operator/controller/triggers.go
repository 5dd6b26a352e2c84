package controller

import (
	"context"
	"fmt"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// kindClusterTriggerAuthentication is the KEDA kind of cluster-wide trigger credentials.
const kindClusterTriggerAuthentication = "ClusterTriggerAuthentication"

// checkTriggers refuses spec.scaling.triggers that reach beyond the object's namespace: a
// ClusterTriggerAuthentication holds credentials of the whole cluster, so only a namespace an
// HTTPScalePolicy names in spec.clusterTriggerAuthentication may use one. A TriggerAuthentication
// is read by KEDA in the ScaledObject's namespace, the object's own.
func (r *Reconciler) checkTriggers(ctx context.Context, hso *v1.HTTPScaledObject) error {
	if hso.Spec.Scaling == nil {
		return nil
	}
	view := r.own.view(ctx)
	for i, t := range hso.Spec.Scaling.Triggers {
		if t.AuthenticationRef == nil || t.AuthenticationRef.Kind != kindClusterTriggerAuthentication {
			continue
		}
		nsLabels, _ := view.NamespaceLabels(hso.Namespace)
		if !view.Policy().AllowClusterTriggerAuthentication(hso.Namespace, nsLabels) {
			return invalid("ClusterTriggerAuthenticationNotAllowed", "%s", ClusterTriggerAuthNotAllowed(i, t.AuthenticationRef.Name))
		}
	}
	return nil
}

// ClusterTriggerAuthNotAllowed says why trigger i may not name the ClusterTriggerAuthentication.
func ClusterTriggerAuthNotAllowed(i int, name string) string {
	return fmt.Sprintf("scaling.triggers[%d].authenticationRef: ClusterTriggerAuthentication %s holds credentials of the whole cluster, and no HTTPScalePolicy lets this namespace use one (spec.clusterTriggerAuthentication); use a TriggerAuthentication in this namespace", i, name)
}
