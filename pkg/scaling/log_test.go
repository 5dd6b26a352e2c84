package scaling

import (
	"errors"
	"net/http"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
)

func testLog(t *testing.T) logr.Logger { return testr.New(t) }

func testLogB(b *testing.B) logr.Logger { return logr.Discard() }

// noWake is an http.Client for benchmarks that do not exercise wake streams: every request fails at
// once, so the wake followers sleep in their backoff.
var noWake = http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
	return nil, errors.New("wake streams disabled in this benchmark")
})}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
