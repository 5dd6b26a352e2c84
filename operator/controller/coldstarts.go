package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/appkey"
)

// ColdStarts gathers the cold starts the interceptors record (admin.PathColdStarts, fetched in the
// propagation probe's rounds when a replica's Status says it has new ones), keeps each app's latest,
// adds when KEDA scaled the workload (the ScaledObject's Active condition turning True, as this
// operator's cache saw it), and has the app's object reconciled so that its status shows it. Safe for
// concurrent use; no lock is held across a call to an interceptor.
type ColdStarts struct {
	Admin admin.Client
	// Enqueue asks for a reconcile of the objects named by app keys.
	Enqueue func(keys []string)
	Log     logr.Logger

	scaledSeconds prometheus.Histogram

	mu       sync.Mutex
	fetching map[string]bool            // by replica address: a fetch is running
	cursors  map[string]cursor          // by replica address: what was fetched
	latest   map[string]admin.ColdStart // by app key
	scaled   map[string][]time.Time     // by app key: the latest Active transitions, oldest first
}

type cursor struct {
	epoch string
	seq   uint64
}

// maxScaledTimes bounds the Active transitions remembered per app.
const maxScaledTimes = 4

// NewColdStarts returns a ColdStarts whose histogram of KEDA's part is registered on reg (nil: none);
// an operator started again in the same process (tests) shares the histogram registered first.
func NewColdStarts(c admin.Client, enqueue func([]string), reg prometheus.Registerer, log logr.Logger) (*ColdStarts, error) {
	cs := &ColdStarts{Admin: c, Enqueue: enqueue, Log: log,
		fetching: map[string]bool{}, cursors: map[string]cursor{}, latest: map[string]admin.ColdStart{}, scaled: map[string][]time.Time{},
		scaledSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "httpscale_operator_cold_start_scaled_seconds",
			Help:    "Seconds from a cold start's first held request until KEDA reported the workload scaled from zero (its ScaledObject turning Active), as this operator saw it.",
			Buckets: []float64{.025, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
		}),
	}
	if reg != nil {
		if err := reg.Register(cs.scaledSeconds); err != nil {
			are, ok := err.(prometheus.AlreadyRegisteredError)
			if !ok {
				return nil, err
			}
			cs.scaledSeconds = are.ExistingCollector.(prometheus.Histogram)
		}
	}
	return cs, nil
}

// Fetch reads the cold starts replica baseURL recorded since the last fetch, when its status says it
// has new ones. It blocks for at most one round trip, bounded by ctx; a replica that fails is asked
// again at the next round.
func (c *ColdStarts) Fetch(ctx context.Context, baseURL string, st admin.Status) {
	c.mu.Lock()
	cur := c.cursors[baseURL]
	if st.ColdStartEpoch == "" || (cur.epoch == st.ColdStartEpoch && cur.seq >= st.ColdStartSeq) || c.fetching[baseURL] {
		c.mu.Unlock()
		return
	}
	c.fetching[baseURL] = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.fetching, baseURL)
		c.mu.Unlock()
	}()
	got, err := c.Admin.ColdStarts(ctx, baseURL, cur.seq, cur.epoch)
	if err != nil {
		c.Log.V(1).Info("reading an interceptor's cold starts", "replica", baseURL, "error", err.Error())
		return
	}
	var changed []string
	c.mu.Lock()
	c.cursors[baseURL] = cursor{epoch: got.Epoch, seq: got.Seq}
	for _, rec := range got.ColdStarts {
		if c.take(rec) {
			changed = append(changed, rec.App)
			if at := withScaled(rec, c.scaled[rec.App]).Step(admin.StepScaled); !at.IsZero() {
				c.scaledSeconds.Observe(max(at.Sub(rec.Steps[0].At).Seconds(), 0))
			}
		}
	}
	c.mu.Unlock()
	if len(changed) > 0 && c.Enqueue != nil {
		c.Enqueue(changed)
	}
}

// take keeps rec as its app's latest cold start when it is later than the one kept, or the same cold
// start (the same pod) seen from an interceptor that held a request earlier. c.mu held.
func (c *ColdStarts) take(rec admin.ColdStart) bool {
	held := rec.Steps[0].At
	if cur, ok := c.latest[rec.App]; ok {
		curHeld := cur.Steps[0].At
		same := rec.Pod != "" && rec.Pod == cur.Pod
		if (same && !held.Before(curHeld)) || (!same && !held.After(curHeld)) {
			return false
		}
	}
	c.latest[rec.App] = rec
	return true
}

