package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/tlsterm/tlstermtest"
)

// TestTLSAgainstAPIServer runs the interceptor with its TLS port against a real kube-apiserver: an
// app at zero is woken by requests over TLS (HTTP/1.1 and HTTP/2), which are held and answered once
// its EndpointSlice turns ready, exactly as over plain HTTP; the app's certificate comes from its
// Secret, the fleet default answers other names, and the cleartext port keeps working.
func TestTLSAgainstAPIServer(t *testing.T) {
	env, cfg := testenv.StartT(t)
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	for _, ns := range []string{installNS, "shop"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web, def := tlstermtest.NewCert("web.example.com"), tlstermtest.NewCert("fleet.example.net")
	for _, s := range []*corev1.Secret{web.Secret("shop", "web-tls"), def.Secret(installNS, "fleet-default")} {
		if _, err := cs.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "web answered %s %s proto=%s", r.Host, r.URL.Path, r.Header.Get("X-Forwarded-Proto"))
	}))
	defer backend.Close()
	const podAddr = "198.18.0.10:8080"
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != podAddr {
			return nil, fmt.Errorf("test dialer: no route to %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, backend.Listener.Addr().String())
	}
	writeTable(t, cs, []routing.Entry{
		{Namespace: "shop", Name: "web", Hosts: []string{"web.example.com"}, Service: "web", Port: 80, PortName: "http", TLSSecret: "web-tls"},
	})
	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, adminAddr, tlsAddr := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	startRun(t, []string{
		"--kubeconfig=" + kubeconfig, "--health-probe-bind-address=" + testenv.FreeAddr(t),
		"--proxy-bind-address=" + proxyAddr, "--admin-bind-address=" + adminAddr, "--tls-bind-address=" + tlsAddr,
		"--tls-default-secret=fleet-default",
		"--namespace=" + installNS, "--drain-delay=0", "--drain-timeout=5s", "--table-resync=2s",
	}, runOptions{dial: dial})

	client := func(h2 bool) *http.Client {
		var p http.Protocols
		c := &tls.Config{RootCAs: web.Pool}
		if h2 {
			p.SetHTTP2(true)
		} else {
			p.SetHTTP1(true)
			c.NextProtos = []string{"http/1.1"}
		}
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: c, Protocols: &p,
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, tlsAddr)
			}}}
	}
	type answer struct {
		resp *http.Response
		body string
		err  error
	}
	send := func(h2 bool, path string) <-chan answer {
		ch := make(chan answer, 1)
		go func() {
			resp, err := client(h2).Get("https://web.example.com" + path)
			if err != nil {
				ch <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			ch <- answer{resp: resp, body: string(b)}
		}()
		return ch
	}
	// The certificate is served once the Secret is loaded; the app itself is at zero.
	testenv.Eventually(t, 60*time.Second, "the TLS port presents web's certificate", func() bool {
		c, err := tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: "web.example.com", RootCAs: web.Pool})
		if err != nil {
			return false
		}
		c.Close()
		return true
	})

	h1, h2 := send(false, "/one"), send(true, "/two")
	testenv.Eventually(t, 10*time.Second, "both TLS requests are held and counted", func() bool {
		c := appCount(adminAddr, "shop/web")
		return c.Held == 2 && c.Requests == 2
	})
	select {
	case a := <-h1:
		t.Fatalf("request answered before the app had an endpoint: %+v", a)
	case a := <-h2:
		t.Fatalf("request answered before the app had an endpoint: %+v", a)
	case <-time.After(300 * time.Millisecond):
	}
	createSlice(t, cs, "shop", "web", "198.18.0.10", 8080, true)
	for _, tc := range []struct {
		ch    <-chan answer
		proto string
		want  string
	}{
		{h1, "HTTP/1.1", "web answered web.example.com /one proto=https"},
		{h2, "HTTP/2.0", "web answered web.example.com /two proto=https"},
	} {
		select {
		case a := <-tc.ch:
			if a.err != nil {
				t.Fatalf("held %s request: %v", tc.proto, a.err)
			}
			if a.resp.StatusCode != http.StatusOK || a.body != tc.want || a.resp.Header.Get(proxy.HeaderColdStart) != "true" || a.resp.Proto != tc.proto {
				t.Errorf("held %s request: %s %d %q cold=%q, want 200 %q with the cold-start header", tc.proto, a.resp.Proto, a.resp.StatusCode, a.body, a.resp.Header.Get(proxy.HeaderColdStart), tc.want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("held %s request not answered within 20s of its endpoint turning ready", tc.proto)
		}
	}

	// Other names get the fleet default certificate (and, not being routed, a 404).
	c, err := tls.Dial("tcp", tlsAddr, &tls.Config{ServerName: "fleet.example.net", RootCAs: def.Pool})
	if err != nil {
		t.Fatalf("handshake for a name no app serves: %v, want the default certificate", err)
	}
	c.Close()
	// The cleartext port is unchanged.
	if code, body, _ := get(proxyAddr, "web.example.com", "/plain"); code != http.StatusOK || body != "web answered web.example.com /plain proto=http" {
		t.Errorf("cleartext request: %d %q", code, body)
	}
}
