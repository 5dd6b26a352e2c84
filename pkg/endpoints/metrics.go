package endpoints

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names.
const (
	// MetricCachedSlices is the number of EndpointSlices the cache holds: those of routed Services only.
	MetricCachedSlices = "httpscale_interceptor_endpointslices_cached"
	// MetricWatches is the number of EndpointSlice watches open.
	MetricWatches = "httpscale_interceptor_endpointslice_watches"
	// MetricTrackedKeys is the number of Service ports tracked.
	MetricTrackedKeys = "httpscale_interceptor_endpoints_tracked_ports"
)

// registerMetrics registers gauges read from c at scrape time.
func registerMetrics(reg prometheus.Registerer, c *Cache) error {
	for _, col := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricCachedSlices,
			Help: "EndpointSlices held by the endpoint cache (routed Services only).",
		}, func() float64 { return float64(c.CachedSlices()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricWatches,
			Help: "EndpointSlice watches open (per namespace and bucket of routed Services).",
		}, func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			return float64(len(c.active) + len(c.pending))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: MetricTrackedKeys,
			Help: "Service ports whose ready endpoints are tracked.",
		}, func() float64 {
			c.mu.Lock()
			defer c.mu.Unlock()
			n := 0
			for _, p := range c.ports {
				n += len(p)
			}
			return float64(n)
		}),
	} {
		if err := reg.Register(col); err != nil {
			return fmt.Errorf("registering endpoint cache metrics: %w", err)
		}
	}
	return nil
}
