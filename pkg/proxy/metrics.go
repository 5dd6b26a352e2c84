package proxy

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/queue"
)

const metricPrefix = "httpscale_interceptor_"

// PerApp chooses which of the interceptor's metrics have a series per app: the user's Prometheus
// pays for every series of every app that got a request, at every scrape.
type PerApp string

const (
	// PerAppNone: no series names an app; the counters are the fleet's, the histograms too.
	PerAppNone PerApp = "none"
	// PerAppCounters (the default): per-app counters and gauges, read at scrape time from the
	// counters the interceptor keeps anyway (pkg/queue's, 128 bytes per app that got a request),
	// and only those that are not zero; the histograms are the fleet's.
	PerAppCounters PerApp = "counters"
	// PerAppHistograms: PerAppCounters plus the two histograms per app that got a request (request
	// duration and cold-start wait: 31 series, about 5 KiB, per app).
	PerAppHistograms PerApp = "histograms"
)

// ParsePerApp parses a --per-app-metrics value.
func ParsePerApp(s string) (PerApp, error) {
	switch p := PerApp(s); p {
	case PerAppNone, PerAppCounters, PerAppHistograms:
		return p, nil
	}
	return "", fmt.Errorf("%q: want none, counters or histograms", s)
}

// Metrics are the interceptor's Prometheus metrics. Labels are bounded: app is a routed
// HTTPScaledObject ("namespace/name", gone with it) and only with PerAppCounters or
// PerAppHistograms; code is a class (1xx..5xx, or 499 for a client that went away); reason is one of
// statusFor's reasons (for upstream_conns_discarded_total one of the discard reasons, see
// engine.DiscardCounters).
//
// Per-app counters are not client_golang series: each app's outcomes are counted in its
// queue.Tally (atomic adds on the hot path) and exported by a Collector at scrape time, so an app
// costs 128 bytes once it got a request, not a set of series.
type Metrics struct {
	perApp PerApp
	// fleet counts every app's outcomes with PerAppNone.
	fleet queue.Tally
	// duration and coldStartWait are the fleet's histograms; durationVec and coldStartWaitVec the
	// per-app ones (PerAppHistograms only).
	duration, coldStartWait       prometheus.Histogram
	durationVec, coldStartWaitVec *prometheus.HistogramVec
	unrouted                      prometheus.Counter
	discarded                     engine.DiscardCounters
}

// Slots of a queue.Tally as the interceptor uses them.
const (
	slotResponses   = 0 // one per codeClasses entry
	slotColdStarts  = slotResponses + len(codeClasses)
	slotRejections  = slotColdStarts + 1
	slotCrossZone   = slotRejections + 1
	slotUpstream    = slotCrossZone + 1 // one per upstreamReasons entry
	slotPoolRefused = slotUpstream + len(upstreamReasons)
	slotEvicted     = slotPoolRefused + 1
	slotsUsed       = slotEvicted + 1
)

var _ = [queue.TallySlots - slotsUsed]struct{}{} // the slots fit in a Tally

// upstreamReasons are the reasons of upstream_errors_total: statusFor's reasons of 5xx answers that
// are not answers by design (queue_full, app_idle). Any other reason is counted as "upstream".
var upstreamReasons = [...]string{"dial", "upstream", "readiness_timeout", "response_header_timeout", "request_timeout"}

func upstreamIndex(reason string) int {
	for i, r := range upstreamReasons {
		if r == reason {
			return i
		}
	}
	return 1 // "upstream"
}

var (
	durationBuckets      = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
	coldStartWaitBuckets = []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 20, 30, 60, 120}
)

