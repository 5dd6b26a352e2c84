// Command tlsproxy runs the interceptor's TLS port (pkg/tlsterm in front of pkg/proxy) outside
// Kubernetes for loopback benchmarks: one app for every host, forwarded to -backend, whose
// certificate is read from PEM files instead of a Secret.
package main

import (
	"crypto/tls"
	"flag"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/httpscale/httpscale/hack/bench/internal/benchproxy"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/tlsterm"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18443", "TLS listen address")
	common := benchproxy.AddFlags()
	certFile := flag.String("cert", "", "PEM certificate chain")
	keyFile := flag.String("key", "", "PEM private key")
	noResume := flag.Bool("no-resumption", false, "turn TLS session resumption (tickets) off, so every handshake is a full one")
	flag.Parse()

	ep := common.Apply()
	crt, err := os.ReadFile(*certFile)
	if err != nil {
		log.Fatal(err)
	}
	key, err := os.ReadFile(*keyFile)
	if err != nil {
		log.Fatal(err)
	}
	// The same parsing as a Secret the interceptor watches.
	cert, err := tlsterm.ParseSecret(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: "bench-tls"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key}})
	if err != nil {
		log.Fatal(err)
	}
	table, err := routing.NewTable([]routing.Entry{{Namespace: "bench", Name: "warm", Hosts: []string{"*"}, Service: "warm", Port: 80, TLSSecret: "bench-tls"}})
	if err != nil {
		log.Fatal(err)
	}
	store := tlsterm.NewStore("")
	store.SetTable(table)
	store.SetCertificate("bench/bench-tls", cert)
	src := proxytest.NewSource()
	src.Set(endpoints.ServiceKey{Namespace: "bench", Service: "warm"}, ep)
	px := benchproxy.NewProxy(table, src, queue.NewRegistry(nil), 0)
	cfg := store.Config()
	cfg.SessionTicketsDisabled = *noResume
	// Count full and resumed handshakes, reported on exit, to show which kind a run measured.
	var full, resumed atomic.Int64
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if cs.DidResume {
			resumed.Add(1)
		} else {
			full.Add(1)
		}
		return nil
	}
	defer func() {
		log.Printf("tlsproxy %s: %d full handshakes, %d resumed", *listen, full.Load(), resumed.Load())
	}()
	srv := &tlsterm.Server{Addr: *listen, Store: store, Config: cfg, Handler: px.Engine(), DrainTimeout: 5 * time.Second, WaitIdle: px.WaitUpgrades, Log: logr.Discard()}
	benchproxy.Serve(srv)
}
