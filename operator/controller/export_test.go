package controller

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// PatchStatus is patchStatus, for the tests of package controller_test.
var PatchStatus = patchStatus

// StatusWrites is the main controller's status writer, for the tests of package controller_test.
type StatusWrites struct{ w statusWrites }

// Patch is statusWrites.patch.
func (s *StatusWrites) Patch(ctx context.Context, c client.Client, key string, orig, hso *v1.HTTPScaledObject) error {
	return s.w.patch(ctx, c, key, orig, hso)
}