// NewMetrics registers the metrics on reg with the per-app series perApp asks for (empty: the
// default, PerAppCounters). Counters and gauges are read from registry at scrape time (in flight,
// held, requests received, outcomes), so the hot path pays only atomic adds for them.
func NewMetrics(reg prometheus.Registerer, registry *queue.Registry, perApp PerApp) (*Metrics, error) {
	if perApp == "" {
		perApp = PerAppCounters
	}
	if _, err := ParsePerApp(string(perApp)); err != nil {
		return nil, fmt.Errorf("per-app metrics %w", err)
	}
	const (
		durationName = metricPrefix + "request_duration_seconds"
		durationHelp = "Time from request to response end, holding included."
		waitName     = metricPrefix + "cold_start_wait_seconds"
		waitHelp     = "How long held requests waited for a ready endpoint."
	)
	m := &Metrics{
		perApp: perApp,
		unrouted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: metricPrefix + "unrouted_requests_total", Help: "Requests answered 404 because no route matched.",
		}),
	}
	var histograms []prometheus.Collector
	if perApp == PerAppHistograms {
		m.durationVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: durationName, Help: durationHelp, Buckets: durationBuckets}, []string{"app"})
		m.coldStartWaitVec = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: waitName, Help: waitHelp, Buckets: coldStartWaitBuckets}, []string{"app"})
		histograms = []prometheus.Collector{m.durationVec, m.coldStartWaitVec}
	} else {
		m.duration = prometheus.NewHistogram(prometheus.HistogramOpts{Name: durationName, Help: durationHelp, Buckets: durationBuckets})
		m.coldStartWait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: waitName, Help: waitHelp, Buckets: coldStartWaitBuckets})
		histograms = []prometheus.Collector{m.duration, m.coldStartWait}
	}
	discarded := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: metricPrefix + "upstream_conns_discarded_total",
		Help: "Upstream connections closed instead of reused because the upstream sent bytes after a response (leftover) or while idle (unsolicited).",
	}, []string{"reason"})
	m.discarded = engine.DiscardCounters{
		Leftover:    discarded.WithLabelValues("leftover"),
		Unsolicited: discarded.WithLabelValues("unsolicited"),
	}
	for _, c := range append(histograms, m.unrouted, discarded, &appCollector{reg: registry, m: m}) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// forget drops the per-app histograms of an app that left the routing table (its counters go with
// its queue.App).
func (m *Metrics) forget(app string) {
	if m.perApp != PerAppHistograms {
		return
	}
	l := prometheus.Labels{"app": app}
	m.durationVec.DeletePartialMatch(l)
	m.coldStartWaitVec.DeletePartialMatch(l)
}

// appMetrics is where one app's outcomes are counted, resolved on its first request so the hot
// path does no label lookup. Its methods are safe for concurrent use.
type appMetrics struct {
	tally         *queue.Tally // the app's own, or the fleet's with PerAppNone
	duration      prometheus.Observer
	coldStartWait prometheus.Observer
}

