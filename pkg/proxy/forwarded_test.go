package proxy_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/tlsterm"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

// forwarding is what a backend saw of the forwarding headers (every value of each).
type forwarding struct {
	For, Host, Proto, Port, RealIP, Forwarded []string
}

// forgedHeaders are what a client claiming to be a proxy sends: every forwarding header, some
// repeated, some in lower case (written as given on the cleartext port).
var forgedHeaders = []string{
	"X-Forwarded-For: 203.0.113.9", "x-forwarded-for: 198.51.100.1", "X-Forwarded-Host: evil.example",
	"X-Forwarded-Proto: gopher", "x-forwarded-port: 1234", "X-Real-IP: 203.0.113.9", "Forwarded: for=203.0.113.9;proto=https",
}

// TestForgedForwardingHeaders: a client that is not a trusted proxy forges X-Forwarded-For/-Host/
// -Proto (and -Port, X-Real-IP, Forwarded) on the cleartext port (event loops, and net/http when
// they are off) and on the TLS port (HTTP/1.1 and HTTP/2): the backend sees none of it, only the
// client's address, the Host and the scheme the interceptor served. The same client in the
// trusted ranges has its chain kept and appended and its host and scheme passed on.
func TestForgedForwardingHeaders(t *testing.T) {
	// A loopback backend answering with the forwarding headers it received.
	_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(forwarding{
			For: r.Header.Values("X-Forwarded-For"), Host: r.Header.Values("X-Forwarded-Host"),
			Proto: r.Header.Values("X-Forwarded-Proto"), Port: r.Header.Values("X-Forwarded-Port"),
			RealIP: r.Header.Values("X-Real-Ip"), Forwarded: r.Header.Values("Forwarded"),
		})
	})
	cert := tlstermtest.NewCert("app.example.com")
	for _, tc := range []struct {
		name    string
		trusted string // --trusted-proxies
		// want by the port's scheme
		clear, tls forwarding
	}{
		{
			name:  "default, nobody trusted",
			clear: forwarding{For: []string{"127.0.0.1"}, Host: []string{"app.example.com"}, Proto: []string{"http"}},
			tls:   forwarding{For: []string{"127.0.0.1"}, Host: []string{"app.example.com"}, Proto: []string{"https"}},
		},
		{
			name:    "client outside the trusted ranges",
			trusted: "10.0.0.0/8, ::1",
			clear:   forwarding{For: []string{"127.0.0.1"}, Host: []string{"app.example.com"}, Proto: []string{"http"}},
			tls:     forwarding{For: []string{"127.0.0.1"}, Host: []string{"app.example.com"}, Proto: []string{"https"}},
		},
		{
			name:    "trusted proxy",
			trusted: "10.0.0.0/8, 127.0.0.0/8",
			clear: forwarding{
				For: []string{"203.0.113.9, 198.51.100.1, 127.0.0.1"}, Host: []string{"evil.example"}, Proto: []string{"gopher"},
				Port: []string{"1234"}, RealIP: []string{"203.0.113.9"},
			},
			tls: forwarding{
				For: []string{"203.0.113.9, 198.51.100.1, 127.0.0.1"}, Host: []string{"evil.example"}, Proto: []string{"gopher"},
				Port: []string{"1234"}, RealIP: []string{"203.0.113.9"},
			},
		},
	} {
		for _, fast := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/fast=%v", tc.name, fast), func(t *testing.T) {
				trusted, err := proxy.ParseTrustedProxies(tc.trusted)
				if err != nil {
					t.Fatal(err)
				}
				h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, func(o *proxy.Options, s *proxy.Server) {
					o.TrustedProxies = trusted
					s.FastHTTP1 = fast
				})
				h.src.Set(key("app"), ep)

				// The cleartext port, as raw bytes: the event loops serve the head as written.
				c := h.dial(t, 10*time.Second)
				head := "GET /f HTTP/1.1\r\nHost: app.example.com\r\n" + strings.Join(forgedHeaders, "\r\n") + "\r\n\r\n"
				if _, err := io.WriteString(c, head); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(tc.clear, readForwarding(t, bufio.NewReader(c))); d != "" {
					t.Errorf("cleartext port: what the backend saw (-want +got):\n%s", d)
				}

				tlsAddr := serveTLS(t, h.proxy, cert)
				for _, h2 := range []bool{false, true} {
					req, _ := http.NewRequest(http.MethodGet, "https://app.example.com/f", nil)
					for _, f := range forgedHeaders {
						k, v, _ := strings.Cut(f, ": ")
						req.Header.Add(k, v)
					}
					resp, err := tlsClient(cert, tlsAddr, h2).Do(req)
					if err != nil {
						t.Fatalf("TLS (h2=%v): %v", h2, err)
					}
					if wantProto := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != wantProto {
						t.Errorf("TLS: answered over %s, want HTTP/%d", resp.Proto, wantProto)
					}
					if d := cmp.Diff(tc.tls, decodeForwarding(t, resp)); d != "" {
						t.Errorf("TLS port (h2=%v): what the backend saw (-want +got):\n%s", h2, d)
					}
				}
			})
		}
	}
}

func readForwarding(t *testing.T, r *bufio.Reader) forwarding {
	t.Helper()
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return decodeForwarding(t, resp)
}

func decodeForwarding(t *testing.T, resp *http.Response) forwarding {
	t.Helper()
	defer resp.Body.Close()
	var f forwarding
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d %q, want 200 from the backend", resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&f); err != nil {
		t.Fatalf("decoding the backend's answer: %v", err)
	}
	return f
}

// serveTLS runs a TLS port (pkg/tlsterm, as the interceptor's --tls-bind-address) in front of p's
// engine with cert for app.example.com, and returns its address.
func serveTLS(t *testing.T, p *proxy.Proxy, cert tlstermtest.Cert) string {
	t.Helper()
	store := tlsterm.NewStore("")
	tb, err := routing.NewTable([]routing.Entry{{Namespace: "ns", Name: "app", Hosts: []string{"app.example.com"}, Service: "app", Port: 80, TLSSecret: "app-tls"}})
	if err != nil {
		t.Fatal(err)
	}
	store.SetTable(tb)
	kc, err := tlsterm.ParseSecret(cert.Secret("ns", "app-tls"))
	if err != nil {
		t.Fatal(err)
	}
	store.SetCertificate("ns/app-tls", kc)
	ctx, cancel := context.WithCancel(context.Background())
	srv := &tlsterm.Server{Addr: "127.0.0.1:0", Store: store, Handler: p.Engine(), DrainTimeout: 5 * time.Second,
		Drained: make(chan struct{}), Log: testr.New(t)}
	go func() { _ = srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-srv.Drained })
	deadline := time.Now().Add(10 * time.Second)
	for srv.ListenAddr() == "" {
		if time.Now().After(deadline) {
			t.Fatal("TLS server did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return srv.ListenAddr()
}

// tlsClient is a client of the TLS port at addr trusting cert, speaking HTTP/2 or HTTP/1.1.
func tlsClient(cert tlstermtest.Cert, addr string, h2 bool) *http.Client {
	var p http.Protocols
	c := &tls.Config{RootCAs: cert.Pool}
	if h2 {
		p.SetHTTP2(true)
	} else {
		p.SetHTTP1(true)
		c.NextProtos = []string{"http/1.1"}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: c, Protocols: &p, DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}}
}
