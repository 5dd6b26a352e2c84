package testenv

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/pkg/routing"
)

// StoredTable decodes the routing table the operator stored as the ConfigMaps base (the head) and its
// shards in namespace, as an interceptor reads it.
func StoredTable(ctx context.Context, c client.Reader, namespace, base string) (*routing.Table, error) {
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{routing.LabelTable: base}); err != nil {
		return nil, fmt.Errorf("listing the routing table's ConfigMaps: %w", err)
	}
	var head *corev1.ConfigMap
	var shards []*corev1.ConfigMap
	for i := range list.Items {
		if cm := &list.Items[i]; cm.Name == base {
			head = cm
		} else {
			shards = append(shards, cm)
		}
	}
	return routing.FromConfigMaps(head, shards)
}
