// Command proxy runs the interceptor's request path (pkg/proxy) outside Kubernetes for loopback
// benchmarks: a static routing table, endpoints set over a control port, and the real admin handler.
//
// Routes: host "cold.bench" is the app "bench/cold" (Service "cold"), which starts with no endpoint;
// every other host is "bench/warm" (Service "warm"), forwarded to -backend. On the admin address,
// POST /control/ready gives "cold" the -cold-backend endpoint and POST /control/cold takes it away.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/hack/bench/internal/benchproxy"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:18081", "proxy listen address")
	adminAddr := flag.String("admin", "127.0.0.1:19091", "admin and control listen address")
	common := benchproxy.AddFlags()
	coldBackend := flag.String("cold-backend", "", "host:port the cold app gets on /control/ready (default: -backend)")
	queueLimit := flag.Int("queue-limit", 20000, "hold queue limit")
	fast := flag.Bool("fast-http1", true, "serve HTTP/1.1 on the event loops (false: net/http serves everything)")
	loops := flag.Int("event-loops", -1, "event loops serving HTTP/1.1 (0: none, net/http serves everything; -1: one per GOMAXPROCS)")
	flag.Parse()

	ep := common.Apply()
	coldEP := ep
	if *coldBackend != "" {
		coldEP = benchproxy.Endpoint(*coldBackend)
	}
	table, err := routing.NewTable([]routing.Entry{
		{Namespace: "bench", Name: "warm", Hosts: []string{"*"}, Service: "warm", Port: 80},
		{Namespace: "bench", Name: "cold", Hosts: []string{"cold.bench"}, Service: "cold", Port: 80,
			Timeouts: routing.Timeouts{Readiness: 5 * time.Minute}},
	})
	if err != nil {
		log.Fatal(err)
	}
	src := proxytest.NewSource()
	warm := endpoints.ServiceKey{Namespace: "bench", Service: "warm"}
	cold := endpoints.ServiceKey{Namespace: "bench", Service: "cold"}
	src.Set(warm, ep)

	reg := queue.NewRegistry(nil)
	px := benchproxy.NewProxy(table, src, reg, *queueLimit)

	mux := http.NewServeMux()
	mux.Handle("/", admin.NewHandler(admin.HandlerOptions{Counts: reg, Wake: reg}))
	mux.HandleFunc("POST /control/ready", func(w http.ResponseWriter, _ *http.Request) { src.Set(cold, coldEP) })
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("POST /control/cold", func(w http.ResponseWriter, _ *http.Request) { src.Set(cold) })
	go func() { log.Fatal(http.ListenAndServe(*adminAddr, mux)) }()

	srv := &proxy.Server{Name: "proxy", Addr: *listen, Engine: px.Engine(), H2C: true, FastHTTP1: *fast, EventLoops: *loops, DrainTimeout: 5 * time.Second,
		WaitIdle: px.WaitUpgrades, Log: logr.Discard()}
	benchproxy.Serve(srv)
}
