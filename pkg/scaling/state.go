package scaling

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// State is what the Collector publishes and the gRPC service reads: the latest Snapshot, recent wake
// notices, activity subscriptions, and the rate windows KEDA asked about. It is safe for concurrent
// use; every method is a map operation or a pointer load under a short lock, never I/O.
type State struct {
	wakeHold time.Duration
	snap     atomic.Pointer[Snapshot]
	ready    chan struct{}
	once     sync.Once

	mu    sync.Mutex
	wakes map[string]time.Time
	subs  map[string]map[*Subscription]struct{}

	wmu     sync.RWMutex
	windows map[string]window
}

type window struct{ w, g time.Duration }

// NewState returns an empty State. wakeHold is how long a wake notice keeps an app active.
func NewState(wakeHold time.Duration) *State {
	s := &State{
		wakeHold: wakeHold,
		ready:    make(chan struct{}),
		wakes:    map[string]time.Time{},
		subs:     map[string]map[*Subscription]struct{}{},
		windows:  map[string]window{},
	}
	s.snap.Store(&Snapshot{Apps: map[string]*AppStats{}})
	return s
}

// Snapshot returns the latest snapshot; before the first collection it is empty, never nil.
func (s *State) Snapshot() *Snapshot { return s.snap.Load() }

// Ready is closed once the first snapshot was published.
func (s *State) Ready() <-chan struct{} { return s.ready }

// Publish makes snap the current snapshot and notifies the subscribers of the apps whose activity
// changed.
func (s *State) Publish(snap *Snapshot, changed []string) {
	s.snap.Store(snap)
	s.once.Do(func() { close(s.ready) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for app, at := range s.wakes {
		if snap.At.Sub(at) > s.wakeHold {
			delete(s.wakes, app)
		}
	}
	for _, app := range changed {
		for sub := range s.subs[app] {
			sub.signal(false)
		}
	}
}

// Wake records that the app received a request while it had no ready endpoint and tells its
// subscribers at once.
func (s *State) Wake(app string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.wakes[app] = now
	for sub := range s.subs[app] {
		sub.signal(true)
	}
}

// Woken reports whether the app got a wake notice within the wake hold before now.
func (s *State) Woken(app string, now time.Time) bool {
	s.mu.Lock()
	at, ok := s.wakes[app]
	s.mu.Unlock()
	return ok && now.Sub(at) <= s.wakeHold
}

// Subscribe returns a subscription to the app's activity changes and wake notices; the empty app is
// the interceptor fleet. Close it when done.
func (s *State) Subscribe(app string) *Subscription {
	sub := &Subscription{c: make(chan struct{}, 1), app: app, state: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.subs[app]
	if m == nil {
		m = map[*Subscription]struct{}{}
		s.subs[app] = m
	}
	m[sub] = struct{}{}
	return sub
}

// maxWindows bounds the apps whose windows are remembered, so that a client asking about ever new
// apps cannot grow the State without end; apps beyond it get the trigger defaults.
const maxWindows = admin.MaxApps

// SetWindow records the rate window and granularity KEDA uses for the app. It takes a write lock only
// when the values change.
func (s *State) SetWindow(app string, w, g time.Duration) {
	s.wmu.RLock()
	cur, ok := s.windows[app]
	s.wmu.RUnlock()
	if ok && cur == (window{w, g}) {
		return
	}
	s.wmu.Lock()
	if ok || len(s.windows) < maxWindows {
		s.windows[app] = window{w, g}
	}
	s.wmu.Unlock()
}

// Window returns the app's rate window and granularity, the trigger defaults when unknown.
func (s *State) Window(app string) (w, g time.Duration) {
	s.wmu.RLock()
	cur, ok := s.windows[app]
	s.wmu.RUnlock()
	if !ok {
		return trigger.DefaultWindow, trigger.DefaultGranularity
	}
	return cur.w, cur.g
}

// Subscription delivers change signals for one app. C receives a value (coalesced: at most one is
// pending) whenever the app's activity may have changed or a wake notice arrived.
type Subscription struct {
	c     chan struct{}
	woke  atomic.Bool
	app   string
	state *State
}

// C is the signal channel.
func (sub *Subscription) C() <-chan struct{} { return sub.c }

// Woke reports, and clears, whether a wake notice arrived since the last call.
func (sub *Subscription) Woke() bool { return sub.woke.Swap(false) }

// Close ends the subscription.
func (sub *Subscription) Close() {
	s := sub.state
	s.mu.Lock()
	defer s.mu.Unlock()
	if m := s.subs[sub.app]; m != nil {
		delete(m, sub)
		if len(m) == 0 {
			delete(s.subs, sub.app)
		}
	}
}

func (sub *Subscription) signal(wake bool) {
	if wake {
		sub.woke.Store(true)
	}
	select {
	case sub.c <- struct{}{}:
	default:
	}
}
