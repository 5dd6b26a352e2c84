package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/pkg/routing"
)

// tableStore is the routing table's ConfigMap storage: it reads the table in the cluster and writes
// a new version as shard ConfigMaps and a head, in the order routing.ToConfigMaps documents. It keeps
// what it knows of the stored table so that a write costs only the ConfigMaps that changed.
//
// Not safe for concurrent use: the TableWriter's Start goroutine owns it.
type tableStore struct {
	client    client.Client // writes
	reader    client.Reader // uncached reads
	namespace string
	base      string
	writes    *atomic.Int64 // counts ConfigMap creates, updates and deletes

	// The shard ConfigMaps known to exist (nil: list them), the head's last resourceVersion written,
	// and the version the stored head is known to hold ("" when unknown: not read yet, or a head
	// write failed and may or may not have been applied).
	shardCMs map[string]bool
	headRV   string
	stored   string
}

// read reads the table in the cluster and its bucket count, and remembers its version as stored.
func (s *tableStore) read(ctx context.Context) (*routing.Table, int, error) {
	head := &corev1.ConfigMap{}
	if err := s.reader.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: s.base}, head); err != nil {
		return nil, 0, fmt.Errorf("reading %s/%s: %w", s.namespace, s.base, err)
	}
	m, err := routing.ReadManifest(head)
	if err != nil {
		return nil, 0, err
	}
	shards, err := s.listShards(ctx)
	if err != nil {
		return nil, 0, err
	}
	t, err := routing.FromConfigMaps(head, shards)
	if err != nil {
		return nil, 0, err
	}
	s.stored = t.Version()
	return t, m.Buckets, nil
}

func (s *tableStore) listShards(ctx context.Context) ([]*corev1.ConfigMap, error) {
	var list corev1.ConfigMapList
	if err := s.reader.List(ctx, &list, client.InNamespace(s.namespace), client.MatchingLabels{routing.LabelTable: s.base}); err != nil {
		return nil, fmt.Errorf("listing routing-table ConfigMaps: %w", err)
	}
	var out []*corev1.ConfigMap
	for i := range list.Items {
		if list.Items[i].Name != s.base {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}

// current reports whether the stored table is known to be version and nothing is left to clean up,
// so that writing it again would change nothing.
func (s *tableStore) current(version string) bool {
	return s.stored == version && s.shardCMs != nil
}

// write writes the table in the order routing.ToConfigMaps documents: new shards, then the head
// (unless it is known to hold this version already), then stale shards deleted. Shards that already
// exist (content-addressed names) are not written again, so a change that touched one shard creates
// one ConfigMap. headWritten reports whether the head now holds the version; an error with
// headWritten true failed only the clean-up of stale shards (done again by the next write).
func (s *tableStore) write(ctx context.Context, manifest routing.Manifest, shards []routing.Shard) (headWritten bool, err error) {
	head, shardCMs := routing.ToConfigMaps(s.namespace, s.base, manifest, shards)
	if s.shardCMs == nil {
		existing, err := s.listShards(ctx)
		if err != nil {
			return false, err
		}
		s.shardCMs = map[string]bool{}
		for _, cm := range existing {
			s.shardCMs[cm.Name] = true
		}
	}
	keep := map[string]bool{}
	var create []*corev1.ConfigMap
	for _, cm := range shardCMs {
		keep[cm.Name] = true
		if !s.shardCMs[cm.Name] { // content-addressed: an existing shard already holds these bytes
			create = append(create, cm)
		}
	}
	err = concurrently(len(create), func(i int) error {
		if err := s.client.Create(ctx, create[i]); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating routing-table shard %s: %w", create[i].Name, err)
		}
		s.writes.Add(1)
		return nil
	})
	if err != nil {
		s.shardCMs = nil // re-list before the next attempt
		return false, err
	}
	for _, cm := range create {
		s.shardCMs[cm.Name] = true
	}
	if s.stored != manifest.Version {
		if err := s.writeHead(ctx, head); err != nil {
			s.stored = "" // it may have been applied all the same
			return false, err
		}
		s.stored = manifest.Version
		s.writes.Add(1)
	}
	var stale []string
	for name := range s.shardCMs {
		if !keep[name] {
			stale = append(stale, name)
		}
	}
	err = concurrently(len(stale), func(i int) error {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: stale[i], Namespace: s.namespace}}
		if err := s.client.Delete(ctx, cm); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting stale routing-table shard %s: %w", stale[i], err)
		}
		s.writes.Add(1)
		return nil
	})
	if err != nil {
		s.shardCMs = nil
		return true, err
	}
	for _, name := range stale {
		delete(s.shardCMs, name)
	}
	return true, nil
}

// writeParallelism bounds the ConfigMap requests one table write has in flight. A burst rewrites most
// shards in every version; one at a time, a version of 100 shards took seconds on a busy API server.
const writeParallelism = 16

// concurrently runs f(0..n-1) with at most writeParallelism calls at once and returns the first error
// (after every call returned).
func concurrently(n int, f func(i int) error) error {
	sem := make(chan struct{}, writeParallelism)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// writeHead updates the head with the resourceVersion of the last write (one request), and reads it
// first only when that is unknown or stale.
func (s *tableStore) writeHead(ctx context.Context, head *corev1.ConfigMap) error {
	if s.headRV != "" {
		head.ResourceVersion = s.headRV
		err := s.client.Update(ctx, head)
		if err == nil {
			s.headRV = head.ResourceVersion
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
			s.headRV = ""
			return fmt.Errorf("updating routing-table head %s: %w", head.Name, err)
		}
		head.ResourceVersion = ""
	}
	current := &corev1.ConfigMap{}
	err := s.reader.Get(ctx, client.ObjectKeyFromObject(head), current)
	switch {
	case apierrors.IsNotFound(err):
		if err := s.client.Create(ctx, head); err != nil {
			s.headRV = ""
			return fmt.Errorf("creating routing-table head %s: %w", head.Name, err)
		}
		s.headRV = head.ResourceVersion
	case err != nil:
		return fmt.Errorf("reading routing-table head %s: %w", head.Name, err)
	default:
		current.Labels, current.Annotations, current.Data, current.BinaryData = head.Labels, head.Annotations, head.Data, head.BinaryData
		if err := s.client.Update(ctx, current); err != nil {
			s.headRV = ""
			return fmt.Errorf("updating routing-table head %s: %w", head.Name, err)
		}
		s.headRV = current.ResourceVersion
	}
	return nil
}
