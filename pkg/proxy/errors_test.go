package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStatusFor(t *testing.T) {
	dial := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	read := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset")}
	for _, tc := range []struct {
		name   string
		err    error
		code   int
		reason string
	}{
		{"no route", fmt.Errorf("x: %w", ErrNoRoute), http.StatusNotFound, "no_route"},
		{"queue full", fmt.Errorf("ns/a: %w", ErrQueueFull), http.StatusServiceUnavailable, "queue_full"},
		{"readiness timeout", fmt.Errorf("ns/a: %w", ErrReadinessTimeout), http.StatusGatewayTimeout, "readiness_timeout"},
		{"response header timeout", fmt.Errorf("a: %w: %w", ErrResponseHeaderTimeout, context.Canceled), http.StatusGatewayTimeout, "response_header_timeout"},
		{"request timeout", fmt.Errorf("a: %w: %w", ErrRequestTimeout, context.DeadlineExceeded), http.StatusGatewayTimeout, "request_timeout"},
		{"client gone wins over upstream", fmt.Errorf("%w: %w", ErrClientGone, read), StatusClientClosedRequest, "client_gone"},
		{"bare cancel is not blamed on the client", context.Canceled, http.StatusBadGateway, "upstream"},
		{"dial error", fmt.Errorf("forwarding: %w", dial), http.StatusBadGateway, "dial"},
		{"no endpoint", ErrNoEndpoint, http.StatusBadGateway, "dial"},
		{"reset after sending", fmt.Errorf("forwarding: %w", read), http.StatusBadGateway, "upstream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, reason := statusFor(tc.err)
			if code != tc.code || reason != tc.reason {
				t.Errorf("statusFor(%v) = %d %s, want %d %s", tc.err, code, reason, tc.code, tc.reason)
			}
			// Every failure reason has its own slot of upstream_errors_total.
			if code >= 500 && reason != "queue_full" && reason != "app_idle" && upstreamReasons[upstreamIndex(reason)] != reason {
				t.Errorf("reason %s has no slot of its own in upstreamReasons %v", reason, upstreamReasons)
			}
		})
	}
}

func TestCodeClass(t *testing.T) {
	got := []string{}
	for _, c := range []int{101, 200, 204, 301, 404, 499, 500, 504} {
		got = append(got, codeClass(c))
	}
	want := []string{"1xx", "2xx", "2xx", "3xx", "4xx", "499", "5xx", "5xx"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
