package tracing_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"

	"github.com/httpscale/httpscale/pkg/tracing"
)

func TestEnabled(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"nothing set", nil, false},
		{"endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{"traces endpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{"sdk disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{"sdk disabled false", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "false"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := tracing.Enabled(func(k string) string { return tc.env[k] })
			if got != tc.want || (!got && why == "") {
				t.Errorf("Enabled = %v (%q), want %v with a reason when off", got, why, tc.want)
			}
		})
	}
}

// TestNewOffAndInvalidSettings: with tracing off New returns no provider and its Tracer is nil (the
// proxy's "off"); settings the SDK would ignore are errors naming the variable.
func TestNewOffAndInvalidSettings(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
		t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
		p, err := tracing.New(context.Background(), tracing.Options{Log: testr.New(t)})
		if p != nil || err != nil || p.Tracer("x") != nil {
			t.Fatalf("New = %v, %v; want nil, nil and a nil tracer", p, err)
		}
	})
	for _, tc := range []struct{ key, value string }{
		{"OTEL_TRACES_SAMPLER", "jaeger_remote"},
		{"OTEL_TRACES_SAMPLER_ARG", "1.5"},
		{"OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"},
		{"OTEL_TRACES_EXPORTER", "zipkin"},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
			t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
			t.Setenv(tc.key, tc.value)
			p, err := tracing.New(context.Background(), tracing.Options{Log: testr.New(t)})
			if err == nil || !strings.Contains(err.Error(), tc.value) {
				t.Fatalf("New = %v, %v; want an error naming %q", p, err, tc.value)
			}
		})
	}
}
