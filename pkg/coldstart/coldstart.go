package coldstart

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/endpoints"
)

// ColdStart is one app's cold start on this replica: from its first held request until the held
// requests were forwarded and the kubelet found a pod ready (or they went away). Its methods are safe
// for concurrent use and never block.
type ColdStart struct {
	t        *Tracker
	app      App
	kick     chan struct{} // wakes run
	followed bool          // a run loop follows the app's endpoints (and finishes the cold start)

	mu sync.Mutex
	// running is true while a run loop follows the app (or a parked cold start is being finished);
	// parked is the timer that finishes a parked cold start (see park), nil otherwise.
	running   bool
	parked    *time.Timer
	steps     []admin.ColdStartStep // Held first
	pod       string                // the pod the held requests went to
	probe     string                // what was probed, or why not
	holders   int                   // requests held now
	everHeld  bool                  // a request was held (not only woken by)
	lastBegin time.Time
	timedOut  bool // a held request reached the readiness timeout
	forwarded bool
	finished  bool
}

// WakeSent records that the wake notice was published at at, to streams wake streams (the scalers);
// a notice nobody received is not a step (the scaler learns of the app from its next counts poll).
func (c *ColdStart) WakeSent(at time.Time, streams int) {
	if streams > 0 {
		c.addStep(admin.StepWakeSent, at, false)
	}
}

// Forwarded ends one hold: the request was sent to addr at at.
func (c *ColdStart) Forwarded(addr string, at time.Time) {
	c.mu.Lock()
	c.holders = max(0, c.holders-1)
	first := !c.forwarded
	c.forwarded = true
	c.mu.Unlock()
	if first {
		c.addStep(admin.StepForwarded, at, false)
		c.mu.Lock()
		if c.pod == "" {
			c.pod = c.podAt(addr)
		}
		c.mu.Unlock()
	}
	c.settle()
}

// Released ends one hold without a forward: the request went away, or reached the readiness timeout
// (timedOut).
func (c *ColdStart) Released(timedOut bool) {
	c.mu.Lock()
	c.holders = max(0, c.holders-1)
	c.timedOut = c.timedOut || timedOut
	c.mu.Unlock()
	c.settle()
}

// Steps returns the steps recorded so far, Held first.
func (c *ColdStart) Steps() []admin.ColdStartStep {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.steps)
}

// settle finishes a cold start that no run loop follows once its last hold ended; a followed one is
// poked.
func (c *ColdStart) settle() {
	if c.followed {
		c.poke()
		return
	}
	c.mu.Lock()
	done := c.holders == 0
	c.mu.Unlock()
	if done {
		c.finish(nil, nil)
	}
}

func (c *ColdStart) poke() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// addStep records the first occurrence of a step.
func (c *ColdStart) addStep(name string, at time.Time, coarse bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hasStep(name) {
		c.steps = append(c.steps, admin.ColdStartStep{Name: name, At: at, Coarse: coarse})
	}
}

// hasStep reports whether a step was recorded. c.mu held.
func (c *ColdStart) hasStep(name string) bool {
	return slices.ContainsFunc(c.steps, func(s admin.ColdStartStep) bool { return s.Name == name })
}

// podAt returns the pod of the endpoint at addr as the cache lists it now, "" when unknown.
func (c *ColdStart) podAt(addr string) string {
	if c.t.prober == nil {
		return ""
	}
	l := c.t.prober.Listed(c.app.Target)
	for _, s := range []*endpoints.Set{l.Ready, l.Answered} {
		if s != nil {
			for _, e := range s.Endpoints {
				if e.Addr() == addr {
					return e.Pod
				}
			}
		}
	}
	return ""
}

// A pod's probe interval grows with the time it has been probed beyond slowAfter: its probes come at
// least every slowdown-th of that time (see probed).
const (
	slowAfter = 5 * time.Second
	slowdown  = 20
)

// maxReads bounds the pod reads of one cold start, in multiples of Options.MaxEndpoints.
const maxReads = 4

// target is a starting endpoint the run loop follows.
type target struct {
	ep        endpoints.Endpoint
	pod       *corev1.Pod
	reading   bool
	plan      plan
	err       error // why it is not probed
	inFlight  bool
	successes int
	next      time.Time // the earliest start of its next probe
	backoff   time.Duration
	first     time.Time // when its first probe started
	answered  bool
}

type podResult struct {
	addr string
	pod  *corev1.Pod
	err  error
}

