// Package proxytest provides an in-memory endpoints.Source and loopback backends for tests of the
// proxy; it is never compiled into binaries.
package proxytest

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

// Source is an in-memory endpoints.Source with the same wake contract as the EndpointSlice cache:
// one channel per key, closed when the key gets its first ready endpoint.
type Source struct {
	mu sync.Mutex
	// sets is replaced, not changed (under mu), and read without a lock, as endpoints.Cache does:
	// benchmarks through a Source measure the proxy, not a lock every request takes.
	sets  atomic.Pointer[map[endpoints.ServiceKey]*endpoints.Set]
	wakes map[endpoints.ServiceKey]chan struct{}
	// waiting counts blocked WaitReady calls per key.
	waiting map[endpoints.ServiceKey]int
	changed chan struct{}
}

// NewSource returns an empty Source.
func NewSource() *Source {
	s := &Source{
		wakes:   map[endpoints.ServiceKey]chan struct{}{},
		waiting: map[endpoints.ServiceKey]int{},
		changed: make(chan struct{}),
	}
	s.sets.Store(&map[endpoints.ServiceKey]*endpoints.Set{})
	return s
}

// Set replaces k's ready endpoints; waiters of k wake when eps is not empty.
func (s *Source) Set(k endpoints.ServiceKey, eps ...endpoints.Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sets := maps.Clone(*s.sets.Load())
	if len(eps) == 0 {
		delete(sets, k)
		s.sets.Store(&sets)
		return
	}
	sets[k] = &endpoints.Set{Key: k, Endpoints: append([]endpoints.Endpoint(nil), eps...)}
	s.sets.Store(&sets) // before the waiters wake
	if ch := s.wakes[k]; ch != nil {
		close(ch)
		delete(s.wakes, k)
	}
}

// Ready implements endpoints.Source.
func (s *Source) Ready(k endpoints.ServiceKey) *endpoints.Set {
	return (*s.sets.Load())[k]
}

// WaitReady implements endpoints.Source.
func (s *Source) WaitReady(ctx context.Context, k endpoints.ServiceKey) (*endpoints.Set, error) {
	for {
		s.mu.Lock()
		if set := (*s.sets.Load())[k]; set.Len() > 0 {
			s.mu.Unlock()
			return set, nil
		}
		ch := s.wakes[k]
		if ch == nil {
			ch = make(chan struct{})
			s.wakes[k] = ch
		}
		s.waiting[k]++
		s.notifyLocked()
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		s.mu.Lock()
		s.waiting[k]--
		s.notifyLocked()
		s.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

func (s *Source) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// WaitWaiting blocks until n WaitReady calls for k are blocked or ctx ends, so tests release held
// requests only once they are held.
func (s *Source) WaitWaiting(ctx context.Context, k endpoints.ServiceKey, n int) error {
	for {
		s.mu.Lock()
		got, ch := s.waiting[k], s.changed
		s.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
