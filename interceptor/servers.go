package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/coldstart"
	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/sessioncookie"
	"github.com/httpscale/httpscale/pkg/tlsterm"
	"github.com/httpscale/httpscale/pkg/tracing"
	"github.com/httpscale/httpscale/pkg/version"
)

// dialFunc dials upstream connections (net.Dialer.DialContext's signature).
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// adminDrainTimeout bounds the admin server's own shutdown, which starts once the proxy drained.
const adminDrainTimeout = 5 * time.Second

// setupServers adds the proxy server and the admin server to mgr, and the manager's readiness check
// mirrors the admin port's.
func setupServers(mgr manager.Manager, cfg *config.Interceptor, kube kubeParts, metricsReg *prometheus.Registry, dial dialFunc, log logr.Logger) error {
	srv, err := newServers(cfg, kube, metricsReg, dial, log)
	if err != nil {
		return err
	}
	for _, r := range srv.runnables {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("adding server: %w", err)
		}
	}
	if err := mgr.AddReadyzCheck("proxy", func(*http.Request) error { return srv.ready() }); err != nil {
		return fmt.Errorf("adding readiness check: %w", err)
	}
	return nil
}

// servers are the proxy and admin servers and the readiness they report.
type servers struct {
	runnables []manager.Runnable
	ready     func() error
}

