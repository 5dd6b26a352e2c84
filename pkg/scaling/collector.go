package scaling

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/utils/clock"

	"github.com/httpscale/httpscale/pkg/admin"
)

// CollectorOptions configure a Collector.
type CollectorOptions struct {
	// Discovery lists the replicas once per cycle.
	Discovery Discoverer
	// Counts polls /counts; every call is bounded by Timeout through its context.
	Counts admin.Client
	// Wake follows /wake streams; its http.Client must have no Timeout (the stream never ends).
	Wake admin.Client
	// Interval is the poll period. Timeout bounds one poll of one replica. StaleGrace is how long a
	// replica whose polls fail keeps contributing its last counts.
	Interval, Timeout, StaleGrace time.Duration
	// WakeBackoffMin and WakeBackoffMax bound the reconnect delay of a broken wake stream (doubling,
	// with jitter). Zero means 50ms and 2s.
	WakeBackoffMin, WakeBackoffMax time.Duration
	// WakeRate and WakeBurst bound the wake notices taken from one replica (a token bucket, kept
	// across reconnects); notices beyond it are dropped and counted. Zero means DefaultWakeRate and
	// DefaultWakeBurst.
	WakeRate  float64
	WakeBurst int
	// ActiveHold is AggregatorOptions.ActiveHold; zero means DefaultActiveHold.
	ActiveHold time.Duration
	// Clock is the time source; nil means the real clock.
	Clock clock.WithTicker
	// Log receives poll and stream errors.
	Log logr.Logger
}

// Collector polls every interceptor replica's counts and follows its wake stream, and publishes
// Snapshots to a State. It is a controller-runtime Runnable that runs on every scaler replica (no
// leader election: each scaler answers KEDA from its own view).
//
// One loop goroutine owns the Aggregator. Each cycle it lists replicas, starts one poll goroutine per
// replica whose previous poll has finished (a hung replica gets no second concurrent poll), and builds
// a snapshot when every poll of the cycle has answered or at the next tick, whichever comes first, so
// a hung replica delays the others by at most one interval, once.
type Collector struct {
	opts  CollectorOptions
	state *State
	agg   *Aggregator
	log   logr.Logger

	results chan pollResult
	runners map[string]*runner
	cycle   uint64
	started time.Time // when the current cycle started
	pending int       // polls of the current cycle still out
	dirty   bool      // answers applied since the last build

	discoveryErr string // the last discovery error, logged once
	wg           sync.WaitGroup
}

type runner struct {
	rep     Replica
	polling bool
	// failing is the reason of the last poll's failure, "" after a good answer. A failure is logged at
	// Info when its reason differs from the previous poll's (a replica whose first poll timed out and
	// that then answers impossible counts is named with both reasons), repeats at V(1).
	failing    string
	cancelWake context.CancelFunc
}

type pollResult struct {
	key    string
	cycle  uint64
	counts admin.Counts
	err    error
}

// DefaultActiveHold keeps an app active for a few poll cycles after its last observed request, so
// that a short request between two builds is never missed by a StreamIsActive subscriber that
// reads the snapshot a cycle late, while sparse traffic does not flip KEDA's activity on every
// request. It is what the app's time to zero may exceed its scaledownPeriod by, besides KEDA's
// pollingInterval.
const DefaultActiveHold = 2 * time.Second

// Defaults of the per-replica wake notice limit. A replica sends one notice per app that starts
// holding requests, and announces every app holding requests when a stream opens, so a burst of
// thousands is legitimate after an outage; a steady thousand per second is not. Together with the
// wake hold they bound the memory one replica's notices can take.
const (
	DefaultWakeRate  = 1000
	DefaultWakeBurst = 10000
)

// NewCollector returns a Collector publishing to state.
func NewCollector(opts CollectorOptions, state *State) *Collector {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.WakeBackoffMin <= 0 {
		opts.WakeBackoffMin = 50 * time.Millisecond
	}
	if opts.WakeBackoffMax <= 0 {
		opts.WakeBackoffMax = 2 * time.Second
	}
	if opts.ActiveHold <= 0 {
		opts.ActiveHold = DefaultActiveHold
	}
	if opts.WakeRate <= 0 {
		opts.WakeRate = DefaultWakeRate
	}
	if opts.WakeBurst <= 0 {
		opts.WakeBurst = DefaultWakeBurst
	}
	return &Collector{
		opts:  opts,
		state: state,
		log:   opts.Log,
		agg: NewAggregator(AggregatorOptions{
			StaleAfter: opts.Interval + opts.Timeout,
			Grace:      opts.StaleGrace,
			Window:     state.Window,
			Woken:      state.Woken,
			ActiveHold: opts.ActiveHold,
		}),
		results: make(chan pollResult),
		runners: map[string]*runner{},
	}
}

// NeedLeaderElection is false: every scaler replica collects.
func (c *Collector) NeedLeaderElection() bool { return false }

// Start runs until ctx ends, then stops every poll and stream and waits for them.
func (c *Collector) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		c.wg.Wait()
	}()
	ticker := c.opts.Clock.NewTicker(c.opts.Interval)
	defer ticker.Stop()
	c.startCycle(ctx)
	for {
		if c.pending == 0 && c.dirty {
			c.build()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
			c.startCycle(ctx)
		case r := <-c.results:
			c.apply(r)
		}
	}
}

func (c *Collector) build() {
	snap, changed := c.agg.Build(c.opts.Clock.Now())
	c.state.Publish(snap, changed)
	c.dirty = false
	recordSnapshot(snap)
	metricCycleSeconds.Observe(snap.At.Sub(c.started).Seconds())
}