type probeResult struct {
	addr     string
	err      error
	timedOut bool
	started  time.Time
	ended    time.Time
}

// run follows the app's endpoints until the cold start is over: it reads each starting pod, probes
// it and serves it once it answers, and records the steps it sees.
func (c *ColdStart) run(ctx context.Context) {
	t := c.t
	k := c.app.Target
	probing := t.opts.Pods != nil && (c.app.Probe == nil || !c.app.Probe.Off) && c.app.NoProbe == ""
	if !probing {
		c.mu.Lock()
		c.probe = "not probed: " + cmp.Or(c.app.NoProbe, noProbeReason(t.opts.Pods == nil))
		c.mu.Unlock()
	}
	targets := map[string]*target{}
	pods := map[string]*corev1.Pod{} // by name: every pod read
	results := make(chan any, t.opts.MaxEndpoints+t.opts.PerApp)
	done := make(chan struct{})
	defer close(done)
	send := func(r any) {
		select {
		case results <- r:
		case <-done: // the cold start is over
		}
	}
	inFlight, reads := 0, 0
	var answeredAt time.Time
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	c.mu.Lock()
	deadline := c.steps[0].At.Add(c.app.Hold + t.opts.Confirm)
	c.mu.Unlock()

	for {
		now := t.opts.Now()
		l := t.prober.Listed(k)
		c.observe(l, now)
		// Follow the first MaxEndpoints starting endpoints.
		seen := map[string]bool{}
		for i, e := range l.Pending {
			if i == t.opts.MaxEndpoints {
				break
			}
			addr := e.Addr()
			seen[addr] = true
			tg := targets[addr]
			if tg != nil && (tg.ep.Pod != e.Pod || tg.ep.PodUID != e.PodUID) {
				tg = nil // the address is another pod's now
			}
			if tg == nil {
				tg = &target{ep: e}
				targets[addr] = tg
				switch {
				case !probing:
				case e.Pod == "":
					tg.err = fmt.Errorf("%w: the EndpointSlice names no pod for %s", errNoProbe, addr)
					c.noteProbe(tg)
				case reads == maxReads*t.opts.MaxEndpoints:
					// Slices that keep naming new pods cost a bounded number of reads.
					tg.err = fmt.Errorf("%w: %d starting pods read in this cold start already", errNoProbe, reads)
					c.noteProbe(tg)
				default:
					reads++
					tg.reading = true
					t.wg.Go(func() { send(c.readPod(ctx, e)) })
				}
			}
		}
		for addr, tg := range targets {
			if !seen[addr] && !tg.inFlight && !tg.reading {
				delete(targets, addr)
			}
		}

		c.mu.Lock()
		holders, forwarded, lastBegin := c.holders, c.forwarded, c.lastBegin
		ready := c.hasStep(admin.StepEndpointReady)
		c.mu.Unlock()
		switch {
		case ready && (forwarded || holders == 0),
			!forwarded && holders == 0 && !now.Before(lastBegin.Add(t.opts.Linger)),
			!answeredAt.IsZero() && forwarded && !now.Before(answeredAt.Add(t.opts.Confirm)),
			!now.Before(deadline):
			c.withdraw(targets)
			c.finish(ctx, pods)
			return
		}
		if idle := len(targets) == 0 && reads == 0 && inFlight == 0 && answeredAt.IsZero() &&
			l.Ready == nil && len(l.Pending) == 0 && l.Answered == nil; idle && c.park(minTime(deadline, lastBegin.Add(t.opts.Linger)), now) {
			return
		}

		// Probe the pods that are due, while no endpoint is ready.
		wake := deadline
		if l.Ready == nil && probing {
			for _, tg := range sortedTargets(targets) {
				if tg.answered || tg.inFlight || tg.reading || tg.err != nil {
					continue
				}
				if now.Before(tg.next) {
					wake = minTime(wake, tg.next)
					continue
				}
				if inFlight >= t.opts.PerApp {
					break
				}
				tg.inFlight = true
				inFlight++
				ip, addr, p := tg.ep.IP, tg.ep.Addr(), tg.plan
				t.wg.Go(func() { send(c.probeOnce(ctx, ip, addr, p)) })
			}
		}
		if !answeredAt.IsZero() && forwarded {
			wake = minTime(wake, answeredAt.Add(t.opts.Confirm))
		}
		if !forwarded && holders == 0 {
			wake = minTime(wake, lastBegin.Add(t.opts.Linger))
		}
		timer.Reset(max(wake.Sub(now), 0))

		select {
		case <-ctx.Done():
			c.withdraw(targets)
			c.finish(nil, pods) // shutting down: no more reads
			return
		case <-l.Changed:
		case <-c.kick:
		case <-timer.C:
		case r := <-results:
			switch r := r.(type) {
			case podResult:
				c.podRead(targets[r.addr], r, pods)
			case probeResult:
				inFlight--
				if c.probed(k, targets[r.addr], r) && answeredAt.IsZero() {
					answeredAt = r.ended
				}
			}
		}
	}
}

