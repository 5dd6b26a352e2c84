package main

import (
	"context"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
)

// servePortRetry is how often a Serve port that could not be opened is tried again.
const servePortRetry = 10 * time.Second

// servePorts keeps one listener per Serve port the routing table names (routing.Entry.ServePort):
// the port the operator points a Serve-mode app's own Service at while the app is at zero. Every
// request arriving on it is routed to that app alone (proxy.ServePortEngine), so traffic redirected
// from a Service reaches that Service's app whatever Host the client sent. Listeners follow the
// table: opened when an entry gets a port, drained and closed when it loses it. On shutdown each
// drains like the proxy port (readiness, DrainDelay, DrainTimeout); Drained is closed once all have.
type servePorts struct {
	servePortsConfig

	latest  chan *routing.Table // the newest table not yet applied (capacity 1)
	mu      sync.Mutex
	running map[int32]*portServer
	wg      sync.WaitGroup
}

// servePortsConfig configures servePorts.
type servePortsConfig struct {
	// Host is the address to bind (the proxy port's host; "" for every address).
	Host         string
	Proxy        *proxy.Proxy
	FastHTTP1    bool
	DrainDelay   time.Duration
	DrainTimeout time.Duration
	Log          logr.Logger
	// Listen opens a port (nil: net.Listen); tests map ports to free ones.
	Listen func(network, addr string) (net.Listener, error)
	// Drained is closed when every listener has stopped after shutdown.
	Drained chan struct{}
}

// portServer is one Serve port's listener.
type portServer struct {
	key    string
	srv    *proxy.Server
	cancel context.CancelFunc
}

func newServePorts(cfg servePortsConfig) *servePorts {
	s := &servePorts{servePortsConfig: cfg, latest: make(chan *routing.Table, 1), running: map[int32]*portServer{}}
	if s.Drained == nil {
		s.Drained = make(chan struct{})
	}
	if s.Listen == nil {
		s.Listen = net.Listen
	}
	return s
}

// TableChanged hands over a new table; it never blocks (only the newest table is kept).
func (s *servePorts) TableChanged(t *routing.Table) {
	for {
		select {
		case s.latest <- t:
			return
		default:
		}
		select {
		case <-s.latest:
		default:
		}
	}
}

// NeedLeaderElection reports false: every interceptor replica serves.
func (s *servePorts) NeedLeaderElection() bool { return false }

// Start applies tables until ctx ends, then waits for every listener to drain.
func (s *servePorts) Start(ctx context.Context) error {
	defer close(s.Drained)
	retry := time.NewTicker(servePortRetry)
	defer retry.Stop()
	var table *routing.Table
	for {
		select {
		case <-ctx.Done():
			s.wg.Wait() // each listener drains on ctx, as the proxy port does
			return nil
		case table = <-s.latest:
		case <-retry.C:
		}
		s.apply(ctx, table)
	}
}

// apply opens the ports table names and closes the others.
func (s *servePorts) apply(ctx context.Context, table *routing.Table) {
	want := map[int32]string{}
	if table != nil {
		for e := range table.All() {
			if e.ServePort > 0 {
				want[e.ServePort] = e.Key()
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for port, ps := range s.running {
		if want[port] != ps.key {
			ps.cancel() // drains: requests in flight finish, new connections are refused
			delete(s.running, port)
			s.Log.Info("closing Serve port", "port", port, "app", ps.key)
		}
	}
	for port, key := range want {
		if _, ok := s.running[port]; ok {
			continue
		}
		ln, err := s.Listen("tcp", net.JoinHostPort(s.Host, strconv.Itoa(int(port))))
		if err != nil {
			s.Log.Error(err, "opening Serve port; retrying", "port", port, "app", key, "retry", servePortRetry)
			continue
		}
		eng := s.Proxy.ServePortEngine(port, key)
		srv := &proxy.Server{
			Name: "serve-" + strconv.Itoa(int(port)), Listener: ln, Engine: eng, Handler: eng, H2C: true, FastHTTP1: s.FastHTTP1,
			DrainDelay: s.DrainDelay, DrainTimeout: s.DrainTimeout, WaitIdle: eng.WaitUpgrades, Log: s.Log.WithValues("port", port, "app", key),
		}
		pctx, cancel := context.WithCancel(ctx)
		s.running[port] = &portServer{key: key, srv: srv, cancel: cancel}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.Start(pctx); err != nil {
				s.Log.Error(err, "Serve port stopped", "port", port, "app", key)
			}
		}()
		s.Log.Info("serving Serve port", "port", port, "app", key)
	}
}

// Ports returns the ports served now and their apps.
func (s *servePorts) Ports() map[int32]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int32]string, len(s.running))
	for p, ps := range s.running {
		out[p] = ps.key
	}
	return out
}
