package engine

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// pool is the engine's one pool of upstream HTTP/1.1 connections, shared by the event loops and
// the net/http path: per address (a pod's, or a Service's), how many connections are open (idle,
// in use or being dialled), bounded by maxConns; the requests waiting for one, in FIFO order; and
// the idle connections of the net/http path. The event loops keep their idle connections in lists
// of their own, so that a request on a loop takes one without a lock, but count them here: a burst
// of released held requests reaches a freshly started pod over at most maxConns connections,
// whichever path serves them.
//
// A connection that comes free while requests wait goes to the first of them (grant): the
// connection itself when it can carry another request, else its slot, for the waiter to dial.
type pool struct {
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int           // idle connections of the net/http path kept per address
	maxConns    int           // connections open at once per address; 0 means no limit
	maxWaiting  int           // requests waiting for a connection per address; 0 means no limit
	idleTimeout time.Duration // idle connections older than this are closed
	now         func() time.Time
	discarded   DiscardCounters

	mu        sync.Mutex
	hosts     map[string]*hostPool
	lastSweep time.Time
	// waiting counts the waiters of every hostPool (changed under mu), so that hasWaiters, asked
	// whenever a loop pools a connection, takes no lock while nobody waits.
	waiting atomic.Int32
	// onWait, when set, runs (outside mu) when a request starts waiting for a connection to an
	// address: the event loops give their idle connections to it to the waiters.
	onWait atomic.Pointer[func(addr string)]
}

// hostPool is the connections of one address.
type hostPool struct {
	idle    []*upConn // the net/http path's
	open    int       // idle (here or on a loop) + in use + being dialled
	waiters []waiter
}

// waiter is a request waiting for a connection to an address. grant runs once, outside the pool's
// lock, with a connection that stays counted as open: one that can carry the request (h.fd or h.c
// set) or a slot to dial (neither).
type waiter interface {
	grant(h handed)
}

// handed is what a waiter gets: an idle socket an event loop gave up (fd, -1: none), an idle
// connection of the net/http path (c), or neither: a slot to dial.
type handed struct {
	addr string
	fd   int
	c    *upConn
}

func newPool(o Options) *pool {
	dialer := o.DialContext
	if dialer == nil {
		dialer = (&net.Dialer{Timeout: o.DialTimeout}).DialContext
	}
	deadPeer := cmp.Or(o.DeadPeerTimeout, DefaultDeadPeerTimeout)
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dialer(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := watchDeadPeer(nc, deadPeer); err != nil {
			_ = nc.Close()
			return nil, fmt.Errorf("connection to %s: %w", addr, err)
		}
		return nc, nil
	}
	return &pool{dial: dial, maxIdle: o.MaxConnsPerEndpoint, maxConns: o.MaxConnsPerEndpoint, maxWaiting: o.MaxWaitingPerEndpoint,
		idleTimeout: 90 * time.Second, now: o.Now, discarded: o.Discarded}
}

// hostLocked returns addr's pool, creating it; p.mu is held.
func (p *pool) hostLocked(addr string) *hostPool {
	hp := p.hosts[addr]
	if hp == nil {
		hp = &hostPool{}
		if p.hosts == nil {
			p.hosts = map[string]*hostPool{}
		}
		p.hosts[addr] = hp
	}
	return hp
}

// reserve counts a connection to addr its caller dials, when fewer than maxConns are open and no
// request waits for one; release gives the slot back.
func (p *pool) reserve(addr string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	hp := p.hostLocked(addr)
	if p.maxConns > 0 && hp.open >= p.maxConns || len(hp.waiters) > 0 {
		return false
	}
	hp.open++
	return true
}

// wait queues w for a connection to addr. The caller found none idle and reserve refused.
// It returns false, queuing nothing, when a slot came free since: the caller dials; and
// ErrUpstreamBusy, queuing nothing, when maxWaiting requests wait already.
func (p *pool) wait(addr string, w waiter) (bool, error) {
	p.mu.Lock()
	hp := p.hostLocked(addr)
	if p.maxConns <= 0 || hp.open < p.maxConns && len(hp.waiters) == 0 {
		hp.open++
		p.mu.Unlock()
		return false, nil
	}
	if p.maxWaiting > 0 && len(hp.waiters) >= p.maxWaiting {
		p.mu.Unlock()
		return false, ErrUpstreamBusy
	}
	hp.waiters = append(hp.waiters, w)
	p.waiting.Add(1)
	p.mu.Unlock()
	if f := p.onWait.Load(); f != nil {
		(*f)(addr)
	}
	return true, nil
}

// cancel takes w out of addr's line; false: it was granted something already (its grant runs or
// ran, and what it got must be passed on).
func (p *pool) cancel(addr string, w waiter) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	hp := p.hosts[addr]
	if hp == nil {
		return false
	}
	for i, x := range hp.waiters {
		if x == w {
			hp.waiters = append(hp.waiters[:i], hp.waiters[i+1:]...)
			p.waiting.Add(-1)
			return true
		}
	}
	return false
}