func (am *appMetrics) response(code int) {
	am.tally[slotResponses+codeIndex(codeClass(code))].Add(1)
}
func (am *appMetrics) coldStart()   { am.tally[slotColdStarts].Add(1) }
func (am *appMetrics) rejected()    { am.tally[slotRejections].Add(1) }
func (am *appMetrics) crossZone()   { am.tally[slotCrossZone].Add(1) }
func (am *appMetrics) poolRefused() { am.tally[slotPoolRefused].Add(1) }
func (am *appMetrics) evicted()     { am.tally[slotEvicted].Add(1) }
func (am *appMetrics) upstreamError(reason string) {
	am.tally[slotUpstream+upstreamIndex(reason)].Add(1)
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

func (m *Metrics) forApp(app string, counts *queue.App) *appMetrics {
	switch m.perApp {
	case PerAppNone:
		return &appMetrics{tally: &m.fleet, duration: m.duration, coldStartWait: m.coldStartWait}
	case PerAppHistograms:
		return &appMetrics{tally: counts.Tally(), duration: m.durationVec.WithLabelValues(app), coldStartWait: m.coldStartWaitVec.WithLabelValues(app)}
	}
	return &appMetrics{tally: counts.Tally(), duration: m.duration, coldStartWait: m.coldStartWait}
}

// appCollector exports the registry's counters and every app's Tally at scrape time (or, with
// PerAppNone, their sums and the fleet's Tally). A counter that is zero is left out, so an app
// that only ever got 2xx answers costs five series: in_flight, held, requests_total, queue_limit and
// responses_total{code="2xx"}.
type appCollector struct {
	reg *queue.Registry
	m   *Metrics
}

var (
	inFlightDesc    = prometheus.NewDesc(metricPrefix+"in_flight", "Requests forwarded and not finished (open WebSockets included).", []string{"app"}, nil)
	heldDesc        = prometheus.NewDesc(metricPrefix+"held", "Requests held waiting for a ready endpoint.", []string{"app"}, nil)
	requestsDesc    = prometheus.NewDesc(metricPrefix+"requests_total", "Requests received per app.", []string{"app"}, nil)
	responsesDesc   = prometheus.NewDesc(metricPrefix+"responses_total", "Responses by app and status class.", []string{"app", "code"}, nil)
	coldStartsDesc  = prometheus.NewDesc(metricPrefix+"cold_starts_total", "Requests that arrived while the app had no ready endpoint.", []string{"app"}, nil)
	rejectedDesc    = prometheus.NewDesc(metricPrefix+"queue_rejections_total", "Requests refused with 503 because the app's hold queue was full.", []string{"app"}, nil)
	crossZoneDesc   = prometheus.NewDesc(metricPrefix+"cross_zone_forwards_total", "Requests forwarded to an endpoint in another zone than this replica's.", []string{"app"}, nil)
	poolRefusedDesc = prometheus.NewDesc(metricPrefix+"held_pool_refusals_total", "Requests refused with 503 because the interceptor held as many requests or bytes as it may and the app held at least its fair share.", []string{"app"}, nil)
	evictedDesc     = prometheus.NewDesc(metricPrefix+"held_pool_evictions_total", "Held requests answered 503 to give their room to an app below its fair share of the interceptor's pool.", []string{"app"}, nil)
	upstreamDesc    = prometheus.NewDesc(metricPrefix+"upstream_errors_total", "Requests that failed because of the upstream or a timeout (client disconnects excluded).", []string{"app", "reason"}, nil)
	queueLimitDesc  = prometheus.NewDesc(metricPrefix+"queue_limit", "Most requests this replica holds at once for the app (its coldStart.queueLimit, else --queue-limit).", []string{"app"}, nil)

	// The fleet's, with PerAppNone.
	fleetInFlightDesc    = prometheus.NewDesc(metricPrefix+"in_flight", "Requests forwarded and not finished (open WebSockets included).", nil, nil)
	fleetHeldDesc        = prometheus.NewDesc(metricPrefix+"held", "Requests held waiting for a ready endpoint.", nil, nil)
	fleetResponsesDesc   = prometheus.NewDesc(metricPrefix+"responses_total", "Responses by status class.", []string{"code"}, nil)
	fleetColdStartsDesc  = prometheus.NewDesc(metricPrefix+"cold_starts_total", "Requests that arrived while their app had no ready endpoint.", nil, nil)
	fleetRejectedDesc    = prometheus.NewDesc(metricPrefix+"queue_rejections_total", "Requests refused with 503 because their app's hold queue was full.", nil, nil)
	fleetCrossZoneDesc   = prometheus.NewDesc(metricPrefix+"cross_zone_forwards_total", "Requests forwarded to an endpoint in another zone than this replica's.", nil, nil)
	fleetPoolRefusedDesc = prometheus.NewDesc(metricPrefix+"held_pool_refusals_total", "Requests refused with 503 because the interceptor held as many requests or bytes as it may and their app held at least its fair share.", nil, nil)
	fleetEvictedDesc     = prometheus.NewDesc(metricPrefix+"held_pool_evictions_total", "Held requests answered 503 to give their room to an app below its fair share of the interceptor's pool.", nil, nil)
	fleetUpstreamDesc    = prometheus.NewDesc(metricPrefix+"upstream_errors_total", "Requests that failed because of the upstream or a timeout (client disconnects excluded).", []string{"reason"}, nil)
)

// Describe sends nothing: the collector is unchecked, since which of its series exist depends on
// the traffic (and the fleet's descriptors share names with the per-app ones).
func (c *appCollector) Describe(chan<- *prometheus.Desc) {}

func (c *appCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.perApp == PerAppNone {
		c.collectFleet(ch)
		return
	}
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		if v != 0 {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
		}
	}
	for a := range c.reg.Apps() {
		ct, key := a.Count(), a.Key()
		ch <- prometheus.MustNewConstMetric(inFlightDesc, prometheus.GaugeValue, float64(ct.InFlight), key)
		ch <- prometheus.MustNewConstMetric(heldDesc, prometheus.GaugeValue, float64(ct.Held), key)
		ch <- prometheus.MustNewConstMetric(requestsDesc, prometheus.CounterValue, float64(ct.Requests), key)
		t := a.Tallied()
		if t == nil {
			continue
		}
		// The limit of the table that served the app's latest first request (set before its Tally
		// exists, see app.series), next to held for the hold-queue alert.
		ch <- prometheus.MustNewConstMetric(queueLimitDesc, prometheus.GaugeValue, float64(a.QueueLimit()), key)
		for i, class := range codeClasses {
			counter(responsesDesc, t[slotResponses+i].Load(), key, class)
		}
		counter(coldStartsDesc, t[slotColdStarts].Load(), key)
		counter(rejectedDesc, t[slotRejections].Load(), key)
		counter(crossZoneDesc, t[slotCrossZone].Load(), key)
		counter(poolRefusedDesc, t[slotPoolRefused].Load(), key)
		counter(evictedDesc, t[slotEvicted].Load(), key)
		for i, reason := range upstreamReasons {
			counter(upstreamDesc, t[slotUpstream+i].Load(), key, reason)
		}
	}
}

