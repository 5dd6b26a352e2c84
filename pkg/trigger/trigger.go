// Package trigger is the contract between the operator, which writes the metadata of the external-push
// trigger in every KEDA ScaledObject it creates, and the scaler, which receives that metadata from KEDA
// with each call and learns from it which app is meant and which targets to report.
package trigger

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/httpscale/httpscale/pkg/appkey"
)

// Type is the KEDA trigger type the operator writes.
const Type = "external-push"

// Metadata keys.
const (
	// KeyScalerAddress is KEDA's own key: host:port of the scaler's gRPC service.
	KeyScalerAddress = "scalerAddress"
	// KeyHTTPScaledObject names the app as "namespace/name" of its HTTPScaledObject.
	KeyHTTPScaledObject = "httpScaledObject"
	// KeyConcurrencyTarget is the per-replica concurrency target (in-flight + held); absent when the app
	// does not scale on concurrency.
	KeyConcurrencyTarget = "concurrencyTarget"
	// KeyRequestRateTarget is the per-replica request-rate target (requests per second); absent when the
	// app does not scale on request rate.
	KeyRequestRateTarget = "requestRateTarget"
	// KeyRequestRateWindow and KeyRequestRateGranularity shape the rate (Go durations).
	KeyRequestRateWindow      = "requestRateWindow"
	KeyRequestRateGranularity = "requestRateGranularity"
	// KeyInterceptorFleet set to "true" selects the interceptor fleet's own metric (concurrency summed
	// over every app) instead of an app's; KeyConcurrencyTarget is then the per-interceptor target.
	KeyInterceptorFleet = "interceptorFleet"
)

// Metric names reported by GetMetricSpec. KEDA prefixes each with the trigger index ("s0-"), so they
// only have to be unique within one ScaledObject.
const (
	MetricConcurrency = "concurrency"
	MetricRequestRate = "request-rate"
	MetricFleet       = "interceptor-concurrency"
)

// Defaults applied when a key is missing.
const (
	DefaultWindow      = time.Minute
	DefaultGranularity = time.Second
)

// Metadata is the parsed trigger metadata.
type Metadata struct {
	// App is the HTTPScaledObject's "namespace/name"; empty for the fleet metric.
	App string
	// Fleet selects the interceptor fleet's metric.
	Fleet bool
	// ConcurrencyTarget is the per-replica concurrency target; 0 means not scaled on concurrency.
	ConcurrencyTarget float64
	// RequestRateTarget is the per-replica request-rate target; 0 means not scaled on request rate.
	RequestRateTarget float64
	// Window and Granularity shape the request rate.
	Window, Granularity time.Duration
}

// Encode returns the trigger metadata for m, including the scaler address.
func (m Metadata) Encode(scalerAddress string) map[string]string {
	md := map[string]string{KeyScalerAddress: scalerAddress}
	if m.Fleet {
		md[KeyInterceptorFleet] = "true"
	} else {
		md[KeyHTTPScaledObject] = m.App
	}
	if m.ConcurrencyTarget > 0 {
		md[KeyConcurrencyTarget] = formatFloat(m.ConcurrencyTarget)
	}
	if m.RequestRateTarget > 0 {
		md[KeyRequestRateTarget] = formatFloat(m.RequestRateTarget)
		md[KeyRequestRateWindow] = orDefault(m.Window, DefaultWindow).String()
		md[KeyRequestRateGranularity] = orDefault(m.Granularity, DefaultGranularity).String()
	}
	return md
}

// Parse reads trigger metadata as KEDA passes it to the scaler. Errors name the key and say what is
// expected, since KEDA shows them in the ScaledObject's events.
func Parse(md map[string]string) (Metadata, error) {
	var m Metadata
	var errs []error
	if v := md[KeyInterceptorFleet]; v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: want true or false, got %q", KeyInterceptorFleet, clip(v)))
		}
		m.Fleet = b
	}
	if !m.Fleet {
		m.App = md[KeyHTTPScaledObject]
		if _, err := appkey.Parse(m.App); err != nil {
			errs = append(errs, fmt.Errorf("%s: want namespace/name of an HTTPScaledObject, got %q", KeyHTTPScaledObject, clip(m.App)))
		}
	}
	var err error
	if m.ConcurrencyTarget, err = parseTarget(md, KeyConcurrencyTarget); err != nil {
		errs = append(errs, err)
	}
	if m.RequestRateTarget, err = parseTarget(md, KeyRequestRateTarget); err != nil {
		errs = append(errs, err)
	}
	if m.Window, err = parseDuration(md, KeyRequestRateWindow, DefaultWindow); err != nil {
		errs = append(errs, err)
	}
	if m.Granularity, err = parseDuration(md, KeyRequestRateGranularity, DefaultGranularity); err != nil {
		errs = append(errs, err)
	}
	if m.Granularity > m.Window {
		errs = append(errs, fmt.Errorf("%s %s must not be longer than %s %s", KeyRequestRateGranularity, m.Granularity, KeyRequestRateWindow, m.Window))
	}
	if m.ConcurrencyTarget == 0 && m.RequestRateTarget == 0 {
		errs = append(errs, fmt.Errorf("set %s and/or %s", KeyConcurrencyTarget, KeyRequestRateTarget))
	}
	if err := errors.Join(errs...); err != nil {
		return Metadata{}, fmt.Errorf("invalid httpscale trigger metadata: %w", err)
	}
	return m, nil
}

func parseTarget(md map[string]string, key string) (float64, error) {
	v, ok := md[key]
	if !ok || v == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || math.IsInf(f, 1) { // NaN and +Inf parse, and are no target
		return 0, fmt.Errorf("%s: want a positive number, got %q", key, clip(v))
	}
	return f, nil
}

func parseDuration(md map[string]string, key string, def time.Duration) (time.Duration, error) {
	v, ok := md[key]
	if !ok || v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s: want a positive duration such as 1m, got %q", key, clip(v))
	}
	return d, nil
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// clip shortens a metadata value quoted in an error: the metadata comes from whoever calls the
// scaler, and an error must not echo megabytes back to it or into a log.
func clip(v string) string {
	const n = 64
	if len(v) <= n {
		return v
	}
	return v[:n] + "..."
}