func (c *Collector) apply(r pollResult) {
	run := c.runners[r.key]
	if run == nil {
		run = &runner{} // removed meanwhile; the Aggregator ignores it too
	}
	run.polling = false
	if r.cycle == c.cycle {
		c.pending--
	}
	c.dirty = true
	if r.err != nil {
		reason := pollErrorReason(r.err)
		metricPollErrors.WithLabelValues(reason).Inc()
		c.agg.Fail(r.key, r.err)
		log := c.log.V(1)
		if run.failing != reason {
			log = c.log
		}
		log.Info("polling interceptor counts failed; keeping its last counts for the grace period",
			"replica", r.key, "url", run.rep.URL, "reason", reason, "error", r.err.Error())
		run.failing = reason
		return
	}
	if run.failing != "" {
		c.log.Info("polling interceptor counts works again", "replica", r.key)
		run.failing = ""
	}
	c.agg.Observe(r.key, r.counts, c.opts.Clock.Now())
}

// startCycle publishes what the previous cycle gathered (late answers included), refreshes the
// replica set and starts this cycle's polls.
func (c *Collector) startCycle(ctx context.Context) {
	if c.dirty {
		c.build()
	}
	c.cycle++
	c.started = c.opts.Clock.Now()
	c.pending = 0
	reps, err := c.opts.Discovery.Replicas(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		// Shutting down: the read was cancelled, nothing to report.
	case err != nil && err.Error() != c.discoveryErr:
		c.log.Error(err, "discovering interceptor replicas; keeping the previous set")
		c.discoveryErr = err.Error()
	case err == nil:
		if c.discoveryErr != "" {
			c.log.Info("discovering interceptor replicas works again")
			c.discoveryErr = ""
		}
		c.setReplicas(ctx, reps)
	}
	for key, run := range c.runners {
		if run.polling {
			continue
		}
		run.polling = true
		c.pending++
		since, epoch := c.agg.Cursor(key)
		c.poll(ctx, key, run.rep.URL, since, epoch)
	}
	c.dirty = c.dirty || c.pending == 0 // nothing to wait for: publish staleness changes at once
}

func (c *Collector) poll(ctx context.Context, key, url string, since uint64, epoch string) {
	cycle := c.cycle
	c.wg.Go(func() {
		pctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
		counts, err := c.opts.Counts.Counts(pctx, url, since, epoch)
		cancel()
		select {
		case c.results <- pollResult{key: key, cycle: cycle, counts: counts, err: err}:
		case <-ctx.Done():
		}
	})
}

func (c *Collector) setReplicas(ctx context.Context, reps []Replica) {
	c.agg.SetReplicas(reps)
	keep := make(map[string]bool, len(reps))
	for _, rep := range reps {
		keep[rep.Key] = true
		run := c.runners[rep.Key]
		if run != nil && run.rep.URL == rep.URL {
			continue
		}
		if run != nil {
			run.cancelWake()
		} else {
			run = &runner{}
			c.runners[rep.Key] = run
			c.log.Info("interceptor replica added", "replica", rep.Key, "url", rep.URL)
		}
		run.rep = rep
		wctx, cancel := context.WithCancel(ctx)
		run.cancelWake = cancel
		c.wg.Go(func() { c.followWake(wctx, rep) })
	}
	for key, run := range c.runners {
		if !keep[key] {
			run.cancelWake()
			delete(c.runners, key)
			c.log.Info("interceptor replica removed", "replica", key)
		}
	}
}

// followWake keeps a wake stream to the replica open until ctx ends, reconnecting with jittered
// exponential backoff. The backoff starts over after a stream that stayed up for a while.
func (c *Collector) followWake(ctx context.Context, rep Replica) {
	clk := c.opts.Clock
	backoff := c.opts.WakeBackoffMin
	limit := rate.NewLimiter(rate.Limit(c.opts.WakeRate), c.opts.WakeBurst)
	for {
		started := clk.Now()
		warned := map[string]bool{} // drop reasons logged on this stream
		err := c.opts.Wake.Wake(ctx, rep.URL, func(ev admin.WakeEvent) {
			now := clk.Now()
			reason := ""
			if err := admin.CheckAppKey(ev.Key); err != nil {
				reason = "malformed"
			} else if !limit.AllowN(now, 1) {
				reason = "rate"
			}
			if reason != "" {
				metricWakesDropped.WithLabelValues(reason).Inc()
				if !warned[reason] {
					warned[reason] = true
					c.log.Info("dropping wake notices from interceptor replica", "replica", rep.Key, "url", rep.URL,
						"reason", reason, "example", truncate(ev.Key, 80))
				}
				return
			}
			metricWakes.Inc()
			c.state.Wake(ev.Key, now)
			if !ev.At.IsZero() {
				metricWakeDelay.Observe(max(clk.Since(ev.At).Seconds(), 0))
			}
		})
		if ctx.Err() != nil {
			return
		}
		metricWakeReconnects.Inc()
		if clk.Since(started) > c.opts.WakeBackoffMax {
			backoff = c.opts.WakeBackoffMin
		}
		if errors.Is(err, admin.ErrStreamEnded) {
			c.log.V(1).Info("wake stream ended; reconnecting", "replica", rep.Key)
		} else {
			c.log.V(1).Info("wake stream broke; reconnecting", "replica", rep.Key, "error", err.Error(), "backoff", backoff.String())
		}
		delay := backoff/2 + rand.N(backoff/2+1)
		t := clk.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		backoff = min(2*backoff, c.opts.WakeBackoffMax)
	}
}

// truncate returns s cut to at most n bytes, for logging what a peer sent.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
