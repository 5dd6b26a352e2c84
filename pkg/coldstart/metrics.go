package coldstart

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/httpscale/httpscale/pkg/admin"
)

// Metric names.
const (
	// MetricStepSeconds is a histogram of when each step of a cold start happened, in seconds after
	// its first request was held, by step (and app, unless Options.AppLabel is false).
	MetricStepSeconds = "httpscale_interceptor_cold_start_step_seconds"
	// MetricProbes counts cold-start probes by result: success, failure, timeout.
	MetricProbes = "httpscale_interceptor_cold_start_probes_total"
	// MetricProbesInFlight is the probes running now (at most Options.MaxProbes).
	MetricProbesInFlight = "httpscale_interceptor_cold_start_probes_in_flight"
)

// stepLabels are the steps the histogram has (Held is its zero; Scaled is the operator's).
var stepLabels = map[string]string{
	admin.StepWakeSent:          "wake_sent",
	admin.StepPodCreated:        "pod_created",
	admin.StepPodScheduled:      "pod_scheduled",
	admin.StepContainersStarted: "containers_started",
	admin.StepEndpointListed:    "endpoint_listed",
	admin.StepAppAnswered:       "app_answered",
	admin.StepEndpointReady:     "endpoint_ready",
	admin.StepForwarded:         "forwarded",
}

type metrics struct {
	steps    *prometheus.HistogramVec
	appLabel bool
	probes   *prometheus.CounterVec
	slots    func() float64
}

func newMetrics(reg prometheus.Registerer, appLabel bool) (*metrics, error) {
	labels := []string{"step"}
	if appLabel {
		labels = []string{"app", "step"}
	}
	m := &metrics{
		appLabel: appLabel,
		steps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    MetricStepSeconds,
			Help:    "When each step of a cold start happened, in seconds after its first request was held (pod_created, pod_scheduled and containers_started are kept to the second by the API server).",
			Buckets: []float64{.025, .05, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60},
		}, labels),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricProbes,
			Help: "Cold-start probes of starting pods, by result (success, failure, timeout).",
		}, []string{"result"}),
	}
	inFlight := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricProbesInFlight,
		Help: "Cold-start probes running now.",
	}, func() float64 {
		if m.slots == nil {
			return 0
		}
		return m.slots()
	})
	for _, c := range []prometheus.Collector{m.steps, m.probes, inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering cold-start metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) probe(err error, timedOut bool) {
	switch {
	case err == nil:
		m.probes.WithLabelValues("success").Inc()
	case timedOut:
		m.probes.WithLabelValues("timeout").Inc()
	default:
		m.probes.WithLabelValues("failure").Inc()
	}
}

// observe records a finished cold start's steps.
func (m *metrics) observe(rec admin.ColdStart) {
	held := rec.Steps[0].At
	for _, s := range rec.Steps[1:] {
		step, ok := stepLabels[s.Name]
		if !ok {
			continue
		}
		v := max(s.At.Sub(held).Seconds(), 0)
		if m.appLabel {
			m.steps.WithLabelValues(rec.App, step).Observe(v)
		} else {
			m.steps.WithLabelValues(step).Observe(v)
		}
	}
}

// Forget drops the series of an app that left the routing table.
func (t *Tracker) Forget(app string) {
	if t.metrics.appLabel {
		t.metrics.steps.DeletePartialMatch(prometheus.Labels{"app": app})
	}
}