// newServers builds the proxy server and the admin server. On shutdown the proxy drains
// first (readiness fails at once, then DrainDelay, then up to DrainTimeout for in-flight and held
// requests and WebSockets); the admin server keeps answering probes, counts and wake streams until
// the proxy has drained.
//
// dial replaces the proxy's upstream dialer when non-nil. The binary passes nil; the integration test
// maps pod IPs (which EndpointSlices require to be outside 127.0.0.0/8) to loopback backends with it,
// so that run is tested as the binary runs it, against a real API server.
func newServers(cfg *config.Interceptor, kube kubeParts, metricsReg *prometheus.Registry, dial dialFunc, log logr.Logger) (servers, error) {
	reg := queue.NewRegistry(nil)
	metrics, err := proxy.NewMetrics(metricsReg, reg, proxy.PerApp(cfg.PerAppMetrics))
	if err != nil {
		return servers{}, fmt.Errorf("registering proxy metrics: %w", err)
	}
	pool := queue.NewPool(queue.PoolLimits{MaxRequests: int64(cfg.MaxHeldRequests), MaxBytes: cfg.MaxHeldBytes})
	if err := proxy.RegisterPoolMetrics(metricsReg, pool); err != nil {
		return servers{}, fmt.Errorf("registering held-request pool metrics: %w", err)
	}
	drained := make(chan struct{})
	// Tracing (off unless the OTEL_* environment sets an OTLP endpoint) flushes after the drain,
	// whose requests end spans too.
	tp, err := tracing.New(context.Background(), tracing.Options{
		ServiceName: "httpscale-interceptor", ServiceVersion: version.Version,
		After: drained, Log: log.WithName("tracing"),
	})
	if err != nil {
		return servers{}, err
	}
	var sessionKeys func() *sessioncookie.Keys
	var keysFile manager.Runnable
	if cfg.SessionKeysFile != "" {
		src := sessioncookie.NewFileSource(cfg.SessionKeysFile, 0, log.WithName("session"))
		sessionKeys, keysFile = src.Keys, src
	} else {
		log.Info("no --session-keys-file: session cookies are signed with a random key of this replica, which other replicas do not accept")
	}
	trusted, err := proxy.ParseTrustedProxies(cfg.TrustedProxies)
	if err != nil {
		return servers{}, fmt.Errorf("--trusted-proxies: %w", err)
	}
	coldStarts, err := newColdStarts(cfg, kube, metricsReg, dial, log)
	if err != nil {
		return servers{}, err
	}
	p, err := proxy.New(proxy.Options{
		Tracer:                tp.Tracer("github.com/httpscale/httpscale/pkg/proxy"),
		SessionKeys:           sessionKeys,
		ColdStarts:            coldStarts,
		Tables:                kube.tables,
		Endpoints:             kube.endpoints,
		Registry:              reg,
		Metrics:               metrics,
		Log:                   log.WithName("proxy"),
		Zone:                  kube.zone,
		ZoneAware:             cfg.ZoneAware,
		ReadinessTimeout:      cfg.ReadinessTimeout,
		RequestTimeout:        cfg.RequestTimeout,
		ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
		QueueLimit:            cfg.QueueLimit,
		MaxQueueLimit:         cfg.MaxQueueLimit,
		MaxReadinessTimeout:   cfg.MaxReadinessTimeout,
		MaxRequestTimeout:     cfg.MaxRequestTimeout,
		Pool:                  pool,
		RetryAfter:            cfg.RetryAfter,
		DialTimeout:           cfg.DialTimeout,
		DeadPeerTimeout:       cmp.Or(cfg.UpstreamDeadPeerTimeout, -1), // 0 turns it off
		MaxConnsPerEndpoint:   cfg.MaxConnsPerEndpoint,
		MaxWaitingPerEndpoint: cfg.MaxWaitingPerEndpoint,
		ClusterDomain:         cfg.ClusterDomain,
		TrustedProxies:        trusted,
		DialContext:           dial,
	})
	if err != nil {
		return servers{}, err
	}
	if kube.onTableChange != nil {
		kube.onTableChange(p.TableChanged)
	}
	proxySrv := &proxy.Server{
		Name:                   "proxy",
		Addr:                   cfg.ProxyAddr,
		Engine:                 p.Engine(),
		H2C:                    true,
		FastHTTP1:              cfg.HTTP1FastPath,
		EventLoops:             cfg.EventLoops,
		MaxHeaderBytes:         int(cfg.MaxHeaderBytes),
		MaxArrivingHeaderBytes: cfg.MaxArrivingHeaderBytes,
		DrainDelay:             cfg.DrainDelay,
		DrainTimeout:           cfg.DrainTimeout,
		WaitIdle:               p.WaitUpgrades,
		Drained:                make(chan struct{}),
		Log:                    log.WithName("proxy"),
	}
	runnables := []manager.Runnable{afterFirstTable{Runnable: proxySrv, tables: kube.tables}}
	if keysFile != nil {
		runnables = append(runnables, keysFile)
	}
	var tlsSrv *tlsterm.Server
	if cfg.TLSAddr != "" {
		if kube.certs == nil {
			return servers{}, fmt.Errorf("--tls-bind-address needs Kubernetes: certificates come from Secrets")
		}
		tlsSrv = &tlsterm.Server{
			Addr:           cfg.TLSAddr,
			Store:          kube.certs,
			Handler:        p.Engine(),
			MaxHeaderBytes: int(cfg.MaxHeaderBytes),
			DrainDelay:     cfg.DrainDelay,
			DrainTimeout:   cfg.DrainTimeout,
			WaitIdle:       p.WaitUpgrades,
			Drained:        make(chan struct{}),
			Log:            log.WithName("tls"),
		}
		runnables = append(runnables, afterFirstTable{Runnable: tlsSrv, tables: kube.tables})
	}
	// Serve mode: a listener per app Serve port the routing table names (serveports.go).
	var serve *servePorts
	if kube.onTableChange != nil {
		host, _, _ := net.SplitHostPort(cfg.ProxyAddr) // Validate checked it
		serve = newServePorts(servePortsConfig{Host: host, Proxy: p, FastHTTP1: cfg.HTTP1FastPath,
			DrainDelay: cfg.DrainDelay, DrainTimeout: cfg.DrainTimeout, Log: log.WithName("serve-ports")})
		kube.onTableChange(serve.TableChanged)
		runnables = append(runnables, serve)
	}
	// The admin port answers, and tracing waits to flush, until every proxy port has drained.
	go func() {
		<-proxySrv.Drained
		if tlsSrv != nil {
			<-tlsSrv.Drained
		}
		if serve != nil {
			<-serve.Drained
		}
		close(drained)
	}()
	// The table's and the watches' reasons come first: until the first table the proxy ports are
	// not listening either, and "no table yet" is what the operator needs to read.
	ready := func() error {
		if kube.ready != nil {
			if err := kube.ready(); err != nil {
				return err
			}
		}
		if err := proxySrv.Ready(); err != nil {
			return err
		}
		if tlsSrv != nil {
			return tlsSrv.Ready()
		}
		return nil
	}
	stopStreams := make(chan struct{})
	var adminHandler http.Handler = admin.NewHandler(admin.HandlerOptions{
		Status: func() admin.Status {
			t := kube.tables.Table()
			epoch, seq := coldStarts.Seq()
			return admin.Status{TableVersion: t.Version(), TableEntries: t.Len(), Draining: proxySrv.Draining(),
				ColdStartEpoch: epoch, ColdStartSeq: seq}
		},
		Counts:     reg,
		Wake:       reg,
		ColdStarts: coldStarts,
		Ready:      ready,
		Metrics:    promhttp.HandlerFor(metricsReg, promhttp.HandlerOpts{}),
		Stop:       stopStreams,
	})
	if kube.adminAuth != nil {
		adminHandler = kube.adminAuth.Wrap(adminHandler)
	}
	adminSrv := &proxy.Server{
		Name:         "admin",
		Addr:         cfg.AdminAddr,
		Handler:      adminHandler,
		After:        drained,
		OnShutdown:   func() { close(stopStreams) },
		DrainTimeout: adminDrainTimeout,
		Log:          log.WithName("admin"),
	}
	runnables = append(runnables, adminSrv)
	// The endpoint cache and the cold-start probes serve requests held during the drain.
	for _, r := range []manager.Runnable{kube.endpointWatch, coldStarts} {
		if r != nil {
			runnables = append(runnables, keepUntilDrained{
				Runnable: r, drained: drained, limit: cfg.DrainDelay + cfg.DrainTimeout + adminDrainTimeout,
			})
		}
	}
	if tp != nil {
		runnables = append(runnables, tp)
	}
	return servers{runnables: runnables, ready: ready}, nil
}

