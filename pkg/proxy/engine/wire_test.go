package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
)

// The engine's tests on the wire: a raw backend and a raw client (pkg/proxy/proxytest) around a
// harness, so that what a backend and a client see on the event loops can be compared with what
// net/http and the ReverseProxy give them.

// dialRaw is a client on raw TCP to the harness's port.
func dialRaw(t *testing.T, h *harness) *proxytest.RawClient {
	t.Helper()
	return proxytest.NewRawClient(t, h.dial(t, 15*time.Second))
}

// onBothPaths runs f as subtests with a harness routing app.example.com to the app "ns/app"
// (Service app) on the event loops (fast=true: Server.FastHTTP1 on, two loops) and on net/http
// (fast=false).
func onBothPaths(t *testing.T, f func(t *testing.T, h *harness, fast bool)) {
	onBothPathsWith(t, nil, f)
}

// onBothPathsWith is onBothPaths with the options and the server changed by mod (when set).
func onBothPathsWith(t *testing.T, mod func(*Options, *Server), f func(t *testing.T, h *harness, fast bool)) {
	onBothPathsRouting(t, []route{entry("app", "app.example.com", "app")}, mod, f)
}

// onBothPathsRouting is onBothPathsWith with the harness's routes given: they are read by the loops
// without a lock, so they are set before the harness starts.
func onBothPathsRouting(t *testing.T, routes []route, mod func(*Options, *Server), f func(t *testing.T, h *harness, fast bool)) {
	for _, m := range []struct {
		name  string
		fast  bool
		loops int
	}{{"fast=true", true, 2}, {"fast=false", false, 0}} {
		t.Run(m.name, func(t *testing.T) {
			h := newHarness(t, slices.Clone(routes), func(o *Options, s *Server) {
				s.FastHTTP1, s.EventLoops = m.fast, m.loops
				if mod != nil {
					mod(o, s)
				}
			})
			f(t, h, m.fast)
		})
	}
}
