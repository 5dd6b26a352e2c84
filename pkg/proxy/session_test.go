package proxy_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/sessioncookie"
)

// sessionEntry is app.example.com/shop with session persistence (cookie "pod", an hour).
func sessionEntry(name, host, svc string) routing.Entry {
	e := entry(name, host, svc)
	e.PathPrefixes = []string{"/shop"}
	e.Ignored = []string{"/shop/healthz"}
	e.Session = &routing.Session{Cookie: "pod", MaxAge: 3600}
	return e
}

// pods starts n raw backends named name-0..n-1 that answer with their name and a cookie of the
// app's own, and lists them as svc's ready endpoints.
func pods(t *testing.T, h *harness, svc, name string, n int, zones ...string) []rawPod {
	t.Helper()
	var bes []rawPod
	var eps []endpoints.Endpoint
	for i := range n {
		me := fmt.Sprintf("%s-%d", name, i)
		be := newRawBackend(t, func(int, *http.Request) proxytest.Reply {
			return proxytest.Reply{Resp: proxytest.OKReply(me, "Set-Cookie: app-session=42; Path=/")}
		})
		if i < len(zones) {
			be.ep.Zone = zones[i]
		}
		bes = append(bes, be)
		eps = append(eps, be.ep)
	}
	h.src.Set(key(svc), eps...)
	return bes
}

// podCookie returns the value of the interceptor's Set-Cookie "pod" of a response ("" when it
// set none) and checks the app's own cookie went through beside it.
func podCookie(t *testing.T, a proxytest.Answer) (value, attrs string) {
	t.Helper()
	var own bool
	for _, sc := range a.Wire.Values("Set-Cookie") {
		if strings.HasPrefix(sc, "app-session=") {
			own = true
			continue
		}
		if v, rest, ok := strings.Cut(strings.TrimPrefix(sc, "pod="), ";"); ok && strings.HasPrefix(sc, "pod=") {
			if value != "" {
				t.Errorf("two session cookies in one response: %q", a.Wire.Values("Set-Cookie"))
			}
			value, attrs = v, rest
		}
	}
	if !own && a.Code == http.StatusOK {
		t.Errorf("the app's own Set-Cookie was dropped: %q", a.Wire.Values("Set-Cookie"))
	}
	return value, attrs
}

// TestSessionPersistenceOnEveryPath: a client that keeps its cookie stays on one pod; the first
// answer names it with a cookie (HttpOnly, SameSite=Lax, the app's path, its lifetime), later ones
// carry none; when the pod leaves the ready set the client goes to another pod and gets a cookie
// naming that one; the fast paths serve such requests themselves.
func TestSessionPersistenceOnEveryPath(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			h := newHarness(t, []routing.Entry{sessionEntry("app", "app.example.com", "app")}, func(_ *proxy.Options, s *proxy.Server) { srv.mod(s) })
			bes := pods(t, h, "app", "pod", 3)
			rc := dialRaw(t, h)

			first := rc.Do(proxytest.RawGet("/shop/cart"))
			v, attrs := podCookie(t, first)
			if first.Code != http.StatusOK || len(v) != sessioncookie.ValueLen {
				t.Fatalf("first request: %d, cookie %q, want 200 and a session cookie", first.Code, first.Wire.Values("Set-Cookie"))
			}
			if want := " Path=/shop; Max-Age=3600; HttpOnly; SameSite=Lax"; attrs != want {
				t.Errorf("cookie attributes %q, want %q", attrs, want)
			}
			pinned := first.Body
			for i := range 20 {
				a := rc.Do(proxytest.RawGet("/shop/cart", "Cookie: theme=dark; pod="+v))
				if a.Code != http.StatusOK || a.Body != pinned {
					t.Fatalf("request %d with the cookie: %d from %s, want 200 from %s", i, a.Code, a.Body, pinned)
				}
				if nv, _ := podCookie(t, a); nv != "" {
					t.Errorf("request %d with a valid cookie got a new one", i)
				}
			}
			for _, be := range bes {
				for _, r := range be.Requests() {
					if wantLoops := srv.name == "event loops"; r.ViaLoops() != wantLoops {
						t.Fatalf("served on the event loops %v, want %v", r.ViaLoops(), wantLoops)
					}
				}
			}

			// The pinned pod is no longer ready: another pod, and a cookie naming it.
			var rest []endpoints.Endpoint
			for i, be := range bes {
				if fmt.Sprintf("pod-%d", i) != pinned {
					rest = append(rest, be.ep)
				}
			}
			h.src.Set(key("app"), rest...)
			moved := rc.Do(proxytest.RawGet("/shop/cart", "Cookie: pod="+v))
			nv, _ := podCookie(t, moved)
			if moved.Code != http.StatusOK || moved.Body == pinned || nv == "" || nv == v {
				t.Fatalf("after the pinned pod left: %d from %s, cookie %q; want another pod and a new cookie", moved.Code, moved.Body, nv)
			}
			for range 5 {
				if a := rc.Do(proxytest.RawGet("/shop/cart", "Cookie: pod="+nv)); a.Body != moved.Body {
					t.Fatalf("with the new cookie: from %s, want %s", a.Body, moved.Body)
				}
			}
		})
	}
}

