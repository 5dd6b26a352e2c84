package tablewatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Staleness: a replica whose routing-table watch stopped delivering (a stalled stream, a connection
// that died without a reset) keeps routing with an old table, and its other watches (EndpointSlices)
// likely stopped too. With Options.StaleAfter set, a probe asks the API server for the head
// ConfigMap every ProbeInterval, over a connection of its own (a stall of the shared one must not
// hide itself); when the API server holds a head newer than every head the watch (or a direct read)
// delivered, and has for StaleAfter, Ready fails until a newer head arrives. A head that arrived but
// could not be loaded (corrupt, incomplete) is not staleness: every replica sees the same one, and
// failing all of them would stop the fleet; load_failing reports it. A probe that fails confirms
// nothing, so an API server that cannot be reached never fails readiness: the fleet keeps serving.

// ProbeInterval returns how often the staleness probe asks the API server for a bound: a quarter of
// it, between 1 s and 30 s.
func ProbeInterval(staleAfter time.Duration) time.Duration {
	return min(max(staleAfter/4, time.Second), 30*time.Second)
}

// ProbeClient returns a client for the staleness probe built from cfg that makes a new connection
// for every request. client-go multiplexes every request of a configuration over one HTTP/2
// connection; when that connection stops carrying data without being reset (a lost conntrack or NAT
// entry, a partition), the watches on it stall silently, and so would a probe sent over it, until
// HTTP/2's ping notices (30 s of silence, then 15 s) and the watches start over. A probe on a fresh
// connection each time (HTTP/1.1, closed after the answer) sees the API server as a new client
// would. Cost: a TLS handshake per probe.
func ProbeClient(cfg *rest.Config) (kubernetes.Interface, error) {
	c := rest.CopyConfig(cfg)
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	c.Dial = d.DialContext // a dialer of its own makes client-go build a transport of its own
	c.NextProtos = []string{"http/1.1"}
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return closeEach{rt} })
	cs, err := kubernetes.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("building the routing table's staleness probe client: %w", err)
	}
	return cs, nil
}

// closeEach asks for the connection to be closed after each answer.
type closeEach struct{ next http.RoundTripper }

func (c closeEach) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Close = true
	return c.next.RoundTrip(r)
}

// staleness decides whether the table served is stale. Its methods take the time; safe for
// concurrent use (the load loop reports heads, the probe loop the API server's, Ready asks).
type staleness struct {
	bound time.Duration

	mu        sync.Mutex
	delivered string    // the newest head resourceVersion the watch or a read delivered
	newer     string    // the API server's head when newer than delivered; "" when not
	since     time.Time // when a probe first saw a head newer than delivered
	confirmed bool      // the last probe succeeded (and saw newer, when newer is set)
	stale     bool      // the verdict Ready reports
}

// verdict is the outcome of a change of staleness, for the log line and the metrics.
type verdict struct {
	stale, changed bool
	unconfirmed    bool          // a newer head was seen, but the last probe failed
	behind         time.Duration // how long the API server has had a newer head (0: it has not)
	delivered      string
	newer          string
}

// headDelivered records a head the watch or a direct read brought (loaded or not).
func (s *staleness) headDelivered(rv string, now time.Time) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.delivered == "" || olderResourceVersion(s.delivered, rv) {
		s.delivered = rv
	}
	if s.newer != "" && !olderResourceVersion(s.delivered, s.newer) {
		s.newer, s.since = "", time.Time{}
	}
	return s.decide(now)
}

// probed records the API server's answer: rv of its head ("" when there is none), or err.
func (s *staleness) probed(rv string, err error, now time.Time) verdict {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.confirmed = err == nil
	switch {
	case err != nil:
		// Nothing confirmed; how long the table has been behind is kept.
	case rv == "" || s.delivered == "" || !olderResourceVersion(s.delivered, rv):
		s.newer, s.since = "", time.Time{}
	default:
		if s.newer == "" {
			s.since = now
		}
		s.newer = rv
	}
	return s.decide(now)
}

// decide sets the verdict: stale while the last probe confirmed a newer head that has been there
// for the bound. Callers hold s.mu.
func (s *staleness) decide(now time.Time) verdict {
	v := verdict{delivered: s.delivered, newer: s.newer}
	if s.newer != "" {
		v.behind = now.Sub(s.since)
	}
	v.stale = s.newer != "" && s.confirmed && v.behind >= s.bound
	v.unconfirmed = s.newer != "" && !s.confirmed
	v.changed = v.stale != s.stale
	s.stale = v.stale
	return v
}

// err returns why readiness fails, nil when the table is current as far as the API server said.
func (s *staleness) err(now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.stale {
		return nil
	}
	return fmt.Errorf("routing table stale: the API server has had a newer head (resourceVersion %s) for %s, more than %s, and this replica's watch delivered only %s",
		s.newer, now.Sub(s.since).Round(time.Second), s.bound, s.delivered)
}

// probeLoop asks the API server for the head every interval until ctx ends; once a probe has seen a
// newer head, the probe that can confirm the bound is made when the bound is up, not at the next
// interval after it, so that readiness fails within the bound plus one interval of the write (the
// first probe to see it) plus the probes' round trips.
func (w *Watcher) probeLoop(ctx context.Context, log logr.Logger) {
	interval := ProbeInterval(w.staleAfter)
	t := time.NewTimer(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fired := time.Now()
		rctx, cancel := context.WithTimeout(ctx, max(interval, 5*time.Second))
		head, err := w.probe.CoreV1().ConfigMaps(w.namespace).Get(rctx, w.base, metav1.GetOptions{})
		cancel()
		rv := ""
		switch {
		case err == nil:
			rv = head.ResourceVersion
		case apierrors.IsNotFound(err):
			err = nil
		case ctx.Err() != nil:
			return
		default:
			w.metrics.probeErrors.Inc()
			log.V(1).Info("routing table staleness probe failed", "error", err.Error())
		}
		v := w.stale.probed(rv, err, w.now())
		w.reportStaleness(v, log)
		next := interval - time.Since(fired) // the usual pace
		if v.newer != "" && !v.unconfirmed && !v.stale {
			next = min(next, w.staleAfter-v.behind) // the bound is up then
		}
		t.Reset(max(next, time.Millisecond))
	}
}

// reportStaleness updates the metrics and logs a change of the verdict.
func (w *Watcher) reportStaleness(v verdict, log logr.Logger) {
	w.metrics.behind.Set(v.behind.Seconds())
	if !v.changed {
		return
	}
	if v.stale {
		w.metrics.stale.Set(1)
		log.Error(errStale, "routing table stale: the API server has a newer one this replica's watch has not delivered; failing readiness until it does",
			"servedVersion", w.Version(), "deliveredResourceVersion", v.delivered, "apiResourceVersion", v.newer,
			"behind", v.behind.Round(time.Millisecond).String(), "bound", w.staleAfter.String())
		return
	}
	w.metrics.stale.Set(0)
	if v.unconfirmed {
		log.Info("routing table staleness no longer confirmed: the API server did not answer the probe; readiness no longer fails for it",
			"servedVersion", w.Version(), "deliveredResourceVersion", v.delivered, "apiResourceVersion", v.newer)
		return
	}
	log.Info("routing table current again; readiness restored", "servedVersion", w.Version(), "resourceVersion", v.delivered)
}

// errStale is logged when a replica's table turns stale.
var errStale = errors.New("routing table watch behind the API server")
