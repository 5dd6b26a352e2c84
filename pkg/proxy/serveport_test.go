package proxy_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// Traffic redirected from an app's Service arrives on the app's Serve port and reaches that app and
// no other, whatever Host the client sent: another tenant's exact host, the catch-all, or a host
// nobody routes. The same requests on the proxy port are routed by Host as always.
func TestServePortReachesOnlyItsApp(t *testing.T) {
	_, shopEP := backend(t, "shop")
	_, attackerEP := backend(t, "attacker")
	shop := entry("shop", "shop.b.example.com", "shop")
	shop.Namespace, shop.ServePort, shop.PathPrefixes = "b", 20001, []string{"/api"}
	attacker := routing.Entry{Namespace: "a", Name: "attacker", Hosts: []string{"*", "evil.example.com"}, Service: "attacker", Port: 80}
	h := newHarness(t, []routing.Entry{shop, attacker}, nil)
	h.src.Set(keyIn("b", "shop"), shopEP)
	h.src.Set(keyIn("a", "attacker"), attackerEP)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	eng := h.proxy.ServePortEngine(20001, "b/shop")
	srv := &proxy.Server{Name: "serve", Listener: ln, Engine: eng, Handler: eng, FastHTTP1: true, DrainTimeout: time.Second, Log: testr.New(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	get := func(base, host, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Host = host
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatalf("GET %s %s%s: %v", base, host, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	port := "http://" + ln.Addr().String()
	for _, host := range []string{"shop.b.example.com", "evil.example.com", "shop.b.svc.cluster.local", "10.96.0.15", "unknown.test", ""} {
		if code, body := get(port, host, "/api/cart"); code != http.StatusOK || body != "shop /api/cart" {
			t.Errorf("Serve port, Host %q: got %d %q, want the shop app", host, code, body)
		}
	}
	if code, body := get(port, "evil.example.com", "/login"); code != http.StatusNotFound {
		t.Errorf("Serve port, a path the app does not route: got %d %q, want 404 (never another app)", code, body)
	}
	if code, body := get(h.url, "evil.example.com", "/api/cart"); code != http.StatusOK || body != "attacker /api/cart" {
		t.Errorf("proxy port: got %d %q, want routing by Host", code, body)
	}

	// The port moves away from the app (the operator gave it up): the listener answers nothing more.
	shop.ServePort = 20002
	h.setTable(shop, attacker)
	testenv.Eventually(t, 5*time.Second, "the old port to stop routing", func() bool {
		code, _ := get(port, "shop.b.example.com", "/api/cart")
		return code == http.StatusNotFound
	})
}

func keyIn(ns, svc string) endpoints.ServiceKey {
	return endpoints.ServiceKey{Namespace: ns, Service: svc}
}

// A client of an app's Service that forges forwarding headers gets no further on the app's Serve
// port than on the proxy port: nobody is trusted by default, so the app sees the client's address.
func TestServePortReplacesForgedForwardingHeaders(t *testing.T) {
	_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Join(r.Header.Values("X-Forwarded-For"), "|")+" "+strings.Join(r.Header.Values("X-Forwarded-Host"), "|"))
	})
	shop := entry("shop", "shop.b.example.com", "shop")
	shop.Namespace, shop.ServePort = "b", 20001
	h := newHarness(t, []routing.Entry{shop}, nil)
	h.src.Set(keyIn("b", "shop"), ep)
	for _, fast := range []bool{true, false} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		eng := h.proxy.ServePortEngine(20001, "b/shop")
		srv := &proxy.Server{Name: "serve", Listener: ln, Engine: eng, Handler: eng, FastHTTP1: fast, DrainTimeout: time.Second, Log: testr.New(t)}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Start(ctx) }()
		req, _ := http.NewRequest(http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
		req.Host = "shop.b.example.com"
		req.Header.Set("X-Forwarded-For", "203.0.113.9")
		req.Header.Set("X-Forwarded-Host", "evil.example")
		resp, err := h.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got, want := string(b), "127.0.0.1 shop.b.example.com"; resp.StatusCode != http.StatusOK || got != want {
			t.Errorf("event loops %v: the app saw %d %q, want %q", fast, resp.StatusCode, got, want)
		}
		cancel()
		<-done
	}
}
