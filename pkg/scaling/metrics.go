package scaling

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/httpscale/httpscale/pkg/admin"
)

// Prometheus metrics of the scaler, served on the manager's metrics endpoint. Labels are bounded:
// none carries an app or a replica name.
var (
	metricReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "httpscale_scaler_interceptor_replicas",
		Help: "Interceptor replicas known to the scaler, by state: healthy, stale (last counts kept for the grace period), expired (ignored) or unknown (never answered yet).",
	}, []string{"state"})
	metricPollErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "httpscale_scaler_poll_errors_total",
		Help: "Failed polls of an interceptor replica's counts, by reason: timeout, invalid (an answer with impossible counts), too_large (a body over the limit) or failed (any other error). The log names the replica.",
	}, []string{"reason"})
	metricCycleSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "httpscale_scaler_poll_cycle_seconds",
		Help:    "Time from the start of a poll cycle to the snapshot it produced.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	})
	metricApps = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "httpscale_scaler_apps",
		Help: "Apps in the latest snapshot.",
	})
	metricWakes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "httpscale_scaler_wake_notices_total",
		Help: "Wake notices received from interceptor replicas.",
	})
	metricWakesDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "httpscale_scaler_wake_notices_dropped_total",
		Help: "Wake notices dropped, by reason: malformed (not a namespace/name app key) or rate (a replica sent more than its limit). The log names the replica.",
	}, []string{"reason"})
	metricWakeDelay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "httpscale_scaler_wake_notice_delay_seconds",
		Help:    "Time from an interceptor replica's wake notice (its time, at the held request) to the scaler pushing it to KEDA's streams (the scaler's time; the two clocks may differ by their skew).",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	})
	metricWakeReconnects = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "httpscale_scaler_wake_stream_reconnects_total",
		Help: "Wake streams that broke and were reopened.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(metricReplicas, metricPollErrors, metricCycleSeconds, metricApps, metricWakes, metricWakesDropped, metricWakeDelay, metricWakeReconnects)
}

func recordSnapshot(s *Snapshot) {
	var healthy, stale, expired, unknown float64
	for _, r := range s.Replicas {
		switch {
		case r.LastSuccess.IsZero():
			unknown++
		case r.Expired:
			expired++
		case r.Stale:
			stale++
		default:
			healthy++
		}
	}
	metricReplicas.WithLabelValues("unknown").Set(unknown)
	metricReplicas.WithLabelValues("healthy").Set(healthy)
	metricReplicas.WithLabelValues("stale").Set(stale)
	metricReplicas.WithLabelValues("expired").Set(expired)
	metricApps.Set(float64(len(s.Apps)))
}

// pollErrorReason is the metric label of a failed poll.
func pollErrorReason(err error) string {
	switch {
	case errors.Is(err, admin.ErrInvalidCounts):
		return "invalid"
	case errors.Is(err, admin.ErrBodyTooLarge):
		return "too_large"
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "failed"
	}
}
