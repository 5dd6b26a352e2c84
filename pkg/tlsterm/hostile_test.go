package tlsterm_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/httpscale/httpscale/pkg/tlsterm"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

// Clients that do not play by the rules, on real sockets: each must fail alone, clearly, and never be
// answered by an app it did not ask for.

// counted is a handler that answers with what it saw and counts its calls.
type counted struct{ calls atomic.Int64 }

func (c *counted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.calls.Add(1)
	fmt.Fprintf(w, "%s %s", r.Proto, r.Host)
}

// serveHandler starts a Server for store with handler h and the given header (and handshake) timeout
// (0: the default), and returns its address.
func serveHandler(t *testing.T, store *tlsterm.Store, h http.Handler, headerTimeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := &tlsterm.Server{Addr: "127.0.0.1:0", Store: store, Handler: h, ReadHeaderTimeout: headerTimeout,
		DrainTimeout: 5 * time.Second, Drained: make(chan struct{}), Log: testr.New(t)}
	go func() { _ = srv.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-srv.Drained })
	deadline := time.Now().Add(5 * time.Second)
	for srv.ListenAddr() == "" {
		if time.Now().After(deadline) {
			t.Fatal("TLS server did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return srv.ListenAddr()
}

// clientHello returns the bytes of the ClientHello a Go client sends for server name sni.
func clientHello(t *testing.T, sni string) []byte {
	t.Helper()
	c1, c2 := net.Pipe()
	defer c2.Close()
	go func() {
		defer c1.Close()
		_ = tls.Client(c1, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake() //nolint:gosec // only its first flight is used
	}()
	buf := make([]byte, 64<<10)
	_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c2.Read(buf)
	if err != nil {
		t.Fatalf("capturing a ClientHello: %v", err)
	}
	return buf[:n]
}

// oneApp is a store serving shop.example.com with its own certificate.
func oneApp(t *testing.T) (*tlsterm.Store, tlstermtest.Cert) {
	t.Helper()
	c := tlstermtest.NewCert("shop.example.com")
	store := tlsterm.NewStore("")
	store.SetTable(table(t, entry("a", "shop", "shop-tls", "shop.example.com")))
	load(t, store, "a/shop-tls", c)
	return store, c
}

// get sends GET / for host over a new connection with server name sni, trusting roots, and returns
// the status and body.
func get(t *testing.T, addr, sni, host string, c tlstermtest.Cert, h2 bool) (int, string, error) {
	t.Helper()
	tr := transport(addr, sni, c, h2)
	defer tr.CloseIdleConnections()
	return do(tr, addr, host)
}

func transport(addr, sni string, c tlstermtest.Cert, h2 bool) *http.Transport {
	var p http.Protocols
	cfg := &tls.Config{ServerName: sni, RootCAs: c.Pool}
	if sni == "" {
		cfg = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // a client dialling an address, no name to verify
	}
	if h2 {
		p.SetHTTP2(true)
	} else {
		p.SetHTTP1(true)
		cfg.NextProtos = []string{"http/1.1"}
	}
	return &http.Transport{TLSClientConfig: cfg, Protocols: &p, DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return netDialer.DialContext(ctx, network, addr)
	}}
}

func do(tr *http.Transport, addr, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+"/", nil)
	if err != nil {
		return 0, "", err
	}
	req.Host = host
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// A client that stalls its handshake (connects and sends nothing, sends half a ClientHello, or sends
// a whole one and never its Finished) is disconnected once the handshake timeout passes, and other
// clients are served meanwhile.
func TestStalledHandshakeIsCut(t *testing.T) {
	store, c := oneApp(t)
	h := &counted{}
	const timeout = 2 * time.Second
	addr := serveHandler(t, store, h, timeout)
	hello := clientHello(t, "shop.example.com")

	type stalled struct {
		name string
		send []byte
	}
	var cases []stalled
	for i := range 8 {
		cases = append(cases, stalled{fmt.Sprintf("whole ClientHello #%d", i), hello},
			stalled{fmt.Sprintf("half a ClientHello #%d", i), hello[:len(hello)/2]},
			stalled{fmt.Sprintf("nothing #%d", i), nil})
	}
	type result struct {
		name     string
		received int
		closed   time.Duration
		err      error
	}
	results := make(chan result, len(cases))
	stallStart := time.Now()
	for _, sc := range cases {
		conn, err := netDialer.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		if _, err := conn.Write(sc.send); err != nil {
			t.Fatal(err)
		}
		go func() {
			_ = conn.SetReadDeadline(time.Now().Add(timeout + 10*time.Second))
			n, err := io.Copy(io.Discard, conn) // returns when the server closes the connection
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = fmt.Errorf("still open %s after the handshake timeout", 10*time.Second)
			} else {
				err = nil // EOF or reset: closed by the server
			}
			results <- result{sc.name, int(n), time.Since(start), err}
		}()
	}

	// While they stall, other clients complete handshakes and requests: all of them before the
	// stalled connections are cut.
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i := range 5 {
		wg.Go(func() {
			code, body, err := get(t, addr, "shop.example.com", "shop.example.com", c, i%2 == 0)
			if err != nil || code != http.StatusOK || body == "" {
				errs <- fmt.Errorf("a well-behaved client while %d others stall: %d %q %v", len(cases), code, body, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if d := time.Since(stallStart); d >= timeout {
		t.Fatalf("the well-behaved clients were served only after %s, when the stalled ones were being cut", d)
	}

	for range cases {
		r := <-results
		if r.err != nil {
			t.Errorf("%s: %v", r.name, r.err)
			continue
		}
		if r.closed < timeout/2 || r.closed > timeout+3*time.Second {
			t.Errorf("%s: closed after %s, want about the handshake timeout %s", r.name, r.closed, timeout)
		}
		if strings.HasPrefix(r.name, "whole") && r.received == 0 {
			t.Errorf("%s: the server sent nothing back; the test meant to stall in the middle of the handshake", r.name)
		}
	}
	if n := h.calls.Load(); n != 5 {
		t.Fatalf("handler called %d times, want 5 (the well-behaved clients only)", n)
	}
}

// A server name no certificate serves, without a default certificate, fails the handshake with
// unrecognized_name; nothing reaches the handler and the port keeps serving.
func TestUnknownServerNameFailsHandshake(t *testing.T) {
	store, c := oneApp(t)
	h := &counted{}
	addr := serveHandler(t, store, h, 0)
	for _, sni := range []string{"unknown.example.com", ""} {
		conn, err := tls.DialWithDialer(&netDialer, "tcp", addr, &tls.Config{ServerName: sni, InsecureSkipVerify: true}) //nolint:gosec // any certificate would be wrong
		if err == nil {
			conn.Close()
			t.Fatalf("SNI %q: handshake succeeded with certificate %s", sni, conn.ConnectionState().PeerCertificates[0].Subject)
		}
		if !strings.Contains(err.Error(), "unrecognized name") {
			t.Errorf("SNI %q: handshake failed with %q, want the unrecognized_name alert", sni, err)
		}
	}
	if code, body, err := get(t, addr, "shop.example.com", "shop.example.com", c, true); err != nil || code != http.StatusOK || body != "HTTP/2.0 shop.example.com" {
		t.Fatalf("the app's own name afterwards: %d %q %v", code, body, err)
	}
	if n := h.calls.Load(); n != 1 {
		t.Fatalf("handler called %d times, want once", n)
	}
}

// The certificate a connection presented was chosen by its server name; a request on it for a host
// another certificate serves is answered 421 Misdirected Request (the client retries it on its own
// connection), over HTTP/1.1 and HTTP/2 alike. Hosts that share the connection's certificate (a
// wildcard several apps use, which HTTP/2 clients coalesce onto one connection) and clients that
// sent no server name are served.
func TestMisdirectedRequest(t *testing.T) {
	shop, cart, wild, def := tlstermtest.NewCert("shop.example.com"), tlstermtest.NewCert("cart.example.com"),
		tlstermtest.NewCert("*.shared.test"), tlstermtest.NewCert("default.test")
	store := tlsterm.NewStore("httpscale-system/default-tls")
	store.SetTable(table(t,
		entry("a", "shop", "shop-tls", "shop.example.com"),
		entry("b", "cart", "cart-tls", "cart.example.com"),
		entry("c", "one", "wild-tls", "one.shared.test"),
		entry("c", "two", "wild-tls", "two.shared.test"),
	))
	load(t, store, "a/shop-tls", shop)
	load(t, store, "b/cart-tls", cart)
	load(t, store, "c/wild-tls", wild)
	load(t, store, "httpscale-system/default-tls", def)
	h := &counted{}
	addr := serveHandler(t, store, h, 0)
	for _, h2 := range []bool{false, true} {
		proto := map[bool]string{false: "HTTP/1.1", true: "HTTP/2.0"}[h2]
		for _, tc := range []struct {
			name      string
			sni, host string
			cert      tlstermtest.Cert
			want      int
		}{
			{"same name", "shop.example.com", "shop.example.com", shop, http.StatusOK},
			{"same name, another case and a port", "shop.example.com", "SHOP.example.com:8443", shop, http.StatusOK},
			{"another app's host", "shop.example.com", "cart.example.com", shop, http.StatusMisdirectedRequest},
			{"a host no app serves", "shop.example.com", "nowhere.test", shop, http.StatusMisdirectedRequest},
			{"a host sharing the connection's certificate", "one.shared.test", "two.shared.test", wild, http.StatusOK},
			{"the default certificate's connection, an app's host", "default.test", "cart.example.com", def, http.StatusMisdirectedRequest},
			{"no server name: the host decides, as on the cleartext port", "", "cart.example.com", def, http.StatusOK},
		} {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				before := h.calls.Load()
				code, body, err := get(t, addr, tc.sni, tc.host, tc.cert, h2)
				if err != nil {
					t.Fatal(err)
				}
				if code != tc.want {
					t.Fatalf("SNI %q Host %q: %d %q, want %d", tc.sni, tc.host, code, body, tc.want)
				}
				called := h.calls.Load() - before
				switch {
				case code == http.StatusOK && (called != 1 || body != proto+" "+tc.host):
					t.Fatalf("served: handler called %d times, body %q", called, body)
				case code == http.StatusMisdirectedRequest && (called != 0 || !strings.Contains(body, "Misdirected Request") || !strings.Contains(body, tc.host)):
					t.Fatalf("misdirected: handler called %d times, body %q", called, body)
				}
			})
		}
	}

	// One HTTP/2 connection: a misdirected request leaves the connection usable.
	tr := transport(addr, "shop.example.com", shop, true)
	defer tr.CloseIdleConnections()
	for i, tc := range []struct {
		host string
		want int
	}{{"shop.example.com", 200}, {"cart.example.com", 421}, {"shop.example.com", 200}} {
		if code, body, err := do(tr, addr, tc.host); err != nil || code != tc.want {
			t.Fatalf("request %d on one HTTP/2 connection, Host %s: %d %q %v, want %d", i, tc.host, code, body, err, tc.want)
		}
	}
}

// Plain HTTP sent to the TLS port gets a clear 400 and a close, and reaches no app.
func TestPlaintextOnTLSPort(t *testing.T) {
	store, _ := oneApp(t)
	h := &counted{}
	addr := serveHandler(t, store, h, 0)
	conn, err := netDialer.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: shop.example.com\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTP request to an HTTPS server") || !resp.Close {
		t.Fatalf("plain HTTP on the TLS port: %d %q close=%v, want 400 saying so and a close", resp.StatusCode, body, resp.Close)
	}
	if n := h.calls.Load(); n != 0 {
		t.Fatalf("handler called %d times", n)
	}
}

// A Secret rotated while connections are open: the open connections keep the certificate they
// were shown and keep serving (TLS has no way to change it mid-connection), new handshakes get the
// new certificate at once.
func TestRotationWithOpenConnections(t *testing.T) {
	store, old := oneApp(t)
	addr := serveHandler(t, store, &counted{}, 0)
	rotated := tlstermtest.NewCert("shop.example.com")
	type conn struct {
		tr   *http.Transport
		seen sync.Map // serials presented, by the client's VerifyConnection
	}
	open := func(h2 bool) *conn {
		c := &conn{tr: transport(addr, "shop.example.com", old, h2)}
		c.tr.TLSClientConfig.RootCAs.AddCert(mustParse(t, rotated))
		c.tr.TLSClientConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			c.seen.Store(cs.PeerCertificates[0].SerialNumber.String(), true)
			return nil
		}
		t.Cleanup(c.tr.CloseIdleConnections)
		return c
	}
	h1, h2 := open(false), open(true)
	for _, c := range []*conn{h1, h2} {
		if code, _, err := do(c.tr, addr, "shop.example.com"); err != nil || code != http.StatusOK {
			t.Fatalf("before the rotation: %d %v", code, err)
		}
	}
	load(t, store, "a/shop-tls", rotated)
	if got, err := handshake(addr, "shop.example.com"); err != nil || got != rotated.Serial.String() {
		t.Fatalf("a new handshake after the rotation: certificate %s, %v; want the new one %s", got, err, rotated.Serial)
	}
	for name, c := range map[string]*conn{"HTTP/1.1": h1, "HTTP/2": h2} {
		for range 3 {
			if code, _, err := do(c.tr, addr, "shop.example.com"); err != nil || code != http.StatusOK {
				t.Fatalf("%s keep-alive connection after the rotation: %d %v", name, code, err)
			}
		}
		var serials []string
		c.seen.Range(func(k, _ any) bool { serials = append(serials, k.(string)); return true })
		if len(serials) != 1 || serials[0] != old.Serial.String() {
			t.Fatalf("%s: handshakes saw %v, want only the one before the rotation (%s): the open connection was reused", name, serials, old.Serial)
		}
	}
}

func mustParse(t *testing.T, c tlstermtest.Cert) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(c.CertPEM)
	if b == nil {
		t.Fatal("no PEM block")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// A request with both Content-Length and Transfer-Encoding is answered with the connection closed,
// on the TLS port as on the cleartext one (RFC 9112 section 6.1): the bytes after it could be a
// request smuggled past a front proxy that framed it by its Content-Length. Whichever request of
// the connection it is, and with bare LF line ends too; a plain POST after it, on a new
// connection, keeps its connection.
func TestBothLengthsCloseTheConnection(t *testing.T) {
	store, _ := oneApp(t)
	var bodies []string
	var mu sync.Mutex
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	})
	addr := serveHandler(t, store, h, 0)
	both := "POST /both HTTP/1.1\r\nHost: shop.example.com\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
	bothLF := "POST /both HTTP/1.1\nHost: shop.example.com\nTransfer-Encoding: chunked\ncontent-length: 5\n\n2\r\nhi\r\n0\r\n\r\n"
	plain := "POST /plain HTTP/1.1\r\nHost: shop.example.com\r\nContent-Length: 2\r\n\r\nhi"
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: shop.example.com\r\n\r\n"
	for _, tc := range []struct {
		name  string
		first []string
		both  string
	}{
		{"first request", nil, both},
		{"first request, bare LF", nil, bothLF},
		{"after a POST", []string{plain}, both},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			bodies = nil
			mu.Unlock()
			dial := func() (*tls.Conn, *bufio.Reader) {
				c, err := tls.DialWithDialer(&netDialer, "tcp", addr, &tls.Config{ServerName: "shop.example.com", InsecureSkipVerify: true, NextProtos: []string{"http/1.1"}}) //nolint:gosec // not the point here
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Close() })
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				return c, bufio.NewReader(c)
			}
			do := func(c *tls.Conn, br *bufio.Reader, req string) (*http.Response, string, error) {
				if _, err := io.WriteString(c, req); err != nil {
					return nil, "", err
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return nil, "", err
				}
				b, err := io.ReadAll(resp.Body)
				return resp, string(b), err
			}
			c, br := dial()
			for _, req := range tc.first {
				if resp, body, err := do(c, br, req); err != nil || resp.StatusCode != http.StatusOK || body != "ok" || resp.Close {
					t.Fatalf("%.20q: %v %v, want 200 keeping the connection", req, resp, err)
				}
			}
			// The request with both lengths, and a request after it in the same write.
			resp, body, err := do(c, br, tc.both+smuggled)
			if err != nil || resp.StatusCode != http.StatusOK || body != "ok" || !resp.Close {
				t.Fatalf("POST with both: %v %q %v, want 200 %q with Connection: close", resp, body, err, "ok")
			}
			if resp, err := http.ReadResponse(br, nil); err == nil {
				t.Fatalf("the request after it was answered (%d): the connection stayed open", resp.StatusCode)
			}
			c, br = dial()
			if resp, body, err := do(c, br, plain); err != nil || resp.StatusCode != http.StatusOK || body != "ok" || resp.Close {
				t.Errorf("plain POST on a new connection: %v %q %v, want 200 keeping the connection", resp, body, err)
			}
			mu.Lock()
			defer mu.Unlock()
			want := len(tc.first) + 2
			if len(bodies) != want {
				t.Errorf("the handler got %d requests (%q), want %d: none after the one with both lengths", len(bodies), bodies, want)
			}
		})
	}
}
