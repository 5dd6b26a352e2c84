package controller

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// statusWrites remembers the resourceVersion of the main controller's last status write of each
// object until a reconcile reads a copy that holds it.
//
// A status computed from a cached copy that predates that write, and equal to that copy's status, is
// not news to the copy but may be to the stored object: the replicas answered 0 of 2, the status said
// so, they caught up, and the next reconcile, still reading the copy from before the write (the cache
// lags the API server under load), found 2 of 2 already there and wrote nothing. The stored status
// kept 0 of 2, and nothing brought the object back: the main controller does not reconcile on its own
// status writes, and the prober re-queues objects only when its answers change. So such a copy is
// checked against the stored object (a patch carrying only its resourceVersion: a Conflict while the
// cache still lags, nothing written otherwise) rather than trusted.
type statusWrites struct {
	mu sync.Mutex
	rv map[string]string // by app key
}

// patch writes hso's status where it differs from orig (patchStatus), and also when orig may predate
// the last status write of key; it then remembers the written resourceVersion.
func (s *statusWrites) patch(ctx context.Context, c client.Client, key string, orig, hso *v1.HTTPScaledObject) error {
	s.mu.Lock()
	last, unseen := s.rv[key]
	if unseen && last == orig.ResourceVersion {
		delete(s.rv, key) // the copy holds the write
		unseen = false
	}
	s.mu.Unlock()
	if !unseen && equality.Semantic.DeepEqual(orig.Status, hso.Status) {
		return nil
	}
	if err := c.Status().Patch(ctx, hso, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rv == nil {
		s.rv = map[string]string{}
	}
	if hso.ResourceVersion == orig.ResourceVersion {
		delete(s.rv, key) // nothing written: orig was current
	} else {
		s.rv[key] = hso.ResourceVersion
	}
	return nil
}

// forget drops what is remembered of key (the object is gone).
func (s *statusWrites) forget(key string) {
	s.mu.Lock()
	delete(s.rv, key)
	s.mu.Unlock()
}
