package proxy

import (
	"net/http"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
)

// engineOptions are the options of every engine serving this proxy's requests.
func (p *Proxy) engineOptions() engine.Options {
	return engine.Options{
		Log:                   p.opts.Log,
		DialContext:           p.opts.DialContext,
		DialTimeout:           p.opts.DialTimeout,
		DeadPeerTimeout:       p.opts.DeadPeerTimeout,
		MaxConnsPerEndpoint:   p.opts.MaxConnsPerEndpoint,
		MaxWaitingPerEndpoint: p.opts.MaxWaitingPerEndpoint,
		Now:                   p.opts.Now,
		Discarded:             p.opts.Metrics.discarded,
		TrustedProxies:        p.opts.TrustedProxies,
	}
}

// ServePortEngine returns an engine for the interceptor's listener on port, the Serve port of the
// app key (routing.Entry.ServePort): it routes every request to that app while its entry in the
// table served at the time names the port, among that app's routes only (routing.Entry.MatchPath),
// whatever the request's Host; otherwise nothing (404). The operator points only that app's own Service at the port, so traffic redirected
// from a Service reaches that Service's app and no other, whatever Host a client sends. Requests are
// counted, held and forwarded exactly as on the proxy port. The engine has its own upstream pools.
func (p *Proxy) ServePortEngine(port int32, key string) *engine.Engine {
	return engine.New(servePortLogic{p: p, port: port, key: key}, p.engineOptions())
}

// servePortLogic is the engine.Logic of a Serve port.
type servePortLogic struct {
	p    *Proxy
	port int32
	key  string
}

// Route implements engine.Logic: the app whose entry names the port, whatever host.
func (l servePortLogic) Route(_, path string, h engine.Header) engine.Exchange {
	rt := l.p.current()
	e, ok := rt.table.Lookup(l.key)
	if !ok || e.ServePort != l.port {
		return nil
	}
	r, ok := e.MatchPath(path, h)
	if !ok {
		return nil
	}
	return l.p.exchange(rt, r, path, h)
}

// Unrouted implements engine.Logic.
func (l servePortLogic) Unrouted(h http.Header) engine.Reply { return l.p.Unrouted(h) }
