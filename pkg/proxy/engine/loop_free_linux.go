//go:build linux

package engine

import (
	"bytes"
	"sync"
	"sync/atomic"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// loopFree is what a loop keeps for its next requests, without a sync.Pool (the loop is one
// goroutine): request buffers, request parses and relays not in use. A client connection holds a
// request buffer only while it has request bytes: a kept-alive connection waiting for its next
// request, or a held request, holds none (10,000 held requests would otherwise keep 40 MiB of them).
// Parses and relays beyond the loop's own evFreeRequests go to, and come from, the spare pools:
// with hundreds of connections a loop has hundreds of requests in flight, and a parse is 3 KiB
// zeroed on every allocation.
type loopFree struct {
	bufs   [][]byte
	rqs    []*h1.Request
	relays []*h1.Relay
	// arriving counts the capacity of the request buffers grown beyond evClientBuffer, every loop
	// together (evLoops.arriving): what heads still arriving take.
	arriving *atomic.Int64
}

// buf returns an empty request buffer.
func (f *loopFree) buf() []byte {
	if n := len(f.bufs); n > 0 {
		b := f.bufs[n-1]
		f.bufs[n-1] = nil
		f.bufs = f.bufs[:n-1]
		return b
	}
	return make([]byte, 0, evClientBuffer)
}

// putBuf keeps a request buffer of the usual size for the next client (up to 256 of them).
func (f *loopFree) putBuf(b []byte) {
	if len(f.bufs) < 256 && cap(b) == evClientBuffer {
		f.bufs = append(f.bufs, b[:0])
	}
}

// releaseIn gives c's request buffer back when it is empty (one grown for a large head is left to
// the collector); a large output buffer goes too.
func (f *loopFree) releaseIn(c *evClient) {
	if c.in != nil && len(c.in) == 0 {
		f.putBuf(c.in)
		f.dropGrown(c.in)
		c.in, c.scan = nil, 0
	}
	if c.out.Len() == 0 && c.out.Cap() > evClientBuffer {
		c.out = bytes.Buffer{}
	}
}

// consume drops the first n bytes of c.in (a head, or body bytes sent on). What is left of a
// buffer grown for a large head moves to a buffer of the usual size when it fits, so that a held
// request does not keep the large one for the few bytes that came after its head.
func (f *loopFree) consume(c *evClient, n int) {
	c.scan = 0
	rest := c.in[n:]
	if cap(c.in) > evClientBuffer && len(rest) > 0 && len(rest) <= evClientBuffer {
		f.dropGrown(c.in)
		c.in = append(f.buf(), rest...)
		return
	}
	c.in = c.in[:copy(c.in, rest)]
	f.releaseIn(c)
}

// grow returns a copy of in with capacity n (above evClientBuffer), counted in arriving; false
// when that would take arriving over limit (0: no limit).
func (f *loopFree) grow(in []byte, n int, limit int64) ([]byte, bool) {
	add := int64(n)
	if cap(in) > evClientBuffer {
		add -= int64(cap(in)) // in is counted already
	}
	if got := f.arriving.Add(add); limit > 0 && got > limit {
		f.arriving.Add(-add)
		return nil, false
	}
	b := make([]byte, len(in), n)
	copy(b, in)
	return b, true
}

// dropGrown uncounts in when it was grown (see grow); the caller lets go of it.
func (f *loopFree) dropGrown(in []byte) {
	if cap(in) > evClientBuffer {
		f.arriving.Add(-int64(cap(in)))
	}
}

// spareRequests and spareRelays hold the parses and relays the loops have no room for.
var (
	spareRequests = sync.Pool{New: func() any { return new(h1.Request) }}
	spareRelays   = sync.Pool{New: func() any { return new(h1.Relay) }}
)

// request returns a request parse.
func (f *loopFree) request() *h1.Request {
	if n := len(f.rqs); n > 0 {
		rq := f.rqs[n-1]
		f.rqs[n-1] = nil
		f.rqs = f.rqs[:n-1]
		return rq
	}
	return spareRequests.Get().(*h1.Request)
}

// putRequest gives back a request parse.
func (f *loopFree) putRequest(rq *h1.Request) {
	rq.Reset() // drops its references into the head
	if len(f.rqs) < evFreeRequests {
		f.rqs = append(f.rqs, rq)
		return
	}
	spareRequests.Put(rq)
}

// relay returns a relay.
func (f *loopFree) relay() *h1.Relay {
	if n := len(f.relays); n > 0 {
		r := f.relays[n-1]
		f.relays[n-1] = nil
		f.relays = f.relays[:n-1]
		return r
	}
	return spareRelays.Get().(*h1.Relay)
}

// putRelay gives back a relay.
func (f *loopFree) putRelay(r *h1.Relay) {
	if len(f.relays) < evFreeRequests {
		f.relays = append(f.relays, r)
		return
	}
	spareRelays.Put(r)
}
