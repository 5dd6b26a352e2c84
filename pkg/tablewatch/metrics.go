package tablewatch

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/httpscale/httpscale/pkg/routing"
)

// Reasons a load fails, the values of the reason label of MetricLoadErrors.
const (
	// reasonIncomplete: the head is missing or names a shard that does not exist (yet).
	reasonIncomplete = "incomplete"
	// reasonCorrupt: the stored table is inconsistent or does not decode.
	reasonCorrupt = "corrupt"
	// reasonRead: the API server could not be read.
	reasonRead = "read"
	// reasonInvalid: any other decoding error.
	reasonInvalid = "invalid"
)

// Metric names.
const (
	// MetricLoadErrors counts failed load attempts by reason (incomplete, corrupt, read, invalid).
	MetricLoadErrors = "httpscale_interceptor_routing_table_load_errors_total"
	// MetricFailing is 1 while the latest stored table cannot be loaded and an older one is served.
	MetricFailing = "httpscale_interceptor_routing_table_load_failing"
	// MetricInfo is 1 for the version label of the table served.
	MetricInfo = "httpscale_interceptor_routing_table_info"
	// MetricEntries is the number of entries of the table served.
	MetricEntries = "httpscale_interceptor_routing_table_entries"
	// MetricLoadTimestamp is the Unix time of the last successful load.
	MetricLoadTimestamp = "httpscale_interceptor_routing_table_last_load_timestamp_seconds"
	// MetricStale is 1 while readiness fails because the table is stale (see stale.go).
	MetricStale = "httpscale_interceptor_routing_table_stale"
	// MetricBehind is how long the API server has held a newer head than the watch delivered, as
	// the last probe saw it; 0 when it has not.
	MetricBehind = "httpscale_interceptor_routing_table_behind_seconds"
	// MetricProbeErrors counts staleness probes the API server did not answer.
	MetricProbeErrors = "httpscale_interceptor_routing_table_probe_errors_total"
)

type metrics struct {
	loadErrors *prometheus.CounterVec
	failing    prometheus.Gauge
	info       *prometheus.GaugeVec
	entries    prometheus.Gauge
	loadedAt   prometheus.Gauge

	stale       prometheus.Gauge
	behind      prometheus.Gauge
	probeErrors prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		loadErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricLoadErrors,
			Help: "Failed routing table loads by reason; the last good table stays in use.",
		}, []string{"reason"}),
		failing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricFailing,
			Help: "1 while the stored routing table cannot be loaded and an older one is served.",
		}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricInfo,
			Help: "1 for the version of the routing table served.",
		}, []string{"version"}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricEntries,
			Help: "Entries (apps) in the routing table served.",
		}),
		loadedAt: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricLoadTimestamp,
			Help: "Unix time of the last successful routing table load.",
		}),
	}
	m.stale = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricStale,
		Help: "1 while readiness fails because the API server has held a newer routing table than the watch delivered for longer than the bound.",
	})
	m.behind = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricBehind,
		Help: "Seconds the API server has held a newer routing table head than the watch delivered, at the last probe; 0 when current.",
	})
	m.probeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: MetricProbeErrors,
		Help: "Routing table staleness probes the API server did not answer.",
	})
	for _, c := range []prometheus.Collector{m.loadErrors, m.failing, m.info, m.entries, m.loadedAt, m.stale, m.behind, m.probeErrors} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering routing table metrics: %w", err)
		}
	}
	// Expose every reason from the start, so that rate() and alerts see a zero before the first error.
	for _, r := range []string{reasonIncomplete, reasonCorrupt, reasonRead, reasonInvalid} {
		m.loadErrors.WithLabelValues(r)
	}
	return m, nil
}

func (m *metrics) loaded(oldVersion, newVersion string, entries int) {
	if oldVersion != newVersion {
		m.info.DeleteLabelValues(oldVersion)
	}
	m.info.WithLabelValues(newVersion).Set(1)
	m.entries.Set(float64(entries))
	m.failing.Set(0)
	m.loadedAt.SetToCurrentTime()
}

func reasonOf(err error) string {
	switch {
	case errors.Is(err, routing.ErrIncomplete):
		return reasonIncomplete
	case errors.Is(err, routing.ErrCorrupt):
		return reasonCorrupt
	default:
		return reasonInvalid
	}
}

// olderResourceVersion reports whether resourceVersion a is older than b, by apimachinery's
// comparison (resource versions of one resource are comparable integers since Kubernetes 1.35,
// KEP-5504). When either is not a valid one, nothing is assumed older and the table is loaded.
func olderResourceVersion(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c < 0
}
