package engine

import "net/http"

// RequestWaiter is an Exchange whose wait step looks at the request's method and header lines, so
// that it may decline to hold a request (a browser navigation answered with a waiting page) and say
// so with an error for Fail. The engine calls WaitRequest instead of Wait when the exchange has it.
type RequestWaiter interface {
	WaitRequest(r *http.Request) error
}

// wait runs the wait step of r's exchange x.
func wait(x Exchange, r *http.Request) error {
	if rw, ok := x.(RequestWaiter); ok {
		return rw.WaitRequest(r)
	}
	return x.Wait(r.Context())
}
