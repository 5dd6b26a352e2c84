package engine

import "context"

// RequestWaiter is an Exchange whose wait step looks at the request's method and header lines, so
// that it may decline to hold a request (a browser navigation answered with a waiting page) and say
// so with an error for Fail. The engine calls WaitRequest instead of Wait when the exchange has it,
// on both paths, with ctx ending when the client goes away (or the server is cut off).
type RequestWaiter interface {
	WaitRequest(ctx context.Context, method string, h Header) error
}

// wait runs the wait step of exchange x for a request of method with header lines h.
func wait(x Exchange, ctx context.Context, method string, h Header) error {
	if rw, ok := x.(RequestWaiter); ok {
		return rw.WaitRequest(ctx, method, h)
	}
	return x.Wait(ctx)
}
