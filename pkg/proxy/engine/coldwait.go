package engine

import (
	"context"
	"net/http"
)

// RequestWaiter is an Exchange whose wait step looks at the request it holds, so that it may
// decline to hold a request (a browser navigation answered with a waiting page) and say so with an
// error for Fail, and charge for holding it what the request costs. The engine calls WaitRequest
// instead of Wait when the exchange has it, on both paths, with ctx ending when the client goes away
// (or the server is cut off).
type RequestWaiter interface {
	WaitRequest(ctx context.Context, rq Waiting) error
}

// Waiting is what the wait step is told of the request it holds.
type Waiting struct {
	Method string
	Header Header
	// HeadBytes is the size of the request's head as HTTP/1.1 sends it (request line and header
	// lines): on the event loops the head as it came, on net/http as its parsed fields add up.
	HeadBytes int64
	// Buffered is the most request body the server may keep in memory for the request while it
	// is held, unread (an HTTP/2 stream's receive window); 0 when it keeps none.
	Buffered int64
}

// h2StreamWindow is the request body net/http's HTTP/2 server buffers for a stream whose handler
// has not read it yet (its default per-stream receive window).
const h2StreamWindow = 1 << 20

// waitingOf describes a request net/http read for the wait step.
func waitingOf(r *http.Request) Waiting {
	w := Waiting{Method: r.Method, Header: r.Header, HeadBytes: headBytes(r)}
	if r.ProtoMajor == 2 && r.ContentLength != 0 {
		w.Buffered = h2StreamWindow
		if r.ContentLength > 0 {
			w.Buffered = min(w.Buffered, r.ContentLength)
		}
	}
	return w
}

// headBytes returns the size of r's head as it came on the wire in HTTP/1.1: the request line and
// every header line. O(header fields).
func headBytes(r *http.Request) int64 {
	n := len(r.Method) + 1 + len(r.RequestURI) + len(" HTTP/1.1\r\n") + len("Host: \r\n") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(": \r\n") + len(v)
		}
	}
	return int64(n)
}

// wait runs the wait step of exchange x for the request rq.
func wait(x Exchange, ctx context.Context, rq Waiting) error {
	if rw, ok := x.(RequestWaiter); ok {
		return rw.WaitRequest(ctx, rq)
	}
	return x.Wait(ctx)
}
