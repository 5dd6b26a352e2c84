package engine

import (
	"bytes"
	"runtime"
	"sync"
	"time"
)

// headGate bounds how many of the connections the event loops handed to net/http have their
// request heads parsed at once. The loops hand over a connection whose head is larger than their
// buffer before the head has arrived; net/http then reads and parses it on a goroutine of its own.
// A client opening thousands of such connections (3,000 heads of 100 KiB in a second) had as many
// goroutines parsing, and the Go scheduler, fair between goroutines, gave the loops' few goroutines
// a matching share of the cores: for as long as the heads arrived the loops waited to run, and
// every other app's requests on them stalled (docs/benchmarks.md#held-requests-under-a-flood).
//
// A connection's goroutine holds a slot from the moment a read of its head returns until it has to
// wait for the client (or writes, or its handler starts, or it closes): while it parses what
// arrived, never while it waits, so a client that sends its head slowly holds no slot, and a head
// that arrived whole is parsed to its end in one turn. With
// GOMAXPROCS/2 slots (at least one) the handed-over heads are parsed on at most half the cores and
// the loops keep the rest.
type headGate struct{ slots chan struct{} }

func newHeadGate(n int) *headGate { return &headGate{slots: make(chan struct{}, max(n, 1))} }

// defaultHeadParsers is how many handed-over heads are parsed at once.
func defaultHeadParsers() int { return runtime.GOMAXPROCS(0) / 2 }

// gateState is a connection's use of a headGate. The zero value (no gate) does nothing. It is safe
// for concurrent use (net/http reads a connection from a second goroutine while a handler runs).
type gateState struct {
	mu     sync.Mutex
	g      *headGate
	armed  bool // the connection is reading a request head
	held   bool // it holds a slot
	closed bool
	readBy time.Time // the read deadline net/http set (see watchedConn.readNow)
}

// holding reports whether the connection holds a slot.
func (s *gateState) holding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held
}

// setDeadline records the connection's read deadline; deadline returns it.
func (s *gateState) setDeadline(t time.Time) {
	s.mu.Lock()
	s.readBy = t
	s.mu.Unlock()
}

func (s *gateState) deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readBy
}

// start arms the gate for a connection the loops hand over with the bytes they read (pending):
// its first head is gated, unless it is the HTTP/2 preface (an h2c connection reads frames, not
// heads).
func (s *gateState) start(g *headGate, pending []byte) {
	s.g = g
	s.armed = g != nil && !bytes.HasPrefix(pending, []byte("PRI * HTTP/2.0"))
}

// acquire takes a slot, when the connection reads a head and holds none: called when a read
// returned, before what it read is parsed.
func (s *gateState) acquire() {
	s.mu.Lock()
	if !s.armed || s.held || s.closed {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.g.slots <- struct{}{}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed || s.held || s.closed { // changed while waiting
		<-s.g.slots
		return
	}
	s.held = true
}

// release gives the slot back, if held.
func (s *gateState) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releaseLocked()
}

func (s *gateState) releaseLocked() {
	if s.held {
		<-s.g.slots
		s.held = false
	}
}

// served marks the end of a head: its handler starts. The handler (and a read of the body, or of
// an upgraded connection) runs ungated.
func (s *gateState) served() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = false
	s.releaseLocked()
}

// next arms the gate again for the next head on the connection, once a handler returned; not
// after an upgrade, whose connection no longer carries heads.
func (s *gateState) next(upgraded bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = s.g != nil && !upgraded && !s.closed
}

// close releases the slot for good.
func (s *gateState) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed, s.armed = true, false
	s.releaseLocked()
}
