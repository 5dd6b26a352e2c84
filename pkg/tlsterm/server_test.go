package tlsterm_test

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/tlsterm"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

// serve starts a Server for store whose handler answers with what it saw, and returns its address.
func serve(t *testing.T, store *tlsterm.Store) string {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s tls=%v", r.Proto, r.Host, r.TLS != nil)
	})
	return serveHandler(t, store, h, 0)
}

// handshake connects with SNI name and returns the serial of the certificate the server presented.
func handshake(addr, name string) (string, error) {
	c, err := tls.DialWithDialer(&netDialer, "tcp", addr, &tls.Config{ServerName: name, InsecureSkipVerify: true}) //nolint:gosec // the test compares the presented certificate itself
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func table(t *testing.T, entries ...routing.Entry) *routing.Table {
	t.Helper()
	tb, err := routing.NewTable(entries)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func entry(ns, name, secret string, hosts ...string) routing.Entry {
	return routing.Entry{Namespace: ns, Name: name, Hosts: hosts, Service: name, Port: 80, TLSSecret: secret}
}

func load(t *testing.T, store *tlsterm.Store, key string, c tlstermtest.Cert) {
	t.Helper()
	ns, name, _ := strings.Cut(key, "/")
	cert, err := tlsterm.ParseSecret(c.Secret(ns, name))
	if err != nil {
		t.Fatal(err)
	}
	store.SetCertificate(key, cert)
}

func TestSNISelection(t *testing.T) {
	exact, wild, deeper, anyHost, other, def :=
		tlstermtest.NewCert("shop.example.com"), tlstermtest.NewCert("*.example.com"), tlstermtest.NewCert("*.eu.example.com"),
		tlstermtest.NewCert("catch-all"), tlstermtest.NewCert("other.test"), tlstermtest.NewCert("default")
	tb := table(t,
		entry("a", "shop", "shop-tls", "shop.example.com"),
		entry("a", "wild", "wild-tls", "*.example.com"),
		entry("b", "eu", "eu-tls", "*.eu.example.com"),
		entry("b", "plain", "", "plain.test"), // no spec.tls
		entry("c", "other", "other-tls", "other.test", "www.other.test"),
	)
	for _, tc := range []struct {
		name       string
		withAny    bool
		withDef    bool
		sni        string
		want       tlstermtest.Cert
		wantFailed bool
	}{
		{name: "exact host", sni: "shop.example.com", want: exact},
		{name: "exact host, any case and a trailing dot", sni: "SHOP.Example.com.", want: exact},
		{name: "second host of an object", sni: "www.other.test", want: other},
		{name: "wildcard, one label", sni: "cart.example.com", want: wild},
		{name: "wildcard, two labels (as routing matches)", sni: "a.b.example.com", want: wild},
		{name: "more specific wildcard wins", sni: "paris.eu.example.com", want: deeper},
		{name: "wildcard does not cover its own domain", sni: "example.com", wantFailed: true},
		{name: "no match, no default: handshake fails", sni: "unknown.test", wantFailed: true},
		{name: "host of an object without spec.tls, no default", sni: "plain.test", wantFailed: true},
		{name: "no match: default certificate", withDef: true, sni: "unknown.test", want: def},
		{name: "no SNI: default certificate", withDef: true, sni: "", want: def},
		{name: "no SNI, no default: handshake fails", sni: "", wantFailed: true},
		{name: "no match: object with host * before the default", withAny: true, withDef: true, sni: "unknown.test", want: anyHost},
		{name: "exact before *", withAny: true, sni: "shop.example.com", want: exact},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := tlsterm.NewStore("httpscale-system/default-tls")
			tb := tb
			if tc.withAny {
				tb = table(t, append(tb.Entries(), entry("z", "any", "any-tls", "*"))...)
				load(t, store, "z/any-tls", anyHost)
			}
			store.SetTable(tb)
			load(t, store, "a/shop-tls", exact)
			load(t, store, "a/wild-tls", wild)
			load(t, store, "b/eu-tls", deeper)
			load(t, store, "c/other-tls", other)
			if tc.withDef {
				load(t, store, "httpscale-system/default-tls", def)
			}
			addr := serve(t, store)
			got, err := handshake(addr, tc.sni)
			if tc.wantFailed {
				if err == nil {
					t.Fatalf("SNI %q: handshake succeeded with certificate %s, want it to fail", tc.sni, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("SNI %q: %v", tc.sni, err)
			}
			if got != tc.want.Serial.String() {
				t.Fatalf("SNI %q: got certificate %s, want %s", tc.sni, got, tc.want.Serial)
			}
		})
	}
}

// An object whose certificate is not loaded (Secret missing or invalid) leaves its hosts to the next
// rule of its own namespace (its wildcard) and changes nothing for the others.
func TestUnloadedCertificateFallsThrough(t *testing.T) {
	good, wild := tlstermtest.NewCert("good.example.com"), tlstermtest.NewCert("*.example.com")
	store := tlsterm.NewStore("")
	store.SetTable(table(t,
		entry("c", "good", "good-tls", "good.example.com"),
		entry("c", "broken", "broken-tls", "broken.example.com"),
		entry("c", "wild", "wild-tls", "*.example.com"),
	))
	load(t, store, "c/good-tls", good)
	addr := serve(t, store)
	if _, err := handshake(addr, "broken.example.com"); err == nil {
		t.Fatal("broken.example.com: handshake succeeded without any certificate for it")
	}
	if got, err := handshake(addr, "good.example.com"); err != nil || got != good.Serial.String() {
		t.Fatalf("good.example.com: got %s, %v; want certificate %s", got, err, good.Serial)
	}
	load(t, store, "c/wild-tls", wild)
	if got, err := handshake(addr, "broken.example.com"); err != nil || got != wild.Serial.String() {
		t.Fatalf("broken.example.com with a wildcard loaded: got %s, %v; want the wildcard's %s", got, err, wild.Serial)
	}
	store.SetCertificate("c/good-tls", nil)
	if got, err := handshake(addr, "good.example.com"); err != nil || got != wild.Serial.String() {
		t.Fatalf("good.example.com after its certificate was dropped: got %s, %v; want the wildcard's %s", got, err, wild.Serial)
	}
}

// A certificate serves only names its own namespace owns: a name namespace b routes never gets
// namespace a's wildcard or catch-all certificate (a's key would then secure b's clients), whatever
// b's Secret holds; it gets the fleet default, or none.
func TestCertificateOnlyFromTheOwningNamespace(t *testing.T) {
	wild, all, def := tlstermtest.NewCert("*.example.com"), tlstermtest.NewCert("catch-all"), tlstermtest.NewCert("default")
	tb := table(t,
		entry("a", "wild", "wild-tls", "*.example.com"),
		entry("a", "all", "all-tls", "*"),
		entry("b", "shop", "", "shop.example.com"),             // no spec.tls
		entry("b", "broken", "broken-tls", "cart.example.com"), // Secret not loaded
		entry("b", "plain", "", "plain.test"),
	)
	for _, withDef := range []bool{false, true} {
		store := tlsterm.NewStore("httpscale-system/default-tls")
		store.SetTable(tb)
		load(t, store, "a/wild-tls", wild)
		load(t, store, "a/all-tls", all)
		if withDef {
			load(t, store, "httpscale-system/default-tls", def)
		}
		addr := serve(t, store)
		for _, sni := range []string{"shop.example.com", "cart.example.com", "plain.test"} {
			got, err := handshake(addr, sni)
			switch {
			case withDef && (err != nil || got != def.Serial.String()):
				t.Errorf("%s with a default: got %s, %v; want the default certificate", sni, got, err)
			case !withDef && err == nil:
				t.Errorf("%s: handshake succeeded with certificate %s of another namespace", sni, got)
			}
		}
		if got, err := handshake(addr, "api.example.com"); err != nil || got != wild.Serial.String() {
			t.Errorf("a's own name: got %s, %v; want a's wildcard", got, err)
		}
		if got, err := handshake(addr, "nobody.test"); err != nil || got != all.Serial.String() {
			t.Errorf("a name nobody routes: got %s, %v; want the catch-all's", got, err)
		}
	}
}

func TestALPN(t *testing.T) {
	c := tlstermtest.NewCert("shop.example.com")
	store := tlsterm.NewStore("")
	store.SetTable(table(t, entry("a", "shop", "shop-tls", "shop.example.com")))
	load(t, store, "a/shop-tls", c)
	addr := serve(t, store)
	for _, tc := range []struct {
		name   string
		protos http.Protocols
		want   string
	}{
		{name: "h2", want: "HTTP/2.0 shop.example.com tls=true"},
		{name: "http/1.1", want: "HTTP/1.1 shop.example.com tls=true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p http.Protocols
			cfg := &tls.Config{RootCAs: c.Pool, ServerName: "shop.example.com"}
			if tc.name == "h2" {
				p.SetHTTP2(true)
			} else {
				p.SetHTTP1(true)
				cfg.NextProtos = []string{"http/1.1"} // Go's HTTP/1-only client offers no ALPN by itself
			}
			tr := &http.Transport{TLSClientConfig: cfg, Protocols: &p}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
			req.Host = "shop.example.com"
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if string(body) != tc.want {
				t.Fatalf("got %q, want %q", body, tc.want)
			}
			if want := tc.name; resp.TLS.NegotiatedProtocol != want {
				t.Fatalf("ALPN negotiated %q, want %q", resp.TLS.NegotiatedProtocol, want)
			}
		})
	}
}
