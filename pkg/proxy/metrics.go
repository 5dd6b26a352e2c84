package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/queue"
)

const metricPrefix = "httpscale_interceptor_"

// Metrics are the interceptor's Prometheus metrics. Labels are bounded: app is a routed
// HTTPScaledObject ("namespace/name", removed with it), code is a class (1xx..5xx, or 499 for a
// client that went away), reason is one of statusFor's reasons (for upstream_conns_discarded_total
// one of the discard reasons, see engine.DiscardCounters).
type Metrics struct {
	responses     *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	coldStarts    *prometheus.CounterVec
	coldStartWait *prometheus.HistogramVec
	rejections    *prometheus.CounterVec
	poolRefusals  *prometheus.CounterVec
	evictions     *prometheus.CounterVec
	crossZone     *prometheus.CounterVec
	upstreamErrs  *prometheus.CounterVec
	unrouted      prometheus.Counter
	queueLimit    *prometheus.GaugeVec
	discarded     engine.DiscardCounters
}

// NewMetrics registers the metrics on reg, including gauges read from registry at scrape time (in
// flight, held, requests received), so the hot path pays nothing for them.
func NewMetrics(reg prometheus.Registerer, registry *queue.Registry) (*Metrics, error) {
	app := []string{"app"}
	m := &Metrics{
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "responses_total", Help: "Responses by app and status class.",
		}, []string{"app", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricPrefix + "request_duration_seconds", Help: "Time from request to response end, holding included.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, app),
		coldStarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "cold_starts_total", Help: "Requests that arrived while the app had no ready endpoint.",
		}, app),
		coldStartWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricPrefix + "cold_start_wait_seconds", Help: "How long held requests waited for a ready endpoint.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120},
		}, app),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "queue_rejections_total", Help: "Requests refused with 503 because the app's hold queue was full.",
		}, app),
		poolRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "held_pool_refusals_total", Help: "Requests refused with 503 because the interceptor held as many requests or bytes as it may and the app held at least its fair share.",
		}, app),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "held_pool_evictions_total", Help: "Held requests answered 503 to give their room to an app below its fair share of the interceptor's pool.",
		}, app),
		crossZone: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "cross_zone_forwards_total", Help: "Requests forwarded to an endpoint in another zone than this replica's.",
		}, app),
		upstreamErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: metricPrefix + "upstream_errors_total", Help: "Requests that failed because of the upstream or a timeout (client disconnects excluded).",
		}, []string{"app", "reason"}),
		unrouted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "unrouted_requests_total", Help: "Requests answered 404 because no route matched.",
		}),
		queueLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: metricPrefix + "queue_limit", Help: "Most requests this replica holds at once for the app (its coldStart.queueLimit, else --queue-limit).",
		}, app),
	}
	discarded := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPrefix + "upstream_conns_discarded_total",
		Help: "Upstream connections closed instead of reused because the upstream sent bytes after a response (leftover) or while idle (unsolicited).",
	}, []string{"reason"})
	m.discarded = engine.DiscardCounters{
		Leftover:    discarded.WithLabelValues("leftover"),
		Unsolicited: discarded.WithLabelValues("unsolicited"),
	}
	for _, c := range []prometheus.Collector{
		m.responses, m.duration, m.coldStarts, m.coldStartWait, m.rejections, m.poolRefusals, m.evictions, m.crossZone, m.upstreamErrs,
		m.unrouted, m.queueLimit, discarded, &countsCollector{reg: registry},
	} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// forget drops every series of an app that left the routing table.
func (m *Metrics) forget(app string) {
	l := prometheus.Labels{"app": app}
	m.responses.DeletePartialMatch(l)
	m.duration.DeletePartialMatch(l)
	m.coldStarts.DeletePartialMatch(l)
	m.coldStartWait.DeletePartialMatch(l)
	m.rejections.DeletePartialMatch(l)
	m.poolRefusals.DeletePartialMatch(l)
	m.evictions.DeletePartialMatch(l)
	m.crossZone.DeletePartialMatch(l)
	m.upstreamErrs.DeletePartialMatch(l)
	m.queueLimit.DeletePartialMatch(l)
}

// appMetrics are one app's series, resolved once per routing table so the hot path does no label
// lookup.
type appMetrics struct {
	codes         [6]prometheus.Counter // indexed by codeIndex
	duration      prometheus.Observer
	coldStarts    prometheus.Counter
	coldStartWait prometheus.Observer
	rejections    prometheus.Counter
	poolRefusals  prometheus.Counter
	evictions     prometheus.Counter
	crossZone     prometheus.Counter
	queueLimit    prometheus.Gauge
}

var codeClasses = [6]string{"1xx", "2xx", "3xx", "4xx", "5xx", "499"}

func codeIndex(class string) int {
	for i, c := range codeClasses {
		if c == class {
			return i
		}
	}
	return 4
}

func (m *Metrics) forApp(app string) *appMetrics {
	am := &appMetrics{
		duration:      m.duration.WithLabelValues(app),
		coldStarts:    m.coldStarts.WithLabelValues(app),
		coldStartWait: m.coldStartWait.WithLabelValues(app),
		rejections:    m.rejections.WithLabelValues(app),
		poolRefusals:  m.poolRefusals.WithLabelValues(app),
		evictions:     m.evictions.WithLabelValues(app),
		crossZone:     m.crossZone.WithLabelValues(app),
		queueLimit:    m.queueLimit.WithLabelValues(app),
	}
	for i, c := range codeClasses {
		am.codes[i] = m.responses.WithLabelValues(app, c)
	}
	return am
}

// countsCollector exports the registry's counters at scrape time.
type countsCollector struct{ reg *queue.Registry }

var (
	inFlightDesc = prometheus.NewDesc(metricPrefix+"in_flight", "Requests forwarded and not finished (open WebSockets included).", []string{"app"}, nil)
	heldDesc     = prometheus.NewDesc(metricPrefix+"held", "Requests held waiting for a ready endpoint.", []string{"app"}, nil)
	requestsDesc = prometheus.NewDesc(metricPrefix+"requests_total", "Requests received per app.", []string{"app"}, nil)
)

func (c *countsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightDesc
	ch <- heldDesc
	ch <- requestsDesc
}

func (c *countsCollector) Collect(ch chan<- prometheus.Metric) {
	for _, a := range c.reg.Snapshot() {
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(a.InFlight), a.Key)
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(a.Held), a.Key)
		ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, float64(a.Requests), a.Key)
	}
}

// RegisterPoolMetrics registers gauges of what pool holds and its limits, read at scrape time, and
// the counts of its refusals and evictions over every app.
func RegisterPoolMetrics(reg prometheus.Registerer, pool *queue.Pool) error {
	l := pool.Limits()
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricPrefix + "held_pool_requests", Help: "Requests held for every app together.",
		}, func() float64 { n, _ := pool.Usage(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricPrefix + "held_pool_bytes", Help: "Memory charged for the held requests (a base cost plus a multiple of each head's size).",
		}, func() float64 { _, b := pool.Usage(); return float64(b) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricPrefix + "held_pool_max_requests", Help: "Bound of held_pool_requests (0: none).",
		}, func() float64 { return float64(l.MaxRequests) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: metricPrefix + "held_pool_max_bytes", Help: "Bound of held_pool_bytes (0: none).",
		}, func() float64 { return float64(l.MaxBytes) }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
