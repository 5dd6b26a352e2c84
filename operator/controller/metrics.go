package controller

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The operator's own metrics, served on --metrics-bind-address with controller-runtime's (docs/metrics.md).
// The leader sets them after each propagation probe; other replicas report zeros.
var (
	metricInterceptors = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "httpscale_operator_interceptors",
		Help: "Ready interceptor replicas at the last propagation probe, by state: current (serves the latest routing table written), behind (an older one), unreachable (did not answer).",
	}, []string{"state"})
	metricLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "httpscale_operator_propagation_lag_seconds",
		Help: "Age of the oldest routing-table write that an answering ready interceptor replica does not serve yet; 0 when every one serves the latest table.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(metricInterceptors, metricLag)
	for _, s := range []string{"current", "behind", "unreachable"} {
		metricInterceptors.WithLabelValues(s)
	}
}

// lagTracker measures how far the interceptors are behind the routing tables written: it remembers
// when each new latest version was first seen by a probe, and a replica serving an older version is
// behind since the first of those it does not serve. Safe for concurrent use.
type lagTracker struct {
	mu sync.Mutex
	// writes are (seq, first seen) of successive latest versions, oldest first; versions every replica
	// already serves are dropped, so it holds what is still propagating (bounded by maxWrites).
	writes []tableWrite
}

type tableWrite struct {
	seq uint64
	at  time.Time
}

// maxWrites bounds the remembered writes; a replica behind all of them is reported behind since the
// oldest kept, which already exceeds any alert threshold.
const maxWrites = 1024

// propagation is one probe's view of the fleet against the tables written.
type propagation struct {
	current, behind, unreachable int
	lag                          time.Duration
}

// observe records fleet f probed at now against the writer's view w and returns the propagation.
func (l *lagTracker) observe(now time.Time, w *Written, f *Fleet) propagation {
	l.mu.Lock()
	defer l.mu.Unlock()
	var p propagation
	latest, ok := w.Seq(w.Version)
	if w.Version == "" || !ok {
		l.writes = nil
		for _, r := range f.Replicas {
			if r.Err != "" {
				p.unreachable++
			} else {
				p.current++ // nothing written yet: nothing to be behind
			}
		}
		return p
	}
	if n := len(l.writes); n == 0 || l.writes[n-1].seq < latest {
		l.writes = append(l.writes, tableWrite{seq: latest, at: now})
		if len(l.writes) > maxWrites {
			l.writes = l.writes[len(l.writes)-maxWrites:]
		}
	}
	lowest := latest
	for _, r := range f.Replicas {
		if r.Err != "" {
			p.unreachable++
			continue
		}
		s, known := w.Seq(r.Version)
		if known && s >= latest {
			p.current++
			continue
		}
		p.behind++
		if !known {
			s = 0 // a version this process never wrote: behind everything it remembers
		}
		lowest = min(lowest, s)
		for _, wr := range l.writes {
			if wr.seq > s {
				p.lag = max(p.lag, now.Sub(wr.at))
				break
			}
		}
	}
	// Forget writes every answering replica serves, but keep the latest.
	i := 0
	for i < len(l.writes)-1 && l.writes[i].seq <= lowest {
		i++
	}
	l.writes = l.writes[i:]
	return p
}

// export sets the operator's propagation metrics.
func (p propagation) export() {
	metricInterceptors.WithLabelValues("current").Set(float64(p.current))
	metricInterceptors.WithLabelValues("behind").Set(float64(p.behind))
	metricInterceptors.WithLabelValues("unreachable").Set(float64(p.unreachable))
	metricLag.Set(p.lag.Seconds())
}
