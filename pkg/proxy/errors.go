package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// Errors of the request logic (the engine's are in seam.go). Every error of the request path reaches the client through statusFor, the only place
// that maps an error to an HTTP status.
var (
	// ErrNoRoute: the routing table has no entry for the request's host, path and headers.
	ErrNoRoute = errors.New("no route")
	// ErrQueueFull: the app is cold and its hold queue is at its limit.
	ErrQueueFull = errors.New("hold queue full")
	// ErrReadinessTimeout: the app got no ready endpoint within its readiness timeout and has neither
	// fallback nor placeholder.
	ErrReadinessTimeout = errors.New("no ready endpoint within the readiness timeout")
)

// StatusClientClosedRequest is the non-standard status logged (never sent) for a request whose client
// went away, as nginx does.
const StatusClientClosedRequest = 499

// statusFor maps an error of the request path to the status the client gets and a short reason used
// as a bounded metric label and in the response body. Callers attribute a cancelled context: only
// ErrClientGone means the client went away (a bare context.Canceled may be one of our own timers).
func statusFor(err error) (code int, reason string) {
	switch {
	case errors.Is(err, ErrClientGone):
		return StatusClientClosedRequest, "client_gone"
	case errors.Is(err, ErrNoRoute):
		return http.StatusNotFound, "no_route"
	case errors.Is(err, ErrQueueFull):
		return http.StatusServiceUnavailable, "queue_full"
	case errors.Is(err, ErrReadinessTimeout):
		return http.StatusGatewayTimeout, "readiness_timeout"
	case errors.Is(err, ErrResponseHeaderTimeout):
		return http.StatusGatewayTimeout, "response_header_timeout"
	case errors.Is(err, ErrRequestTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "request_timeout"
	case errors.Is(err, ErrNoEndpoint), isDialError(err):
		return http.StatusBadGateway, "dial"
	default:
		return http.StatusBadGateway, "upstream"
	}
}

// isDialError reports whether err happened while connecting, so that no byte of the request reached
// the upstream and another endpoint may be tried.
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// codeClass is the bounded metric label of a status code.
func codeClass(code int) string {
	switch {
	case code == StatusClientClosedRequest:
		return "499"
	case code >= 500:
		return "5xx"
	case code >= 400:
		return "4xx"
	case code >= 300:
		return "3xx"
	case code >= 200:
		return "2xx"
	default:
		return "1xx"
	}
}