// collectFleet exports the fleet's gauges (summed over apps) and counters (the fleet's Tally, which
// removing an app does not lower).
func (c *appCollector) collectFleet(ch chan<- prometheus.Metric) {
	var inFlight, held int64
	for a := range c.reg.Apps() {
		inFlight += a.InFlight()
		held += a.Held()
	}
	ch <- prometheus.MustNewConstMetric(fleetInFlightDesc, prometheus.GaugeValue, float64(inFlight))
	ch <- prometheus.MustNewConstMetric(fleetHeldDesc, prometheus.GaugeValue, float64(held))
	t := &c.m.fleet
	for i, class := range codeClasses {
		ch <- prometheus.MustNewConstMetric(fleetResponsesDesc, prometheus.CounterValue, float64(t[slotResponses+i].Load()), class)
	}
	ch <- prometheus.MustNewConstMetric(fleetColdStartsDesc, prometheus.CounterValue, float64(t[slotColdStarts].Load()))
	ch <- prometheus.MustNewConstMetric(fleetRejectedDesc, prometheus.CounterValue, float64(t[slotRejections].Load()))
	ch <- prometheus.MustNewConstMetric(fleetCrossZoneDesc, prometheus.CounterValue, float64(t[slotCrossZone].Load()))
	ch <- prometheus.MustNewConstMetric(fleetPoolRefusedDesc, prometheus.CounterValue, float64(t[slotPoolRefused].Load()))
	ch <- prometheus.MustNewConstMetric(fleetEvictedDesc, prometheus.CounterValue, float64(t[slotEvicted].Load()))
	for i, reason := range upstreamReasons {
		ch <- prometheus.MustNewConstMetric(fleetUpstreamDesc, prometheus.CounterValue, float64(t[slotUpstream+i].Load()), reason)
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
