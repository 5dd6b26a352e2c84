// Package benchproxy holds what the loopback benchmark proxies (hack/bench/proxy and
// hack/bench/tlsproxy) share: the -backend and -gc-percent flags, a proxy over a static routing
// table, and running a server until SIGTERM or SIGINT. Its functions exit the program on an error:
// they are for benchmark mains only.
package benchproxy

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Flags are the flags every benchmark proxy takes.
type Flags struct {
	backend   *string
	gcPercent *int
}

// AddFlags registers -backend and -gc-percent on the command line; call it before flag.Parse.
func AddFlags() Flags {
	return Flags{
		backend:   flag.String("backend", "127.0.0.1:18090", "backend host:port"),
		gcPercent: flag.Int("gc-percent", 400, "GC target, as the interceptor's --gc-percent (GOGC wins)"),
	}
}

// Apply sets the GC target of -gc-percent unless GOGC is set, and returns -backend's endpoint.
// Call it after flag.Parse.
func (f Flags) Apply() endpoints.Endpoint {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(*f.gcPercent)
	}
	return Endpoint(*f.backend)
}

// Endpoint returns the endpoint of a host:port address.
func Endpoint(hostport string) endpoints.Endpoint {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		log.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return endpoints.Endpoint{IP: host, Port: int32(p)}
}

// NewProxy returns a proxy routing by table to the endpoints src has, counting in reg, with the
// given default hold-queue limit (0: the proxy's default) and no logs.
func NewProxy(table *routing.Table, src endpoints.Source, reg *queue.Registry, queueLimit int) *proxy.Proxy {
	px, err := proxy.New(proxy.Options{
		Tables: proxy.TableFunc(func() *routing.Table { return table }), Endpoints: src, Registry: reg,
		Log: logr.Discard(), QueueLimit: queueLimit,
	})
	if err != nil {
		log.Fatal(err)
	}
	return px
}

// Serve runs srv until SIGTERM or SIGINT, and returns once it drained.
func Serve(srv interface{ Start(context.Context) error }) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := srv.Start(ctx); err != nil {
		log.Fatal(err)
	}
}
