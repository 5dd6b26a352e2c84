package queue

import (
	"sync"

	"github.com/httpscale/httpscale/pkg/admin"
)

// subscriber is one wake stream. Publishers add to pending under a short lock and never block; a
// goroutine per subscriber moves pending events to the channel the reader consumes. Pending holds at
// most one event per app: behind a slow reader, events of one app coalesce into the first.
type subscriber struct {
	out    chan admin.WakeEvent
	notify chan struct{}
	done   chan struct{}
	once   sync.Once

	mu      sync.Mutex
	pending []admin.WakeEvent
	keys    map[string]struct{}
}

// Subscribe implements admin.WakeSource. The channel is closed after cancel is called; cancel may be
// called more than once. Its first events announce every app holding requests at the time: a
// scaler whose stream broke (or that just started) learns of cold starts that happened meanwhile
// without waiting for its next poll.
func (r *Registry) Subscribe(buffer int) (<-chan admin.WakeEvent, func()) {
	if buffer < 0 {
		buffer = 0
	}
	s := &subscriber{
		out:    make(chan admin.WakeEvent, buffer),
		notify: make(chan struct{}, 1),
		done:   make(chan struct{}),
		keys:   map[string]struct{}{},
	}
	r.mu.Lock()
	subs := append(append([]*subscriber(nil), *r.subs.Load()...), s)
	r.subs.Store(&subs)
	r.mu.Unlock()
	// After registering, so that a request held from now on is published to s (coalesced with
	// this announcement if both name the same app).
	now := r.now()
	for _, a := range r.apps.Load().All() {
		if a.held.Load() > 0 {
			s.add(admin.WakeEvent{Key: a.key, At: now})
		}
	}
	go s.pump()
	cancel := func() {
		s.once.Do(func() {
			r.mu.Lock()
			cur := *r.subs.Load()
			next := make([]*subscriber, 0, len(cur))
			for _, o := range cur {
				if o != s {
					next = append(next, o)
				}
			}
			r.subs.Store(&next)
			r.mu.Unlock()
			close(s.done)
		})
	}
	return s.out, cancel
}

// Subscribers returns the number of open wake streams.
func (r *Registry) Subscribers() int { return len(*r.subs.Load()) }

// publish hands ev to every wake stream and returns how many there are.
func (r *Registry) publish(ev admin.WakeEvent) int {
	subs := *r.subs.Load()
	for _, s := range subs {
		s.add(ev)
	}
	return len(subs)
}

func (s *subscriber) add(ev admin.WakeEvent) {
	s.mu.Lock()
	if _, dup := s.keys[ev.Key]; !dup {
		s.keys[ev.Key] = struct{}{}
		s.pending = append(s.pending, ev)
	}
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// pump delivers pending events in order until cancel, then closes out.
func (s *subscriber) pump() {
	defer close(s.out)
	var batch []admin.WakeEvent
	for {
		select {
		case <-s.done:
			return
		case <-s.notify:
		}
		s.mu.Lock()
		batch, s.pending = s.pending, batch[:0]
		clear(s.keys)
		s.mu.Unlock()
		for _, ev := range batch {
			select {
			case s.out <- ev:
			case <-s.done:
				return
			}
		}
	}
}
