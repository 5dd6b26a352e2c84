package engine

import (
	"net/http"
	"testing"

	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
)

// TestRewrittenTargetOnBothPaths: the target a Rewriter returns is what the upstream gets on both
// paths, byte for byte. The event loops send a target net/http would send as it is themselves; one
// net/http would escape (a space, a non-ASCII byte) they leave to net/http before Begin, which
// sends it escaped, so that both paths send the same request for the same rewrite.
func TestRewrittenTargetOnBothPaths(t *testing.T) {
	for _, c := range []struct {
		rewrite, want string
		loops         bool // served by the loops themselves (when they are on)
	}{
		{"/inner/a%2Fb?q=1;x=%zz", "/inner/a%2Fb?q=1;x=%zz", true},
		{"/x?", "/x?", true},
		{"/sp ace/\u00fc?q", "/sp%20ace/%C3%BC?q", false},
	} {
		t.Run(c.rewrite, func(t *testing.T) {
			r := entry("app", "app.example.com", "app")
			r.rewrite = c.rewrite
			onBothPathsRouting(t, []route{r}, nil, func(t *testing.T, h *harness, fast bool) {
				be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("ok")} })
				h.src.Set(key("app"), be.Addr)
				rc := dialRaw(t, h)
				for range 2 { // the second on the same connection: a loop that left one to net/http goes on
					if a := rc.Do(proxytest.RawGet("/outer/path?orig")); a.Code != http.StatusOK {
						t.Fatalf("rewrite %q: %d %s", c.rewrite, a.Code, a.Err)
					}
				}
				for _, r := range be.Requests() {
					if r.RequestURI != c.want {
						t.Errorf("rewrite %q: the upstream got %q, want %q", c.rewrite, r.RequestURI, c.want)
					}
					if want := fast && c.loops; r.ViaLoops() != want {
						t.Errorf("rewrite %q: sent by the loops %v, want %v", c.rewrite, r.ViaLoops(), want)
					}
				}
				if n := len(be.Requests()); n != 2 {
					t.Errorf("the upstream got %d requests, want 2", n)
				}
			})
		})
	}
}
