package proxy_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
)

// rawPod is a raw backend (proxytest.RawBackend) with the endpoint that lists it.
type rawPod struct {
	*proxytest.RawBackend
	ep endpoints.Endpoint
}

// newRawBackend starts a raw backend; create it after the harness, so that it closes first and no
// request is left waiting for it when the harness drains.
func newRawBackend(t *testing.T, reply func(i int, r *http.Request) proxytest.Reply) rawPod {
	t.Helper()
	b := proxytest.NewRawBackend(t, reply)
	return rawPod{RawBackend: b, ep: endpointOf(t, "http://"+b.Addr, "")}
}

// dialRaw is a client on raw TCP to the harness's proxy port.
func dialRaw(t *testing.T, h *harness) *proxytest.RawClient {
	t.Helper()
	return proxytest.NewRawClient(t, h.dial(t, 15*time.Second))
}
