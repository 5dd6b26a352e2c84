// Package gcheadroom bounds how far the Go heap may grow between collections by an absolute amount,
// so that a GC percentage chosen for a small live heap does not multiply a large one.
//
// GOGC=400 lets the heap grow to five times what is live before the next collection: cheap in CPU
// when 10 MiB are live, but 50,000 routed apps with 70 MiB live would let the process reach 350 MiB.
// A Tuner re-computes the percentage after every collection from the live heap that collection
// measured: Headroom as a percentage of it, never above MaxPercent (the configured GOGC, which small
// heaps keep) nor below MinPercent (so a huge heap does not collect continuously).
package gcheadroom

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Options configure a Tuner.
type Options struct {
	// MaxPercent is the GC percentage of small heaps: the configured GOGC.
	MaxPercent int
	// MinPercent is the lowest percentage set, however large the live heap.
	MinPercent int
	// Headroom is how many bytes the heap may grow by between collections, as long as the
	// percentage stays within [MinPercent, MaxPercent].
	Headroom uint64
}

// Percent returns the GC percentage for a live heap of live bytes: Headroom as a percentage of live,
// within [MinPercent, MaxPercent]. A live heap of 0 (nothing measured yet) gets MaxPercent.
func (o Options) Percent(live uint64) int {
	if live == 0 {
		return o.MaxPercent
	}
	p := o.Headroom * 100 / live
	switch {
	case p >= uint64(o.MaxPercent):
		return o.MaxPercent
	case p <= uint64(o.MinPercent):
		return o.MinPercent
	default:
		return int(p)
	}
}

// Tuner sets the GC percentage after every collection. Create it with Start.
type Tuner struct {
	opts Options

	mu      sync.Mutex
	stopped bool
	percent int
	sample  []metrics.Sample
}

// sentinel is allocated once per collection; its cleanup runs after the collection found it
// unreachable. It holds a pointer so it is never a tiny allocation sharing a block with others.
type sentinel struct {
	_ *int
	_ [8]byte
}

// Start sets the GC percentage to o.Percent of the current live heap and re-computes it after every
// collection until Stop. It changes process-wide state (debug.SetGCPercent): run one per process.
func Start(o Options) *Tuner {
	t := &Tuner{opts: o, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.mu.Lock()
	t.apply()
	t.mu.Unlock()
	t.arm()
	return t
}

// Percent returns the percentage the Tuner set last.
func (t *Tuner) Percent() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.percent
}

// Stop stops re-computing; the percentage set last stays in effect.
func (t *Tuner) Stop() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
}

func (t *Tuner) arm() {
	s := &sentinel{}
	runtime.AddCleanup(s, func(t *Tuner) { t.afterGC() }, t)
}

func (t *Tuner) afterGC() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	t.apply()
	t.arm()
}

// apply sets the percentage for the live heap the last collection measured. t.mu held.
func (t *Tuner) apply() {
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	p := t.opts.Percent(live)
	if p != t.percent {
		debug.SetGCPercent(p)
		t.percent = p
	}
}

// Runnable runs a Tuner for as long as its context: a controller-runtime Runnable (every replica
// runs it, no leader election), so that the process-wide GC setting is owned by the manager like
// every other long-running part and not changed as a side effect of building one.
type Runnable struct {
	Options Options

	mu    sync.Mutex
	tuner *Tuner // while Start runs
}

// Start sets the GC percentage and tunes it until ctx ends, then stops tuning (the percentage last
// set stays). It blocks until ctx ends.
func (r *Runnable) Start(ctx context.Context) error {
	t := Start(r.Options)
	r.mu.Lock()
	r.tuner = t
	r.mu.Unlock()
	<-ctx.Done()
	t.Stop()
	r.mu.Lock()
	r.tuner = nil
	r.mu.Unlock()
	return nil
}

// Running reports whether Start is tuning.
func (r *Runnable) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tuner != nil
}

// NeedLeaderElection is false: the setting is per process.
func (r *Runnable) NeedLeaderElection() bool { return false }