// popWaiterLocked takes the first request waiting for a connection to hp's address, nil when none
// does; p.mu is held.
func (p *pool) popWaiterLocked(hp *hostPool) waiter {
	if hp == nil || len(hp.waiters) == 0 {
		return nil
	}
	w := hp.waiters[0]
	hp.waiters[0] = nil
	hp.waiters = hp.waiters[1:]
	p.waiting.Add(-1)
	return w
}

// hasWaiters reports whether requests wait for a connection to addr.
func (p *pool) hasWaiters(addr string) bool {
	if p.waiting.Load() == 0 {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	hp := p.hosts[addr]
	return hp != nil && len(hp.waiters) > 0
}

// nextWaiter takes the first request waiting for a connection to addr, nil when none does; the
// caller grants it a connection or a slot it holds.
func (p *pool) nextWaiter(addr string) waiter {
	if p.waiting.Load() == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.popWaiterLocked(p.hosts[addr])
}

// release gives up one open slot of addr (a connection closed, or a dial that failed): to the
// first waiter, or by counting it closed.
func (p *pool) release(addr string) {
	p.mu.Lock()
	hp := p.hosts[addr]
	if hp == nil {
		p.mu.Unlock()
		return
	}
	if w := p.popWaiterLocked(hp); w != nil {
		p.mu.Unlock()
		w.grant(handed{addr: addr, fd: -1})
		return
	}
	hp.open--
	if hp.open <= 0 && len(hp.idle) == 0 {
		delete(p.hosts, addr)
	}
	p.mu.Unlock()
}

// put returns a connection of the net/http path after a complete response: to the first waiter,
// else to the idle list.
func (p *pool) put(c *upConn) {
	now := p.now()
	c.idleAt = now
	p.mu.Lock()
	hp := p.hosts[c.addr]
	if hp == nil { // closeIdle forgot the address
		p.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	if w := p.popWaiterLocked(hp); w != nil {
		p.mu.Unlock()
		w.grant(handed{addr: c.addr, fd: -1, c: c})
		return
	}
	if len(hp.idle) >= p.maxIdle && p.maxIdle > 0 {
		hp.open--
		p.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	hp.idle = append(hp.idle, c)
	if now.Sub(p.lastSweep) > p.idleTimeout/2 {
		p.sweepLocked(now)
	}
	p.mu.Unlock()
}

// takeIdle removes the most recently pooled idle connection of the net/http path to addr and
// returns it, still counted as open, or nil when there is none.
func (p *pool) takeIdle(addr string) *upConn {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	hp := p.hosts[addr]
	if hp == nil {
		return nil
	}
	for len(hp.idle) > 0 {
		c := hp.idle[len(hp.idle)-1]
		hp.idle[len(hp.idle)-1] = nil
		hp.idle = hp.idle[:len(hp.idle)-1]
		if now.Sub(c.idleAt) < p.idleTimeout {
			return c
		}
		hp.open--
		_ = c.nc.Close()
	}
	return nil
}

// sweepLocked closes expired idle connections, e.g. to pods that went away.
func (p *pool) sweepLocked(now time.Time) {
	p.lastSweep = now
	for addr, hp := range p.hosts {
		kept := hp.idle[:0]
		for _, c := range hp.idle {
			if now.Sub(c.idleAt) < p.idleTimeout {
				kept = append(kept, c)
			} else {
				hp.open--
				_ = c.nc.Close()
			}
		}
		clear(hp.idle[len(kept):])
		hp.idle = kept
		if hp.open <= 0 && len(hp.waiters) == 0 {
			delete(p.hosts, addr)
		}
	}
}

// dropIdle closes the net/http path's idle connections to addr. It runs when a pooled connection
// turned out closed by the upstream: the others pooled before it were most likely closed too (the
// pod restarted on the same address, or its idle timeout passed), and trying them one by one would
// spend a request's replays on them and answer 502.
func (p *pool) dropIdle(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	hp := p.hosts[addr]
	if hp == nil {
		return
	}
	for _, c := range hp.idle {
		_ = c.nc.Close()
	}
	hp.open -= len(hp.idle)
	clear(hp.idle)
	hp.idle = hp.idle[:0]
}

// closeIdle closes every idle connection of the net/http path.
func (p *pool) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, hp := range p.hosts {
		for _, c := range hp.idle {
			_ = c.nc.Close()
		}
		hp.open -= len(hp.idle)
		hp.idle = nil
	}
}

// chanWaiter is a request of the net/http path waiting on its goroutine.
type chanWaiter chan handed

func (w chanWaiter) grant(h handed) { w <- h }

// reusable decides, once a response ended, whether its upstream connection goes back to the pool:
// only when the response ended where its framing said (complete), the connection may carry
// another request (keep), and nothing came after the response (leftover: bytes nobody asked for,
// which would be read as the next request's response; counted). Both paths decide with it.
func (p *pool) reusable(complete, keep, leftover bool) bool {
	if !complete || !keep {
		return false
	}
	if leftover {
		p.discarded.Leftover.Inc()
		return false
	}
	return true
}

// discardHanded closes what a waiter was granted and no longer needs, which frees its slot for the
// next one.
func (p *pool) discardHanded(h handed) {
	switch {
	case h.c != nil:
		_ = h.c.nc.Close()
	case h.fd >= 0:
		_ = syscall.Close(h.fd)
	}
	p.release(h.addr)
}
