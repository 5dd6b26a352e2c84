//go:build linux

package engine

import (
	"context"
	"fmt"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// A request's steps on a loop, in the order the Exchange contract gives (logic.go):
//
//	startRequest  parse the head (or hand the connection to net/http); Logic.Route (no route: the
//	              answer of Logic.Unrouted); an h2c backend: Release, and net/http serves it;
//	              Rewrite and Trace (a rewritten target net/http would escape: Release, and
//	              net/http serves it); Begin
//	startWait     not Ready: Wait runs on a goroutine; waited takes its result on the loop
//	forward       Forwarding, the request timeout
//	attempt       Pick (none left: Fail); an upstream connection (loop_upstream_linux.go); a
//	              connection that cannot be made: Refused decides whether the next endpoint is tried
//	              (relay, loop_relay_linux.go: the request is sent, the response head read,
//	              Forwarded, Responded, the response relayed)
//	fail          Fail, and its answer written
//	endRequest    End (Release before Begin)
//
// Every call to the exchange is made on the loop but Wait, which runs on its own goroutine while
// the loop does not touch the exchange.

// startRequest starts the request whose head is the first end bytes of c.in.
func (l *evLoop) startRequest(c *evClient, end int) {
	rq := l.free.request()
	if end > evClientBuffer {
		l.heavyBudget -= end // parsed in a turn for large heads (see evLoop.heavy)
	}
	if !rq.Parse(string(c.in[:end])) {
		l.free.putRequest(rq)
		l.handOff(c) // net/http serves it
		return
	}
	x := l.e.logic.Route(rq.Host, rq.Path, rq)
	if x == nil {
		rep := l.e.logic.Unrouted(l.hdr)
		l.free.consume(c, end)
		c.reqID++
		c.rq, c.bodyLeft = rq, rq.BodyLen
		l.answer(c, rep)
		return
	}
	plan := x.Plan()
	if plan.H2C {
		x.Release()
		l.free.putRequest(rq)
		l.handOff(c) // net/http forwards to an h2c backend
		return
	}
	target, set := forwardedAs(x, Request{Method: rq.Method, Target: rq.Target, Host: rq.Host, ProtoMajor: 1, ProtoMinor: 1})
	if target != "" && !rq.SetTarget(target) {
		x.Release()
		l.free.putRequest(rq)
		l.handOff(c) // net/http sends the rewritten target, which it would escape, escaped
		return
	}
	rq.Replace(set)
	x.Begin()
	l.free.consume(c, end)
	c.reqID++
	c.rq, c.x, c.plan, c.bodyLeft = rq, x, plan, rq.BodyLen
	c.begun = l.now
	if c.hup {
		l.hungUp(c) // closed its side with (or before) the request: watchAfter to answer it
		if c.closed {
			return
		}
	}
	if !x.Ready() {
		l.startWait(c)
		return
	}
	l.forward(c)
}

// startWait holds the request: Wait (or WaitRequest) runs on a goroutine with a context that the
// loop cancels when the client goes away (or the server is cut off), and reports back (waited).
func (l *evLoop) startWait(c *evClient) {
	ctx, cancel := context.WithCancel(l.ls.base)
	c.step, c.cancel = stepWaiting, cancel
	l.pending++
	x, rq, reqID := c.x, c.rq, c.reqID
	go func() {
		err := wait(x, ctx, Waiting{Method: rq.Method, Header: rq, HeadBytes: int64(rq.HeadLen)})
		cancel()
		l.post(evMsg{kind: evWaited, c: c, reqID: reqID, err: err})
	}()
}

// waited takes the result of a wait on the loop.
func (l *evLoop) waited(c *evClient, err error) {
	l.pending--
	c.cancel = nil
	switch {
	case c.gone || c.closed:
		if err == nil {
			err = fmt.Errorf("holding: %w", ErrClientGone)
		}
		c.x.Fail(clientGone(err), l.hdr)
		clear(l.hdr)
		l.endRequest(c)
		l.closeClient(c)
	case err != nil:
		l.fail(c, err)
	default:
		c.plan = c.x.Plan() // a fallback after the readiness timeout may have changed it
		l.forward(c)
	}
}

// forward starts forwarding a counted request.
func (l *evLoop) forward(c *evClient) {
	c.x.Forwarding()
	if d := c.plan.RequestTimeout; d > 0 {
		l.timers.set(c, timerRequest, l.now.Add(d))
	}
	c.attempt = 0
	l.attempt(c)
}

// attempt picks the endpoint of attempt c.attempt and finds it an upstream connection.
func (l *evLoop) attempt(c *evClient) {
	addr, ok := c.x.Pick(c.attempt)
	if !ok {
		l.fail(c, fmt.Errorf("forwarding: %w", ErrNoEndpoint))
		return
	}
	c.addr, c.replays = addr, 0
	if d := c.plan.ResponseHeaderTimeout; d > 0 {
		l.timers.set(c, timerHeader, l.now.Add(d))
	}
	l.ups.acquire(c)
}

// refused handles a connection to the attempt's endpoint that could not be made: the next
// endpoint when the exchange allows one (see tryEndpoints), else the failure is answered.
func (l *evLoop) refused(c *evClient, err error) {
	if IsDialError(err) && tryNext(c.x, c.addr, c.attempt, err) {
		c.attempt++
		l.attempt(c)
		return
	}
	l.fail(c, fmt.Errorf("forwarding to %s: %w", c.addr, err))
}

// fail answers a counted request that could not be forwarded (no response head was written): the
// answer Exchange.Fail chooses. Once the head was written, abort cuts the response off instead.
func (l *evLoop) fail(c *evClient, err error) {
	if c.step == stepRelaying {
		l.abort(c, err)
		return
	}
	if up := c.up; up != nil {
		c.up, up.c = nil, nil
		l.ups.closeUp(up)
	}
	l.ups.leaveLine(c)
	rep := c.x.Fail(err, l.hdr)
	if c.bodyLeft > 0 {
		c.closeAfter = true // what is left of its body must not be read as a request
	}
	l.answer(c, rep)
}

// abort cuts off a response whose head was written (its status recorded with Responded): the
// upstream and client connections are closed, so that the client cannot take what it got for a
// whole response.
func (l *evLoop) abort(c *evClient, err error) {
	l.e.log.V(1).Info("relaying the response failed; cutting it off", "host", c.rq.Host, "error", err.Error())
	if up := c.up; up != nil {
		c.up, up.c = nil, nil
		l.ups.closeUp(up)
	}
	l.endRequest(c)
	l.closeClient(c)
}

// answer writes rep (with the fields the logic put in l.hdr) as the request's response, ends the
// request, and sends the response; an Abort closes the connection instead.
func (l *evLoop) answer(c *evClient, rep Reply) {
	defer clear(l.hdr)
	if rep.Abort {
		l.endRequest(c)
		l.closeClient(c)
		return
	}
	closeAfter := c.closeAfter || c.rq.Close || c.hup || l.ls.shuttingDown() || c.bodyLeft > 0
	if !h1.WriteAnswer(&c.out, &l.rw, c.rq.Method, closeAfter, rep.Code, l.hdr, rep.Body) {
		closeAfter = true
	}
	c.closeAfter = closeAfter
	l.endRequest(c) // recorded before the response is sent
	c.since = l.now
	if !l.flushClient(c) {
		return
	}
	if c.out.Len() == 0 {
		l.serveNext(c)
	}
}

// clientGone ends a connection whose client went away (or that is being closed), with its
// request: the upstream connection is closed and the request recorded as the net/http path
// records it. A held request is ended when its wait reports back.
func (l *evLoop) clientGone(c *evClient) {
	if c.closed {
		return
	}
	if c.busy() {
		switch c.step {
		case stepWaiting:
			c.gone = true
			c.cancel()
			l.closeClient(c) // the request ends when its wait reports back
			return
		case stepRelaying:
			if up := c.up; up != nil {
				c.up, up.c = nil, nil
				l.ups.closeUp(up)
			}
			// The status was recorded (Responded) when the head was written.
		default:
			if up := c.up; up != nil {
				c.up, up.c = nil, nil
				l.ups.closeUp(up)
			}
			l.ups.leaveLine(c)
			if c.x != nil {
				// Nothing is sent: the answer's headers go nowhere.
				c.x.Fail(fmt.Errorf("%w: host %s, path %s", ErrClientGone, c.rq.Host, c.rq.Path), l.hdr)
				clear(l.hdr)
			}
		}
		l.endRequest(c)
	}
	l.closeClient(c)
}

// timerDue handles a client's timer that ran out.
func (l *evLoop) timerDue(c *evClient, kind timerKind) {
	if c.closed || !c.busy() {
		return
	}
	switch kind {
	case timerHungUp:
		l.clientGone(c)
	case timerRequest:
		l.fail(c, fmt.Errorf("forwarding to %s: %w", c.addr, ErrRequestTimeout))
	case timerHeader:
		if c.step == stepConnecting || c.step == stepSending {
			l.fail(c, fmt.Errorf("forwarding to %s: %w", c.addr, ErrResponseHeaderTimeout))
		}
	}
}

// endRequest forgets the request, ending its exchange: End once counted, Release otherwise.
func (l *evLoop) endRequest(c *evClient) {
	if c.rq != nil {
		l.free.putRequest(c.rq)
	}
	if c.x != nil {
		c.x.End()
	}
	if c.relay != nil {
		l.free.putRelay(c.relay)
	}
	l.timers.clearAll(c)
	c.rq, c.x, c.plan, c.cancel, c.addr, c.up, c.waiter, c.relay = nil, nil, Plan{}, nil, "", nil, nil, nil
	c.step, c.attempt, c.replays, c.res, c.relaying, c.remaining, c.bodyLeft = stepNone, 0, 0, h1.Response{}, false, 0, 0
}