// TestSessionCookiesClientsControl: a client's cookie can only ever choose among the app's own
// ready endpoints. Forged, altered, oversized values, values issued for another app (even one on
// the same pods) and values under an unknown key are ignored: the request is balanced as without a
// cookie and gets a cookie of its own.
func TestSessionCookiesClientsControl(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			h := newHarness(t, []routing.Entry{
				sessionEntry("app", "app.example.com", "app"),
				sessionEntry("twin", "twin.example.com", "app"), // the same Service: the same pods
				sessionEntry("other", "other.example.com", "other"),
			}, func(_ *proxy.Options, s *proxy.Server) { srv.mod(s) })
			pods(t, h, "app", "pod", 3)
			pods(t, h, "other", "other", 2)
			rc := dialRaw(t, h)
			v, _ := podCookie(t, rc.Do(proxytest.RawGet("/shop")))
			twin, _ := podCookie(t, rc.Do(proxytest.RawReqTo("twin.example.com", "GET", "/shop")))
			other, _ := podCookie(t, rc.Do(proxytest.RawReqTo("other.example.com", "GET", "/shop")))
			tampered := []byte(v)
			tampered[3] ^= 1 // still base64url
			if tampered[3] == '-' || tampered[3] == '_' {
				tampered[3] = 'A'
			}

			for _, c := range []struct{ name, cookie string }{
				{"forged", "pod=" + strings.Repeat("Q", sessioncookie.ValueLen)},
				{"tampered", "pod=" + string(tampered)},
				{"another app's, on the same pods", "pod=" + twin},
				{"another app's", "pod=" + other},
				{"oversized", "pod=" + strings.Repeat(v, 100)},
				{"not base64url", "pod=" + v[:sessioncookie.ValueLen-1] + "/"},
				{"under a key no replica has", "pod=" + mustKeys(t).Value(0, "ns/app", bodyAddr(t, h, v))},
			} {
				reached := map[string]bool{}
				for range 6 {
					a := rc.Do(proxytest.RawGet("/shop", "Cookie: "+c.cookie))
					if a.Code != http.StatusOK || !strings.HasPrefix(a.Body, "pod-") {
						t.Fatalf("%s cookie: %d from %q, want 200 from one of the app's pods", c.name, a.Code, a.Body)
					}
					if nv, _ := podCookie(t, a); nv == "" {
						t.Errorf("%s cookie: no new cookie", c.name)
					}
					reached[a.Body] = true
				}
				if len(reached) < 2 {
					t.Errorf("%s cookie: 6 requests all reached %v, want them balanced", c.name, reached)
				}
			}
			// A huge Cookie header leaves the fast path, and is still served.
			big := rc.Do(proxytest.RawGet("/shop", "Cookie: pod="+strings.Repeat("A", 16<<10)))
			if big.Code != http.StatusOK || !strings.HasPrefix(big.Body, "pod-") {
				t.Errorf("16 KiB cookie: %d %q", big.Code, big.Body)
			}
			// Ignored paths follow the cookie too, but never set one (a load balancer's checks).
			if a := rc.Do(proxytest.RawGet("/shop/healthz")); a.Code != http.StatusOK {
				t.Errorf("ignored path: %d", a.Code)
			} else if nv, _ := podCookie(t, a); nv != "" {
				t.Error("an ignored path set a session cookie")
			}
		})
	}
}

// bodyAddr returns the address of the pod that cookie value v pins (the pods are listed in the
// order of their names).
func bodyAddr(t *testing.T, h *harness, v string) string {
	t.Helper()
	a := dialRaw(t, h).Do(proxytest.RawGet("/shop", "Cookie: pod="+v))
	var n int
	if _, err := fmt.Sscanf(a.Body, "pod-%d", &n); err != nil {
		t.Fatalf("body %q: %v", a.Body, err)
	}
	return h.src.Ready(key("app")).Endpoints[n].Addr()
}

func mustKeys(t *testing.T, keys ...string) *sessioncookie.Keys {
	t.Helper()
	if len(keys) == 0 {
		return sessioncookie.RandomKeys()
	}
	bs := make([][]byte, len(keys))
	for i, k := range keys {
		bs[i] = []byte(k)
	}
	k, err := sessioncookie.NewKeys(bs...)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSessionFallsBackWhenThePinnedPodRefuses: a pinned pod that is listed ready but refuses
// connections costs the client nothing: another pod answers, and the cookie moves to it.
func TestSessionFallsBackWhenThePinnedPodRefuses(t *testing.T) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			h := newHarness(t, []routing.Entry{sessionEntry("app", "app.example.com", "app")}, func(_ *proxy.Options, s *proxy.Server) { srv.mod(s) })
			bes := pods(t, h, "app", "pod", 2)
			rc := dialRaw(t, h)
			first := rc.Do(proxytest.RawGet("/shop"))
			v, _ := podCookie(t, first)
			n := 0
			if first.Body == "pod-1" {
				n = 1
			}
			bes[n].Refuse() // still listed ready
			a := rc.Do(proxytest.RawGet("/shop", "Cookie: pod="+v))
			nv, _ := podCookie(t, a)
			if a.Code != http.StatusOK || a.Body == first.Body || nv == "" || nv == v {
				t.Fatalf("pinned pod refusing: %d from %s, cookie %q; want the other pod and a cookie naming it", a.Code, a.Body, nv)
			}
		})
	}
}