// observe records the steps l shows (at the cache's times: when it published the change, before
// any held request woke on it).
func (c *ColdStart) observe(l endpoints.Listing, now time.Time) {
	if l.Ready != nil || len(l.Pending) > 0 {
		c.addStep(admin.StepEndpointListed, cmp.Or(l.ListedAt, now), false)
	}
	if l.Ready != nil {
		c.addStep(admin.StepEndpointReady, cmp.Or(l.ReadyAt, now), false)
		c.mu.Lock()
		if c.pod == "" && !c.forwarded {
			c.pod = l.Ready.Endpoints[0].Pod
		}
		c.mu.Unlock()
	}
}

// park ends the run loop of a cold start that only waits for its linger to pass: every request it
// held went away unanswered (none is held now) and the app's slices list nothing, so there is no
// pod to read or probe. Until end it costs a timer instead of a goroutine (and its stack): a burst
// of requests to many apps that stay at zero (their wake failed, or their clients gave up) would
// otherwise keep a goroutine per app for the linger after their requests left. A request held
// meanwhile restarts the loop (Tracker.begin); otherwise the timer finishes the cold start with
// the steps the app's listing shows then. It reports whether the loop may return. A cold start
// that never held a request (a waiting page's wake) is not parked: its loop probes the pods that
// the next page load will be sent to.
func (c *ColdStart) park(end, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holders > 0 || !c.everHeld || c.forwarded || c.finished {
		return false
	}
	c.running = false
	c.t.wg.Add(1) // the timer's, held until it fires or unpark stops it; the loop still holds its own
	c.parked = time.AfterFunc(max(end.Sub(now), 0), c.lingered)
	return true
}

// unpark stops a parked cold start's timer. It reports whether it did (the caller then owns the
// timer's count in Tracker.wg); false when the cold start was not parked or its timer has fired.
// c.mu held.
func (c *ColdStart) unpark() bool {
	if c.parked == nil {
		return false
	}
	stopped := c.parked.Stop()
	c.parked = nil
	return stopped
}

// lingered finishes a parked cold start whose linger passed with no request held again.
func (c *ColdStart) lingered() {
	t := c.t
	defer t.wg.Done()
	c.mu.Lock()
	if c.parked == nil || c.running || c.finished {
		c.mu.Unlock()
		return // a held request restarted the loop, or the tracker stopped
	}
	c.parked = nil
	c.running = true // finishing: begin does not restart the loop
	c.mu.Unlock()
	c.observe(t.prober.Listed(c.app.Target), t.opts.Now())
	readCtx := t.ctx
	if readCtx.Err() != nil {
		readCtx = nil
	}
	c.finish(readCtx, nil)
}

func noProbeReason(noPods bool) string {
	if noPods {
		return "pods cannot be read"
	}
	return "spec.coldStart.probe.disabled"
}

// readPod reads e's pod for the run loop.
func (c *ColdStart) readPod(ctx context.Context, e endpoints.Endpoint) podResult {
	ctx, cancel := context.WithTimeout(ctx, podReadTimeout)
	defer cancel()
	pod, err := c.t.opts.Pods.Pod(ctx, c.app.Target.Namespace, e.Pod)
	return podResult{addr: e.Addr(), pod: pod, err: err}
}

// podRead takes a pod the run loop asked for: the pod's probe plan, or why it is not probed.
func (c *ColdStart) podRead(tg *target, r podResult, pods map[string]*corev1.Pod) {
	if tg == nil {
		return
	}
	tg.reading = false
	if r.err != nil {
		tg.err = fmt.Errorf("%w: reading pod %s: %w", errNoProbe, tg.ep.Pod, r.err)
		c.t.opts.Log.V(1).Info("cold-start probe: cannot read pod", "app", c.app.Key, "pod", tg.ep.Pod, "error", r.err.Error())
		c.noteProbe(tg)
		return
	}
	pods[r.pod.Name] = r.pod
	tg.pod = r.pod
	if err := checkPod(r.pod, tg.ep); err != nil {
		tg.err = err
		c.t.opts.Log.Info("not probing a starting endpoint", "app", c.app.Key, "endpoint", tg.ep.Addr(), "reason", err.Error())
		c.noteProbe(tg)
		return
	}
	tg.plan, tg.err = planFor(r.pod, c.app.Probe, c.t.opts.Timeout)
	c.noteProbe(tg)
}