// afterFirstTable starts a proxy port once the first routing table is loaded. Before it, the port
// would answer every request 404: a replica whose container restarted in place (a crash, an OOM
// kill) gets connections from kube-proxy, which still lists its address as ready until the kubelet
// has seen the container die. Refused instead, nothing is sent and a client or load balancer can
// retry; readiness passes only once the table is loaded anyway.
type afterFirstTable struct {
	manager.Runnable
	tables proxy.TableSource
}

// NeedLeaderElection reports false: every replica serves.
func (afterFirstTable) NeedLeaderElection() bool { return false }

// Start waits for the first table (checked every 10 ms), then runs the port until ctx ends. A port
// whose context ends first is still started, so that it drains (at once) and says so.
func (a afterFirstTable) Start(ctx context.Context) error {
	for a.tables.Table() == nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	return a.Runnable.Start(ctx)
}

// newColdStarts returns the tracker of the replica's cold starts: it probes starting pods (unless
// --cold-start-max-probes is 0, or without Kubernetes) and records every cold start.
func newColdStarts(cfg *config.Interceptor, kube kubeParts, metricsReg *prometheus.Registry, dial dialFunc, log logr.Logger) (*coldstart.Tracker, error) {
	name, _ := os.Hostname() // the pod's name
	o := coldstart.Options{
		Endpoints:   kube.endpoints,
		Interval:    cfg.ColdStartProbeInterval,
		Timeout:     cfg.ColdStartProbeTimeout,
		MaxProbes:   cfg.ColdStartMaxProbes,
		Name:        name,
		AppLabel:    proxy.PerApp(cfg.PerAppMetrics) == proxy.PerAppHistograms, // a histogram per app and step only when asked
		DialContext: dial,
		Log:         log.WithName("coldstart"),
		Registerer:  metricsReg,
	}
	if cfg.ColdStartMaxProbes > 0 {
		o.Pods = kube.pods
	}
	t, err := coldstart.New(o)
	if err != nil {
		return nil, fmt.Errorf("creating the cold-start tracker: %w", err)
	}
	return t, nil
}

// keepUntilDrained runs the endpoint cache past the manager's stop until the proxy has drained (at
// most limit longer): a request held during the drain is forwarded when the app's first endpoint
// turns ready, which only the cache's watch can tell. Stopped with the other runnables, it would
// leave such requests waiting until the drain deadline cut them off (an interceptor rolled while it
// holds requests for an app that is still starting).
type keepUntilDrained struct {
	manager.Runnable
	drained <-chan struct{}
	limit   time.Duration
}

// NeedLeaderElection keeps it among the runnables stopped with the servers.
func (keepUntilDrained) NeedLeaderElection() bool { return false }

// Start runs the wrapped runnable with a context that ends once ctx has ended and the proxy drained.
func (k keepUntilDrained) Start(ctx context.Context) error {
	inner, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		<-ctx.Done()
		t := time.NewTimer(k.limit)
		defer t.Stop()
		select {
		case <-k.drained:
		case <-t.C:
		}
		cancel()
	}()
	return k.Runnable.Start(inner)
}