// Forget drops what is kept of an app (its object is gone).
func (c *ColdStarts) Forget(app string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.latest, app)
	delete(c.scaled, app)
}

// Scaled records that the ScaledObject of app turned Active at at.
func (c *ColdStarts) Scaled(app string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := append(c.scaled[app], at)
	if len(ts) > maxScaledTimes {
		ts = ts[len(ts)-maxScaledTimes:]
	}
	c.scaled[app] = ts
}

// skew allows for the clocks of the interceptor and the operator (NTP keeps nodes within a few
// milliseconds): a transition this much before the first held request is still the cold start's.
const skew = 250 * time.Millisecond

// Latest returns app's latest cold start with the Scaled step when KEDA turned Active during it.
func (c *ColdStarts) Latest(app string) (admin.ColdStart, bool) {
	c.mu.Lock()
	rec, ok := c.latest[app]
	scaled := slices.Clone(c.scaled[app])
	c.mu.Unlock()
	if !ok {
		return admin.ColdStart{}, false
	}
	return withScaled(rec, scaled), true
}

// withScaled returns rec with the Scaled step of the first of the Active transitions scaled that
// happened during it.
func withScaled(rec admin.ColdStart, scaled []time.Time) admin.ColdStart {
	rec.Steps = slices.Clone(rec.Steps)
	held, last := rec.Steps[0].At, rec.Steps[len(rec.Steps)-1].At
	for _, at := range scaled {
		if !at.Before(held.Add(-skew)) && !at.After(last) {
			rec.Steps = append(rec.Steps, admin.ColdStartStep{Name: admin.StepScaled, At: at})
			slices.SortStableFunc(rec.Steps[1:], func(a, b admin.ColdStartStep) int { return a.At.Compare(b.At) })
			break
		}
	}
	return rec
}

// watchScaledObjects records every ScaledObject's Active condition turning True.
func (c *ColdStarts) watchScaledObjects(inf crcache.Informer) error {
	_, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*kedav1alpha1.ScaledObject)
			n, ok2 := newObj.(*kedav1alpha1.ScaledObject)
			if ok1 && ok2 && kedaActive(o) != metav1.ConditionTrue && kedaActive(n) == metav1.ConditionTrue {
				c.Scaled(appkey.New(n.Namespace, n.Name).String(), time.Now())
			}
		},
	})
	return err
}

// setColdStartStatus puts the app's latest cold start into status.lastColdStart.
func (r *Reconciler) setColdStartStatus(hso *v1.HTTPScaledObject, key string) {
	if r.ColdStarts == nil {
		return
	}
	rec, ok := r.ColdStarts.Latest(key)
	if !ok {
		return
	}
	// What is kept decides (ColdStarts.take): a restarted operator reads every replica's records
	// again before it shows one.
	hso.Status.LastColdStart = coldStartStatus(rec)
}

// coldStartStatus is rec as status shows it: times to the microsecond (as the API server keeps a
// MicroTime), offsets from the first held request to the millisecond.
func coldStartStatus(rec admin.ColdStart) *v1.ColdStartStatus {
	micro := func(t time.Time) metav1.MicroTime { return metav1.NewMicroTime(t.UTC().Truncate(time.Microsecond)) }
	held := rec.Steps[0].At.UTC().Truncate(time.Microsecond)
	st := &v1.ColdStartStatus{HeldAt: micro(held), Interceptor: rec.Interceptor, Pod: rec.Pod, Probe: rec.Probe, Outcome: rec.Outcome}
	for _, s := range rec.Steps {
		source := "interceptor"
		switch {
		case s.Coarse:
			source = "kubernetes"
		case s.Name == admin.StepScaled:
			source = "operator"
		}
		at := s.At.UTC().Truncate(time.Microsecond)
		st.Steps = append(st.Steps, v1.ColdStartStep{Name: s.Name, At: micro(at), After: at.Sub(held).Round(time.Millisecond).String(), Source: source})
		if s.Name == admin.StepForwarded {
			st.Total = at.Sub(held).Round(time.Millisecond).String()
		}
	}
	if len(st.Steps) > admin.MaxColdStartSteps {
		st.Steps = st.Steps[:admin.MaxColdStartSteps]
	}
	return st
}
