package proxy

import (
	"fmt"
	"net/http"
)

// What a held request costs the interceptor, measured with hack/bench/holdflood (resident memory
// above the idle process, divided by the requests held; docs/benchmarks.md#held-requests-under-a-flood):
// a request keeps its connection's buffers, its goroutines and their stacks, the request and its
// parsed header (every value a string of its own), a copy of the head kept by the connection's
// head watch, and its share of the garbage collector's headroom over all of that.
const (
	// HeldBaseCost is what a held request with a small head costs.
	HeldBaseCost = 20 << 10
	// HeldHeadFactor is what each byte of a held request's head costs.
	HeldHeadFactor = 3
	// heldH2BodyBytes is the request body an HTTP/2 server buffers for a stream its handler has not
	// read yet (net/http's default per-stream receive window): a held HTTP/2 request with a body may
	// keep that much.
	heldH2BodyBytes = 1 << 20
)

// holdCost returns what holding r costs (see HeldBaseCost): the memory the pool charges for it.
func holdCost(r *http.Request) int64 {
	cost := int64(HeldBaseCost) + HeldHeadFactor*requestHeadBytes(r)
	if r.ProtoMajor == 2 && r.ContentLength != 0 {
		body := int64(heldH2BodyBytes)
		if r.ContentLength > 0 {
			body = min(body, r.ContentLength)
		}
		cost += body
	}
	return cost
}

// requestHeadBytes returns the size of r's head as it came on the wire in HTTP/1.1: the request
// line and every header line. O(header fields).
func requestHeadBytes(r *http.Request) int64 {
	n := len(r.Method) + 1 + len(r.RequestURI) + len(" HTTP/1.1\r\n") + len("Host: \r\n") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return int64(n)
}

// admit takes the request's room in the interceptor's pool of held requests (Options.Pool); evict
// ends the hold when the pool gives the room to an app below its fair share. Without a pool every
// request is admitted.
func (x *exchange) admit(evict func()) error {
	pool := x.p.opts.Pool
	if pool == nil {
		return nil
	}
	cost := x.cost
	if cost == 0 {
		cost = HeldBaseCost // held without its request at hand (Wait called directly)
	}
	h, err := pool.Admit(x.app.counts, cost, evict)
	if err != nil {
		x.app.series().poolRefusals.Inc()
		return fmt.Errorf("%s: %w (%d bytes)", x.app.key, err, cost)
	}
	x.hold = h
	return nil
}

// unhold ends the request's hold, if it is held: its count and its room in the pool.
func (x *exchange) unhold() {
	if x.hold != nil {
		x.hold.Release()
		x.hold = nil
	}
	if x.holding {
		x.app.counts.Unhold()
		x.holding = false
	}
}