// TestSessionPersistenceWithZones: a new client goes to a pod in the interceptor's zone; a pinned
// client stays on its pod in another zone (counted as a cross-zone forward).
func TestSessionPersistenceWithZones(t *testing.T) {
	h := newHarness(t, []routing.Entry{sessionEntry("app", "app.example.com", "app")}, func(o *proxy.Options, _ *proxy.Server) {
		o.Zone, o.ZoneAware = "zone-a", true
	})
	bes := pods(t, h, "app", "pod", 2, "zone-a", "zone-b")
	rc := dialRaw(t, h)
	for range 4 {
		if a := rc.Do(proxytest.RawGet("/shop")); a.Body != "pod-0" {
			t.Fatalf("a new client reached %s, want pod-0 in the interceptor's zone", a.Body)
		}
	}
	// A cookie for pod-1 (zone-b): obtained while zone-a had no pod.
	h.src.Set(key("app"), bes[1].ep)
	v, _ := podCookie(t, rc.Do(proxytest.RawGet("/shop")))
	h.src.Set(key("app"), bes[0].ep, bes[1].ep)
	before := h.metric("httpscale_interceptor_cross_zone_forwards_total", map[string]string{"app": "ns/app"})
	for range 4 {
		if a := rc.Do(proxytest.RawGet("/shop", "Cookie: pod="+v)); a.Body != "pod-1" {
			t.Fatalf("a client pinned to pod-1 reached %s", a.Body)
		}
	}
	if got := h.metric("httpscale_interceptor_cross_zone_forwards_total", map[string]string{"app": "ns/app"}) - before; got != 4 {
		t.Errorf("cross-zone forwards: %v, want 4", got)
	}
}

// TestSessionKeyRotation: with the new key first and the old one still listed, a cookie of the old
// key keeps its pod and is renewed under the new key; once the old key is gone, it names nothing.
func TestSessionKeyRotation(t *testing.T) {
	const oldKey, newKey = "old-key-0123456789abcdef", "new-key-0123456789abcdef"
	var keys atomic.Pointer[sessioncookie.Keys]
	keys.Store(mustKeys(t, oldKey))
	h := newHarness(t, []routing.Entry{sessionEntry("app", "app.example.com", "app")}, func(o *proxy.Options, _ *proxy.Server) {
		o.SessionKeys = keys.Load
	})
	pods(t, h, "app", "pod", 3)
	rc := dialRaw(t, h)
	first := rc.Do(proxytest.RawGet("/shop"))
	v, _ := podCookie(t, first)

	keys.Store(mustKeys(t, newKey, oldKey))
	a := rc.Do(proxytest.RawGet("/shop", "Cookie: pod="+v))
	renewed, _ := podCookie(t, a)
	if a.Body != first.Body || renewed == "" || renewed == v {
		t.Fatalf("old-key cookie during the rotation: from %s (want %s), renewed %q", a.Body, first.Body, renewed)
	}
	if a := rc.Do(proxytest.RawGet("/shop", "Cookie: pod="+renewed)); a.Body != first.Body {
		t.Fatalf("renewed cookie: from %s, want %s", a.Body, first.Body)
	}
	keys.Store(mustKeys(t, newKey))
	reached := map[string]bool{}
	for range 6 {
		reached[rc.Do(proxytest.RawGet("/shop", "Cookie: pod="+v)).Body] = true
	}
	if len(reached) < 2 {
		t.Errorf("a cookie of a retired key still pins: reached %v", reached)
	}
}

// TestSessionCookieSecureOverHTTPS: a request that came over HTTPS (the TLS port, or an ingress
// saying so) gets a Secure cookie; over plain HTTP a browser would drop one.
func TestSessionCookieSecureOverHTTPS(t *testing.T) {
	h := newHarness(t, []routing.Entry{sessionEntry("app", "app.example.com", "app")}, nil)
	pods(t, h, "app", "pod", 1)
	rc := dialRaw(t, h)
	if _, attrs := podCookie(t, rc.Do(proxytest.RawGet("/shop", "X-Forwarded-Proto: https"))); !strings.HasSuffix(attrs, "; Secure") {
		t.Errorf("over HTTPS: attributes %q, want Secure", attrs)
	}
	if _, attrs := podCookie(t, rc.Do(proxytest.RawGet("/shop"))); strings.Contains(attrs, "Secure") {
		t.Errorf("over HTTP: attributes %q, want no Secure", attrs)
	}
}
