package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// UserError is a problem with the user's ScaledObject that retrying will not fix; the execution is
// recorded as failed with its message.
type UserError struct{ Message string }

func (e *UserError) Error() string { return e.Message }

// PatchUserScaledObject sets minReplicaCount and/or maxReplicaCount (nil leaves a bound alone) on the
// ScaledObject the user owns for hso's workload, with a merge patch that touches nothing else. If the new
// min exceeds the ScaledObject's max, max is raised to it. The ScaledObject is the one named like hso
// when it scales hso's workload, otherwise the only one in the namespace that does; none or several is
// a *UserError.
func PatchUserScaledObject(ctx context.Context, c client.Client, hso *v1.HTTPScaledObject, minReplicas, maxReplicas *int32) (*kedav1alpha1.ScaledObject, error) {
	so, err := findUserScaledObject(ctx, c, hso)
	if err != nil {
		return nil, err
	}
	newMin, newMax := so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount
	if minReplicas != nil {
		newMin = ptr.To(*minReplicas)
	}
	if maxReplicas != nil {
		newMax = ptr.To(*maxReplicas)
	}
	// KEDA's default max is 100; a min above the max in force would make the ScaledObject invalid.
	if newMin != nil && *newMin > ptr.Deref(newMax, 100) {
		newMax = ptr.To(*newMin)
	}
	spec := map[string]any{}
	if !ptr.Equal(newMin, so.Spec.MinReplicaCount) {
		spec["minReplicaCount"] = newMin
	}
	if !ptr.Equal(newMax, so.Spec.MaxReplicaCount) {
		spec["maxReplicaCount"] = newMax
	}
	if len(spec) == 0 {
		return so, nil
	}
	body, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return nil, fmt.Errorf("encoding ScaledObject patch: %w", err)
	}
	if err := c.Patch(ctx, so, client.RawPatch(types.MergePatchType, body)); err != nil {
		if apierrors.IsInvalid(err) {
			return nil, &UserError{Message: fmt.Sprintf("ScaledObject %s rejected the scheduled bounds: %v", so.Name, err)}
		}
		return nil, fmt.Errorf("patching ScaledObject %s/%s: %w", so.Namespace, so.Name, err)
	}
	return so, nil
}

// findUserScaledObject returns the ScaledObject that scales hso's workload.
func findUserScaledObject(ctx context.Context, c client.Client, hso *v1.HTTPScaledObject) (*kedav1alpha1.ScaledObject, error) {
	var list kedav1alpha1.ScaledObjectList
	if err := c.List(ctx, &list, client.InNamespace(hso.Namespace)); err != nil {
		return nil, fmt.Errorf("listing ScaledObjects in %s: %w", hso.Namespace, err)
	}
	ref := hso.Spec.ScaleTargetRef
	var matches []*kedav1alpha1.ScaledObject
	for i := range list.Items {
		so := &list.Items[i]
		if scales(so, ref) {
			if so.Name == hso.Name {
				return so, nil
			}
			matches = append(matches, so)
		}
	}
	target := ref.Kind + "/" + ref.Name
	switch len(matches) {
	case 0:
		return nil, &UserError{Message: fmt.Sprintf("no KEDA ScaledObject in namespace %s scales %s, so the scheduled bounds could not be applied; create your ScaledObject, or remove annotation %s to let the operator manage one", hso.Namespace, target, v1.AnnotationSkipScaledObject)}
	case 1:
		return matches[0], nil
	}
	names := make([]string, len(matches))
	for i, so := range matches {
		names[i] = so.Name
	}
	return nil, &UserError{Message: fmt.Sprintf("ScaledObjects %s all scale %s; name the one the schedules should patch %s (like the HTTPScaledObject)", strings.Join(names, ", "), target, hso.Name)}
}

// scales reports whether so targets the workload ref names (KEDA defaults the kind to apps/v1 Deployment).
func scales(so *kedav1alpha1.ScaledObject, ref v1.ScaleTargetRef) bool {
	t := so.Spec.ScaleTargetRef
	if t == nil || t.Name != ref.Name {
		return false
	}
	kind, apiVersion := t.Kind, t.APIVersion
	if kind == "" {
		kind = "Deployment"
	}
	if apiVersion == "" {
		apiVersion = "apps/v1"
	}
	refKind, refAPI := ref.Kind, ref.APIVersion
	if refKind == "" {
		refKind = "Deployment"
	}
	if refAPI == "" {
		refAPI = "apps/v1"
	}
	return kind == refKind && groupOf(apiVersion) == groupOf(refAPI)
}

func groupOf(apiVersion string) string {
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		return g
	}
	return ""
}
