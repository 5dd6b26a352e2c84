package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/queue"
)

// Errors of the request logic; the engine's are re-exported below. Every error of the request path
// reaches the client through statusFor, the only place that maps an error to an HTTP status.
var (
	// ErrNoRoute: the routing table has no entry for the request's host, path and headers.
	ErrNoRoute = errors.New("no route")
	// ErrQueueFull: the app is cold and its hold queue is at its limit.
	ErrQueueFull = errors.New("hold queue full")
	// ErrReadinessTimeout: the app got no ready endpoint within its readiness timeout and has neither
	// fallback nor placeholder.
	ErrReadinessTimeout = errors.New("no ready endpoint within the readiness timeout")
	// ErrIdle: a request to one of the app's ignored paths while the app has no ready endpoint; it
	// is not held and does not wake the app.
	ErrIdle = errors.New("app is idle and this path does not wake it")
	// ErrBadPath: a request to a rewritten path prefix whose path has a "." or ".." segment, which
	// the app would resolve outside the rewritten prefix; it is refused, never forwarded.
	ErrBadPath = errors.New("dot segment in a rewritten path")
)

// Errors of the engine (see pkg/proxy/engine).
var (
	// ErrNoEndpoint: every candidate endpoint failed to accept a connection.
	ErrNoEndpoint = engine.ErrNoEndpoint
	// ErrResponseHeaderTimeout: the upstream sent no response headers within the app's timeout.
	ErrResponseHeaderTimeout = engine.ErrResponseHeaderTimeout
	// ErrRequestTimeout: the whole forwarded request took longer than the app's request timeout.
	ErrRequestTimeout = engine.ErrRequestTimeout
	// ErrClientGone: the client went away (or the interceptor's drain deadline cut the request);
	// logged as status 499 and never counted as an upstream failure.
	ErrClientGone = engine.ErrClientGone
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
	case errors.Is(err, ErrIdle):
		return http.StatusServiceUnavailable, "app_idle"
	case errors.Is(err, engine.ErrUpstreamBusy):
		return http.StatusServiceUnavailable, "upstream_busy"
	case errors.Is(err, queue.ErrPoolFull):
		return http.StatusServiceUnavailable, "pool_full"
	case errors.Is(err, queue.ErrEvicted):
		return http.StatusServiceUnavailable, "evicted"
	case errors.Is(err, ErrBadPath):
		return http.StatusBadRequest, "bad_path"
	case errors.Is(err, ErrReadinessTimeout):
		return http.StatusGatewayTimeout, "readiness_timeout"
	case errors.Is(err, ErrResponseHeaderTimeout):
		return http.StatusGatewayTimeout, "response_header_timeout"
	case errors.Is(err, ErrRequestTimeout), errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout, "request_timeout"
	case errors.Is(err, ErrNoEndpoint), engine.IsDialError(err):
		return http.StatusBadGateway, "dial"
	default:
		return http.StatusBadGateway, "upstream"
	}
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
