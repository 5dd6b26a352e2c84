package standalone

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

// Endpoints is the endpoints.Source of standalone mode: the endpoints the file lists, replaced as a
// whole on every reload. Ready and WaitReady are safe for concurrent use; Ready takes no lock and
// does not allocate.
type Endpoints struct {
	sets atomic.Pointer[map[endpoints.ServiceKey]*endpoints.Set]

	mu    sync.Mutex
	waits map[endpoints.ServiceKey]chan struct{} // closed when the key gets an endpoint
}

// NewEndpoints returns an Endpoints with no endpoint.
func NewEndpoints() *Endpoints {
	e := &Endpoints{waits: map[endpoints.ServiceKey]chan struct{}{}}
	empty := map[endpoints.ServiceKey]*endpoints.Set{}
	e.sets.Store(&empty)
	return e
}

// Ready returns the endpoints of k, nil when it has none.
func (e *Endpoints) Ready(k endpoints.ServiceKey) *endpoints.Set { return (*e.sets.Load())[k] }

// WaitReady blocks until k has an endpoint and returns them, or returns ctx's error. Only the waiters
// of a key that gets its first endpoint wake.
func (e *Endpoints) WaitReady(ctx context.Context, k endpoints.ServiceKey) (*endpoints.Set, error) {
	for {
		e.mu.Lock()
		if s := e.Ready(k); s.Len() > 0 {
			e.mu.Unlock()
			return s, nil
		}
		ch, ok := e.waits[k]
		if !ok {
			ch = make(chan struct{})
			e.waits[k] = ch
		}
		e.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-ch:
		}
	}
}

// Set replaces every key's endpoints with sets (which must not be modified afterwards) and wakes the
// waiters of keys that now have one.
func (e *Endpoints) Set(sets map[endpoints.ServiceKey]*endpoints.Set) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.sets.Store(&sets)
	for k, ch := range e.waits {
		if sets[k].Len() > 0 {
			close(ch)
			delete(e.waits, k)
		}
	}
}
