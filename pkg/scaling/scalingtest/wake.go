package scalingtest

import (
	"sync"

	"github.com/httpscale/httpscale/pkg/admin"
)

// Wakes is an admin.WakeSource: Publish fans an event out to every subscriber without blocking
// (a full subscriber loses the event, as the real source coalesces behind a slow reader).
type Wakes struct {
	mu   sync.Mutex
	subs map[chan admin.WakeEvent]struct{}
}

// NewWakes returns a source with no subscribers.
func NewWakes() *Wakes { return &Wakes{subs: map[chan admin.WakeEvent]struct{}{}} }

// Subscribe implements admin.WakeSource.
func (w *Wakes) Subscribe(buffer int) (<-chan admin.WakeEvent, func()) {
	ch := make(chan admin.WakeEvent, buffer)
	w.mu.Lock()
	w.subs[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() { w.remove(ch) }
}

func (w *Wakes) remove(ch chan admin.WakeEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.subs[ch]; ok {
		delete(w.subs, ch)
		close(ch)
	}
}

// Publish sends ev to every subscriber.
func (w *Wakes) Publish(ev admin.WakeEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

// Len counts subscribers.
func (w *Wakes) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs)
}

// CloseAll ends every subscription.
func (w *Wakes) CloseAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for ch := range w.subs {
		delete(w.subs, ch)
		close(ch)
	}
}
