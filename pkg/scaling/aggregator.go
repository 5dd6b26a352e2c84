package scaling

import (
	"sort"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// AggregatorOptions tune how replicas' answers are trusted.
type AggregatorOptions struct {
	// StaleAfter marks a replica stale when its last good answer is older than this, even while its
	// current poll has not failed yet (a hung replica). Zero means never by age alone.
	StaleAfter time.Duration
	// Grace is how long a replica whose polls fail keeps contributing its last good counts. After it,
	// the replica is ignored until it answers again.
	Grace time.Duration
	// Window returns the rate window and granularity of an app (learned from KEDA's calls); it sets
	// how long request history is kept and what counts as recent activity. Nil means the trigger
	// defaults.
	Window func(app string) (w, g time.Duration)
	// Woken reports whether the app received a wake notice recently. Nil means never.
	Woken func(app string, now time.Time) bool
	// ActiveHold is how long an app stays active after a request of it was last observed, with no
	// request in flight or held. Zero keeps it active only in the snapshot that observed the request.
	// It is not the rate window: an app whose last request ended is idle after ActiveHold, so that
	// its scaledownPeriod starts then, while its request rate still counts that request.
	ActiveHold time.Duration
}

// Aggregator folds replicas' counts into Snapshots. It is not safe for concurrent use: one goroutine
// (the Collector's loop) owns it and publishes the Snapshots it builds; it does no I/O.
//
// Request counting is robust to the ways a replica's monotonic counters misbehave: a replica seen for
// the first time only sets a baseline (joining replicas and a restarted scaler cause no rate spike);
// a new epoch (restarted replica) or a decreasing counter (app removed and re-added) counts the new
// value from zero, as Prometheus' increase does, except that an epoch replacing one that itself began
// less than MinEpochLife earlier only sets a new baseline (a replica whose epoch flaps).
type Aggregator struct {
	opts     AggregatorOptions
	replicas map[string]*replicaState
	apps     map[string]*appState
	prev     *Snapshot
}

type replicaState struct {
	key, url string
	seen     bool
	epoch    string
	epochAt  time.Time // when the current epoch replaced an earlier one; zero for the first seen
	seq      uint64
	counts   map[string]replicaApp
	lastOK   time.Time
	err      error
}

// replicaApp is one replica's latest counts for an app, with the app's state at hand so that Build
// needs no lookup per replica and app.
type replicaApp struct {
	admin.AppCount
	app *appState
}

type appState struct {
	// total is the app's request count summed over replicas' increases since the scaler started.
	total uint64
	hist  history
	// Per-build scratch.
	conc   int64
	stale  bool
	listed bool
}

// MinEpochLife is the shortest life of an epoch that began while the scaler watched, for its
// successor to count as a restart. A new epoch sooner than that sets a baseline instead of counting
// the new process's requests from zero (see Aggregator).
const MinEpochLife = 5 * time.Second

// MaxAppRequestRate bounds the requests per second one replica is believed to serve for one app
// (see Aggregator.Observe); a single interceptor replica serves far fewer.
const MaxAppRequestRate = 1_000_000

// NewAggregator returns an empty Aggregator.
func NewAggregator(opts AggregatorOptions) *Aggregator {
	if opts.Window == nil {
		opts.Window = func(string) (time.Duration, time.Duration) {
			return trigger.DefaultWindow, trigger.DefaultGranularity
		}
	}
	if opts.Woken == nil {
		opts.Woken = func(string, time.Time) bool { return false }
	}
	return &Aggregator{opts: opts, replicas: map[string]*replicaState{}, apps: map[string]*appState{}}
}

// SetReplicas replaces the set of replicas. Replicas that are gone are forgotten at once: their
// counts no longer contribute. New ones contribute from their first good answer.
func (a *Aggregator) SetReplicas(reps []Replica) {
	keep := make(map[string]bool, len(reps))
	for _, r := range reps {
		keep[r.Key] = true
		st := a.replicas[r.Key]
		if st == nil {
			st = &replicaState{key: r.Key}
			a.replicas[r.Key] = st
		}
		st.url = r.URL
	}
	for k := range a.replicas {
		if !keep[k] {
			delete(a.replicas, k)
		}
	}
}

// Cursor returns what the next counts request to the replica should send: the sequence and epoch of
// its last good answer, or zero values for a full snapshot.
func (a *Aggregator) Cursor(key string) (since uint64, epoch string) {
	if st := a.replicas[key]; st != nil && st.seen {
		return st.seq, st.epoch
	}
	return 0, ""
}

// Observe applies a good answer from the replica. Answers from replicas no longer in the set are
// ignored.
func (a *Aggregator) Observe(key string, c admin.Counts, now time.Time) {
	st := a.replicas[key]
	if st == nil {
		return
	}
	first := !st.seen
	restarted := st.seen && c.Epoch != st.epoch
	if restarted {
		if !st.epochAt.IsZero() && now.Sub(st.epochAt) < MinEpochLife {
			// Two restarts this close together: the replica's epochs flap. Counting each new epoch's
			// totals from zero would invent requests on every answer, so the new totals are only a
			// baseline, as for a replica seen for the first time.
			first = true
		}
		st.epochAt = now
	}
	counts := st.counts
	if first || restarted || c.Full || counts == nil {
		counts = make(map[string]replicaApp, len(c.Apps))
	}
	// No replica serves more than MaxAppRequestRate requests a second for one app: an increase above
	// that since the previous answer (or the past second, whichever is longer) is cut to it, so one
	// absurd counter cannot make the app's rate absurd.
	allowed := uint64(MaxAppRequestRate * max(now.Sub(st.lastOK), time.Second).Seconds())
	for _, ac := range c.Apps {
		app := a.app(ac.Key)
		if !first {
			var old uint64
			if !restarted {
				old = st.counts[ac.Key].Requests
			}
			inc := ac.Requests
			if ac.Requests >= old {
				inc = ac.Requests - old
			}
			app.total += min(inc, allowed)
		}
		counts[ac.Key] = replicaApp{AppCount: ac, app: app}
	}
	st.counts = counts
	st.seen, st.epoch, st.seq, st.lastOK, st.err = true, c.Epoch, c.Seq, now, nil
}

// Fail records a failed poll of the replica.
func (a *Aggregator) Fail(key string, err error) {
	if st := a.replicas[key]; st != nil {
		st.err = err
	}
}

func (a *Aggregator) app(key string) *appState {
	st := a.apps[key]
	if st == nil {
		st = &appState{}
		a.apps[key] = st
	}
	return st
}

// Build returns the snapshot as of now and the apps whose Active value changed since the previous
// one (the empty key stands for the fleet). The snapshot shares nothing mutable with the Aggregator.
func (a *Aggregator) Build(now time.Time) (*Snapshot, []string) {
	snap := &Snapshot{At: now, Replicas: make([]ReplicaStatus, 0, len(a.replicas))}
	for _, st := range a.apps {
		st.conc, st.stale, st.listed = 0, false, false
	}
	for _, r := range a.replicas {
		rs := ReplicaStatus{Key: r.key, URL: r.url, Epoch: r.epoch, LastSuccess: r.lastOK}
		if r.err != nil {
			rs.Err = r.err.Error()
		}
		if r.seen {
			age := now.Sub(r.lastOK)
			rs.Expired = a.opts.Grace > 0 && age > a.opts.Grace
			rs.Stale = !rs.Expired && (r.err != nil || (a.opts.StaleAfter > 0 && age > a.opts.StaleAfter))
			for _, c := range r.counts {
				app := c.app
				app.listed = true
				if rs.Expired {
					continue
				}
				app.conc += c.Concurrency()
				app.stale = app.stale || rs.Stale
			}
		}
		snap.Replicas = append(snap.Replicas, rs)
	}
	sort.Slice(snap.Replicas, func(i, j int) bool { return snap.Replicas[i].Key < snap.Replicas[j].Key })

	stats := make([]AppStats, 0, len(a.apps))
	snap.Apps = make(map[string]*AppStats, len(a.apps))
	var changed []string
	for key, st := range a.apps {
		w, g := a.opts.Window(key)
		keep := max(w, trigger.DefaultWindow)
		if st.total != st.hist.total() {
			st.hist = st.hist.appended(now, st.total, keep, g)
		}
		woken := a.opts.Woken(key, now)
		if !st.listed && !woken && now.UnixNano()-st.hist.lastAt() > int64(keep) {
			delete(a.apps, key) // nobody counts it and its requests left every window
			if a.prev.active(key) {
				changed = append(changed, key)
			}
			continue
		}
		stats = append(stats, AppStats{Concurrency: st.conc, Stale: st.stale, hist: st.hist})
		s := &stats[len(stats)-1]
		s.Active = st.conc > 0 || woken || a.recent(st.hist, now)
		snap.FleetConcurrency += st.conc
		snap.Apps[key] = s
		if a.prev.active(key) != s.Active {
			changed = append(changed, key)
		}
	}
	if a.prev == nil || (a.prev.FleetConcurrency > 0) != (snap.FleetConcurrency > 0) {
		changed = append(changed, fleetKey)
	}
	a.prev = snap
	return snap, changed
}

// recent reports whether h's total last changed within the active hold before now.
func (a *Aggregator) recent(h history, now time.Time) bool {
	last := h.lastAt()
	return last != 0 && now.UnixNano()-last <= int64(a.opts.ActiveHold)
}

// fleetKey stands for the interceptor fleet in change notifications.
const fleetKey = ""