// noteProbe describes what is probed (or why not) for the record, from the first pod read.
func (c *ColdStart) noteProbe(tg *target) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.probe != "" {
		return
	}
	if tg.err != nil {
		c.probe = tg.err.Error()
		return
	}
	c.probe = tg.plan.desc
}

// probeOnce runs p against ip once a slot is free, for the run loop. Waiting for a slot is first
// come, first served (a channel's blocked senders are woken in order), and an app has at most
// Options.PerApp probes waiting or running, so an app waits behind at most that many of each other
// app's.
func (c *ColdStart) probeOnce(ctx context.Context, ip, addr string, p plan) probeResult {
	t := c.t
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return probeResult{addr: addr, err: ctx.Err()}
	}
	started := t.opts.Now()
	var err error
	for _, ck := range p.checks {
		if err = t.client.run(ctx, ip, ck, p.timeout); err != nil {
			break
		}
	}
	<-t.slots
	ended := t.opts.Now()
	timedOut := errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
	t.metrics.probe(err, timedOut)
	return probeResult{addr: addr, err: err, timedOut: timedOut, started: started, ended: ended}
}

// probed takes a probe's outcome; it reports whether the pod was answered for and is served now.
func (c *ColdStart) probed(k endpoints.ServiceKey, tg *target, r probeResult) bool {
	if tg == nil || r.started.IsZero() {
		return false
	}
	tg.inFlight = false
	if tg.first.IsZero() {
		tg.first = r.started
	}
	// A pod is asked every interval for its first slowAfter; then every twentieth of the time beyond
	// (at most a second): the wait this adds is at most 5% of a slow app's own start, and a pod that
	// never passes costs one probe a second.
	iv := c.t.opts.Interval
	iv = max(iv, min((r.started.Sub(tg.first)-slowAfter)/slowdown, max(time.Second, iv)))
	if r.err != nil {
		tg.successes = 0
		if r.timedOut {
			// A pod that hangs is asked less often still: up to once a second.
			tg.backoff = min(max(2*tg.backoff, 2*iv), max(time.Second, iv))
		} else {
			tg.backoff = 0
		}
		tg.next = r.started.Add(max(iv, tg.backoff))
		return false
	}
	tg.backoff = 0
	tg.successes++
	tg.next = r.started.Add(c.t.opts.Interval) // passes in a row count at the interval
	if tg.successes < tg.plan.threshold {
		return false
	}
	if !c.t.prober.Answered(k, tg.ep) {
		return false // no longer starting (ready, gone, terminating)
	}
	tg.answered = true
	c.addStep(admin.StepAppAnswered, r.ended, false)
	if tg.pod != nil && tg.pod.Name == tg.ep.Pod {
		c.podSteps(tg.pod) // known now, for the held requests' spans
	}
	c.mu.Lock()
	c.probe = tg.plan.desc
	if c.pod == "" {
		c.pod = tg.ep.Pod
	}
	c.mu.Unlock()
	c.t.opts.Log.V(1).Info("starting pod answered its probe; forwarding to it", "app", c.app.Key, "pod", tg.ep.Pod, "endpoint", tg.ep.Addr())
	return true
}

// withdraw stops serving the endpoints the cold start answered for that the kubelet has not found
// ready (the endpoint cache drops them by itself once one is).
func (c *ColdStart) withdraw(targets map[string]*target) {
	for _, tg := range targets {
		if tg.answered {
			c.t.prober.Withdraw(c.app.Target, tg.ep)
		}
	}
}

func sortedTargets(m map[string]*target) []*target {
	out := make([]*target, 0, len(m))
	for _, tg := range m {
		out = append(out, tg)
	}
	slices.SortFunc(out, func(a, b *target) int {
		switch {
		case a.ep.Addr() < b.ep.Addr():
			return -1
		case a.ep.Addr() > b.ep.Addr():
			return 1
		}
		return 0
	})
	return out
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
