package proxy_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/tlsterm"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

// TestRewriteAndSessionOverTLS: the TLS port (pkg/tlsterm in front of the same request logic,
// through net/http, HTTP/1.1 and HTTP/2) rewrites paths and keeps sessions as the cleartext port
// does, and its session cookies are Secure.
func TestRewriteAndSessionOverTLS(t *testing.T) {
	e := sessionEntry("app", "app.example.com", "app")
	e.Rewrites = []routing.PathRewrite{{Prefix: "/shop", Replace: "/store"}}
	e.TLSSecret = "app-tls"
	h := newHarness(t, []routing.Entry{e}, nil)
	bes := pods(t, h, "app", "pod", 3)

	cert := tlstermtest.NewCert("app.example.com")
	store := tlsterm.NewStore("")
	store.SetTable(h.table.Load())
	kp, err := tls.X509KeyPair(cert.CertPEM, cert.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	store.SetCertificate("ns/app-tls", &kp)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &tlsterm.Server{Listener: ln, Store: store, Handler: h.proxy, DrainTimeout: 5 * time.Second, Log: testr.New(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	for _, h2 := range []bool{false, true} {
		var p http.Protocols
		cfg := &tls.Config{RootCAs: cert.Pool, ServerName: "app.example.com"}
		if h2 {
			p.SetHTTP2(true)
		} else {
			p.SetHTTP1(true)
			cfg.NextProtos = []string{"http/1.1"}
		}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, Protocols: &p,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, ln.Addr().String())
			}}}
		get := func(cookie string) (*http.Response, string) {
			req, _ := http.NewRequest(http.MethodGet, "https://app.example.com/shop/item?id=1", nil)
			if cookie != "" {
				req.Header.Set("Cookie", cookie)
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp, string(b)
		}
		resp, first := get("")
		var pin string
		for _, sc := range resp.Header.Values("Set-Cookie") {
			if strings.HasPrefix(sc, "pod=") {
				pin = sc[:strings.IndexByte(sc, ';')]
				if !strings.HasSuffix(sc, "; Secure") {
					t.Errorf("h2=%v: cookie %q over TLS is not Secure", h2, sc)
				}
			}
		}
		if resp.StatusCode != http.StatusOK || pin == "" {
			t.Fatalf("h2=%v: %d, cookies %q", h2, resp.StatusCode, resp.Header.Values("Set-Cookie"))
		}
		for range 10 {
			if _, body := get(pin); body != first {
				t.Fatalf("h2=%v: pinned to %s, answered by %s", h2, first, body)
			}
		}
	}
	for _, be := range bes {
		for _, r := range be.Requests() {
			if r.RequestURI != "/store/item?id=1" || r.Wire.Get(proxy.HeaderForwardedPrefix) != "/shop" || r.Wire.Get("X-Forwarded-Proto") != "https" {
				t.Errorf("over TLS the app got %s (prefix %q, proto %q), want /store/item?id=1 from /shop over https",
					r.RequestURI, r.Wire.Get(proxy.HeaderForwardedPrefix), r.Wire.Get("X-Forwarded-Proto"))
			}
		}
	}
}
