//go:build linux

package engine

import (
	"container/heap"
	"time"
)

// A loop's timers: per client connection at most one of each timerKind, in a heap ordered by when
// they are due, and one runtime timer set to the earliest, which posts evTimer. A timer is taken
// out of the heap when what it bounds ends first, so the heap holds only running bounds.
type timerKind uint8

const (
	timerHungUp  timerKind = iota // the client closed its sending side: answer it by then (see hungUp)
	timerRequest                  // the app's request timeout
	timerHeader                   // the app's response-header timeout, for one attempt
	timerKinds
)

// loopTimer is one timer of a client connection; idx is its place in the heap, -1 when not in it.
type loopTimer struct {
	at   time.Time
	c    *evClient
	kind timerKind
	idx  int
}

type timerHeap struct {
	l     *evLoop
	h     []*loopTimer
	rt    *time.Timer
	armed time.Time // when rt fires; zero: not armed
}

func (t *timerHeap) Len() int           { return len(t.h) }
func (t *timerHeap) Less(i, j int) bool { return t.h[i].at.Before(t.h[j].at) }
func (t *timerHeap) Swap(i, j int) {
	t.h[i], t.h[j] = t.h[j], t.h[i]
	t.h[i].idx, t.h[j].idx = i, j
}
func (t *timerHeap) Push(x any) {
	e := x.(*loopTimer)
	e.idx = len(t.h)
	t.h = append(t.h, e)
}
func (t *timerHeap) Pop() any {
	e := t.h[len(t.h)-1]
	t.h[len(t.h)-1] = nil
	t.h = t.h[:len(t.h)-1]
	e.idx = -1
	return e
}

// set makes c's timer of kind due at at (replacing one set before).
func (t *timerHeap) set(c *evClient, kind timerKind, at time.Time) {
	e := &c.timers[kind]
	e.at, e.c, e.kind = at, c, kind
	if e.idx >= 0 && e.idx < len(t.h) && t.h[e.idx] == e {
		heap.Fix(t, e.idx)
	} else {
		heap.Push(t, e)
	}
	t.arm()
}

// clear takes c's timer of kind out, when set.
func (t *timerHeap) clear(c *evClient, kind timerKind) {
	if len(t.h) == 0 {
		return
	}
	if e := &c.timers[kind]; e.idx >= 0 && e.idx < len(t.h) && t.h[e.idx] == e {
		heap.Remove(t, e.idx)
	}
}

// clearAll takes every timer of c out.
func (t *timerHeap) clearAll(c *evClient) {
	if len(t.h) == 0 {
		return // the common case: no app with timeouts, nobody half-closed
	}
	for k := range timerKinds {
		t.clear(c, k)
	}
}

// arm sets the runtime timer to the earliest timer when it would fire later (or not at all).
func (t *timerHeap) arm() {
	if len(t.h) == 0 {
		return
	}
	at := t.h[0].at
	if !t.armed.IsZero() && !at.Before(t.armed) {
		return
	}
	t.armed = at
	d := max(time.Until(at), 0)
	if t.rt == nil {
		l := t.l
		t.rt = time.AfterFunc(d, func() { l.post(evMsg{kind: evTimer}) })
		return
	}
	t.rt.Reset(d)
}

// fire runs the timers due at now and sets the runtime timer for the next one.
func (t *timerHeap) fire(now time.Time) {
	t.armed = time.Time{}
	for len(t.h) > 0 && !t.h[0].at.After(now) {
		e := heap.Pop(t).(*loopTimer)
		t.l.survive(e.c, func() { t.l.timerDue(e.c, e.kind) })
	}
	t.arm()
}

// stop stops the runtime timer (the loop ends).
func (t *timerHeap) stop() {
	if t.rt != nil {
		t.rt.Stop()
	}
	t.h = nil
}
