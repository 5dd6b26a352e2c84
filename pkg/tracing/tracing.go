// Package tracing sets up OpenTelemetry tracing from the standard OTEL_* environment variables: an
// OTLP trace exporter (gRPC or HTTP/protobuf), the sampler and the resource, and flushes the spans
// on shutdown as a controller-runtime Runnable.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Options configure New.
type Options struct {
	// ServiceName is the default service.name (OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
	// override it).
	ServiceName, ServiceVersion string
	// After, when set, is waited for once the Runnable's context ended, before the last spans are
	// flushed: the proxy's drain, whose requests end spans too.
	After <-chan struct{}
	// ShutdownTimeout bounds the flush on shutdown (default 5 s).
	ShutdownTimeout time.Duration
	Log             logr.Logger
}

// Provider is the tracer provider of a binary with tracing on. It is a Runnable: Start blocks until
// its context ends, then flushes the spans not yet exported and stops the exporter.
type Provider struct {
	tp   *sdktrace.TracerProvider
	opts Options
}

// Enabled reports whether the environment turns tracing on, and why not when it does not: tracing
// is off unless an OTLP endpoint is set (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and off when OTEL_SDK_DISABLED is true or
// OTEL_TRACES_EXPORTER is none.
func Enabled(getenv func(string) string) (bool, string) {
	if getenv == nil {
		getenv = os.Getenv
	}
	switch {
	case strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true"):
		return false, "OTEL_SDK_DISABLED is true"
	case strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")) == "none":
		return false, "OTEL_TRACES_EXPORTER is none"
	case getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "":
		return false, "no OTLP endpoint is set"
	}
	return true, ""
}

// New returns the provider the process environment configures, or nil (and no error) when tracing
// is off (see Enabled). The exporters read the OTLP variables (endpoint, headers, timeout, TLS,
// compression), the SDK the sampler (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG) and batching
// (OTEL_BSP_*) variables; a setting New cannot honour is an error naming the variable.
func New(ctx context.Context, o Options) (*Provider, error) {
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 5 * time.Second
	}
	if on, why := Enabled(os.Getenv); !on {
		o.Log.V(1).Info("tracing is off", "reason", why)
		return nil, nil
	}
	if err := checkEnv(os.Getenv); err != nil {
		return nil, err
	}
	exp, err := newExporter(ctx, os.Getenv)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName(o.ServiceName), semconv.ServiceVersion(o.ServiceVersion)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("tracing: building the resource: %w", err)
	}
	// Export failures are reported here (the global handler is the SDK's only channel for them).
	log := o.Log
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Error(err, "tracing") }))
	// The sampler comes from OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (checked above), the
	// batching from OTEL_BSP_*; the default samples what the caller sampled, and new traces.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	o.Log.Info("tracing is on", "protocol", protocol(os.Getenv), "sampler", samplerName(os.Getenv))
	return &Provider{tp: tp, opts: o}, nil
}

// Tracer returns the tracer named name, or nil when p is nil (tracing off).
func (p *Provider) Tracer(name string) trace.Tracer {
	if p == nil {
		return nil
	}
	return p.tp.Tracer(name)
}

// Start blocks until ctx ends, waits for Options.After, then flushes and stops the exporter within
// the shutdown timeout.
func (p *Provider) Start(ctx context.Context) error {
	<-ctx.Done()
	if p.opts.After != nil {
		<-p.opts.After
	}
	return p.Shutdown(context.Background())
}

// Shutdown flushes the spans not yet exported and stops the exporter, within the shutdown timeout.
func (p *Provider) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.opts.ShutdownTimeout)
	defer cancel()
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing spans: %w", err)
	}
	return nil
}

// NeedLeaderElection is false: every replica traces its own requests.
func (p *Provider) NeedLeaderElection() bool { return false }

// protocol is the OTLP protocol for traces; the specification's default is http/protobuf.
func protocol(getenv func(string) string) string {
	if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")); v != "" {
		return v
	}
	if v := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL")); v != "" {
		return v
	}
	return "http/protobuf"
}

func newExporter(ctx context.Context, getenv func(string) string) (sdktrace.SpanExporter, error) {
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch protocol(getenv) {
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	case "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: creating the OTLP exporter: %w", err)
	}
	return exp, nil
}

// checkEnv rejects the settings the SDK would otherwise ignore with a log line.
func checkEnv(getenv func(string) string) error {
	if v := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); v != "" && v != "otlp" {
		return fmt.Errorf("tracing: OTEL_TRACES_EXPORTER %q is not supported (otlp or none)", v)
	}
	if p := protocol(getenv); p != "grpc" && p != "http/protobuf" {
		return fmt.Errorf("tracing: OTLP protocol %q is not supported (grpc or http/protobuf)", p)
	}
	s := samplerName(getenv)
	switch s {
	case "always_on", "always_off", "parentbased_always_on", "parentbased_always_off":
	case "traceidratio", "parentbased_traceidratio":
		if arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); arg != "" {
			r, err := strconv.ParseFloat(arg, 64)
			if err != nil || r < 0 || r > 1 {
				return fmt.Errorf("tracing: OTEL_TRACES_SAMPLER_ARG %q is not a ratio between 0 and 1", arg)
			}
		}
	default:
		return errors.New("tracing: OTEL_TRACES_SAMPLER " + strconv.Quote(s) + " is not supported (always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio)")
	}
	return nil
}

// samplerName is OTEL_TRACES_SAMPLER, parentbased_always_on when unset.
func samplerName(getenv func(string) string) string {
	if s := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER"))); s != "" {
		return s
	}
	return "parentbased_always_on"
}
