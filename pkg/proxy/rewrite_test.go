package proxy_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/routing"
)

// shopEntry routes app.example.com/shop (rewritten to /) and /api (not rewritten), with an
// ignored path inside /shop.
func shopEntry() routing.Entry {
	e := entry("app", "app.example.com", "app")
	e.PathPrefixes = []string{"/shop", "/api"}
	e.Ignored = []string{"/shop/healthz"}
	e.Rewrites = []routing.PathRewrite{{Prefix: "/shop", Replace: "/"}}
	return e
}

// TestPathRewriteOnEveryPath: the app gets the request target with the matched prefix replaced and
// X-Forwarded-Prefix (a client's own replaced), the query as sent, on the event loops, the fast path
// on goroutines and net/http, and the fast paths keep serving such requests themselves.
func TestPathRewriteOnEveryPath(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			h := newHarness(t, []routing.Entry{shopEntry()}, func(_ *proxy.Options, s *proxy.Server) { srv.mod(s) })
			be := newRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("ok")} })
			h.src.Set(key("app"), be.ep)
			rc := dialRaw(t, h)
			for _, c := range []struct {
				target, want, prefix string
				general              bool // served by net/http even with the fast path on
			}{
				{"/shop/cart?item=1;size=2&q=%zz", "/cart?item=1;size=2&q=%zz", "/shop", false},
				{"/shop", "/", "/shop", false},
				{"/shop/", "/", "/shop", false},
				{"/shop//evil.example/x", "/evil.example/x", "/shop", false},
				{"/shop/healthz", "/healthz", "/shop", false},   // an ignored path inside /shop
				{"/api/v1", "/api/v1", "from-client", false},    // not rewritten: the client's header passes
				{"/sh%6Fp/a%2Fb?x", "/a%2Fb?x", "/shop", false}, // percent-encoded, as sent
			} {
				n := len(be.Requests())
				a := rc.Do(proxytest.RawGet(c.target, "X-Forwarded-Prefix: from-client"))
				if a.Code != http.StatusOK {
					t.Fatalf("GET %s: %d %s, want 200", c.target, a.Code, a.Err)
				}
				seen := be.Requests()
				if len(seen) != n+1 {
					t.Fatalf("GET %s: the backend got %d requests, want 1", c.target, len(seen)-n)
				}
				got := seen[n]
				if got.RequestURI != c.want || got.Wire.Get(proxy.HeaderForwardedPrefix) != c.prefix || len(got.Wire[proxy.HeaderForwardedPrefix]) != 1 {
					t.Errorf("GET %s: the app got %s with X-Forwarded-Prefix %q, want %s with %q", c.target, got.RequestURI, got.Wire[proxy.HeaderForwardedPrefix], c.want, c.prefix)
				}
				if wantLoops := srv.name == "event loops" && !c.general; got.ViaLoops() != wantLoops {
					t.Errorf("GET %s: served on the event loops %v, want %v (head %q)", c.target, got.ViaLoops(), wantLoops, got.Head())
				}
			}
		})
	}
}

// TestPathRewriteRefusesDotSegments: "/shop/../admin" would reach the app as "/../admin" (or, with
// a replacement, "/internal/../admin") and leave the subtree the rewrite names: 400, nothing sent,
// nothing counted, on every path. Without a rewrite the path is the app's business and goes on.
func TestPathRewriteRefusesDotSegments(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			h := newHarness(t, []routing.Entry{shopEntry()}, func(_ *proxy.Options, s *proxy.Server) { srv.mod(s) })
			be := newRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("ok")} })
			h.src.Set(key("app"), be.ep)
			rc := dialRaw(t, h)
			for _, target := range []string{"/shop/../admin", "/shop/./x", "/shop/a/..", "/shop/%2e%2e/admin", "/shop/..%2Fadmin"} {
				a := rc.Do(proxytest.RawGet(target))
				if a.Code != http.StatusBadRequest || !strings.Contains(a.Body, "bad_path") {
					t.Errorf("GET %s: %d %q, want 400 bad_path", target, a.Code, a.Body)
				}
			}
			if n := len(be.Requests()); n != 0 {
				t.Errorf("the app got %d refused requests", n)
			}
			if _, _, req := h.count("ns/app"); req != 0 {
				t.Errorf("refused requests counted: %d", req)
			}
			if a := rc.Do(proxytest.RawGet("/api/../x")); a.Code != http.StatusOK {
				t.Errorf("GET /api/../x (no rewrite): %d, want 200", a.Code)
			}
		})
	}
}

// TestPathRewriteOfAHeldRequestAndOverH2C: a request held while the app is cold is rewritten when
// it is released; a request forwarded to an h2c backend, from an HTTP/1.1 or an h2c client, too.
func TestPathRewriteOfAHeldRequestAndOverH2C(t *testing.T) {
	seen := make(chan string, 8)
	echo := func(w http.ResponseWriter, r *http.Request) {
		seen <- r.RequestURI + " " + r.Header.Get(proxy.HeaderForwardedPrefix)
		_, _ = io.WriteString(w, "ok")
	}
	g := h2cEntry()
	g.PathPrefixes = []string{"/rpc"}
	g.Rewrites = []routing.PathRewrite{{Prefix: "/rpc", Replace: "/pkg.Svc"}}
	h := newHarness(t, []routing.Entry{shopEntry(), g}, nil)

	done := make(chan int)
	go func() {
		code, _, _, _ := h.get(context.Background(), "app.example.com", "/shop/item?id=7")
		done <- code
	}()
	if err := h.src.WaitWaiting(context.Background(), key("app"), 1); err != nil {
		t.Fatal(err)
	}
	_, ep := backendFunc(t, echo)
	h.src.Set(key("app"), ep)
	if code := <-done; code != http.StatusOK {
		t.Fatalf("held request: %d", code)
	}
	if got := <-seen; got != "/item?id=7 /shop" {
		t.Errorf("held request reached the app as %q, want \"/item?id=7 /shop\"", got)
	}

	s := httptest.NewUnstartedServer(http.HandlerFunc(echo))
	var bp http.Protocols
	bp.SetUnencryptedHTTP2(true)
	s.Config.Protocols = &bp
	s.Start()
	t.Cleanup(s.Close)
	h.src.Set(key("g"), endpointOf(t, s.URL, ""))
	for name, c := range map[string]*http.Client{"client=h1": h.client, "client=h2c": h2cClient()} {
		req, _ := http.NewRequest(http.MethodPost, h.url+"/rpc/Get", strings.NewReader("x"))
		req.Host = "g.example.com"
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		select {
		case got := <-seen:
			if got != "/pkg.Svc/Get /rpc" {
				t.Errorf("%s: the h2c app got %q, want \"/pkg.Svc/Get /rpc\"", name, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the h2c app got nothing (%d)", name, resp.StatusCode)
		}
	}
}
