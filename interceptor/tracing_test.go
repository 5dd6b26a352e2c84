package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/tracing/tracingtest"
)

// TestTracingFromTheEnvironment runs the interceptor as the binary runs it with the standard OTEL_*
// variables pointing at an in-process OTLP receiver: a request with a caller's traceparent gets a
// server span of the interceptor's service, child of the caller's span, and the backend a
// traceparent naming that span. The batch interval is longer than the test, so the span arrives
// only because the interceptor flushes on shutdown.
func TestTracingFromTheEnvironment(t *testing.T) {
	col := tracingtest.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.HTTPEndpoint())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=interceptor-0")
	seen := make(chan string, 1)
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Traceparent")
	}))
	t.Cleanup(be.Close)
	file := filepath.Join(t.TempDir(), "routes.yaml")
	if err := os.WriteFile(file, []byte(hso("shop", "shop.example.com", "shop", be.Listener.Addr().String())), 0o600); err != nil {
		t.Fatal(err)
	}
	proxyAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	stop := startRun(t, []string{
		"--standalone=" + file, "--kubeconfig=" + filepath.Join(t.TempDir(), "no-such-kubeconfig"),
		"--proxy-bind-address=" + proxyAddr, "--admin-bind-address=" + adminAddr,
		"--drain-delay=0", "--drain-timeout=5s",
	}, runOptions{logs: &testenv.LogBuffer{}})
	testenv.Eventually(t, 30*time.Second, "the admin port is ready", func() bool {
		resp, err := http.Get("http://" + adminAddr + admin.PathReadyz)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	const traceID, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req, _ := http.NewRequest(http.MethodGet, "http://"+proxyAddr+"/cart", nil)
	req.Host = "shop.example.com"
	req.Header.Set("Traceparent", "00-"+traceID+"-"+parent+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	backendTP := <-seen
	if n := len(col.Spans()); n != 0 {
		t.Fatalf("%d spans exported before shutdown with a 10 min batch interval", n)
	}

	stop()
	s := col.WaitSpan(t, 5*time.Second, func(s tracingtest.Span) bool { return s.TraceID() == traceID })
	if s.ParentID() != parent || backendTP != "00-"+traceID+"-"+s.SpanID()+"-01" {
		t.Errorf("span parent %s (want %s); backend got %q, want the span %s", s.ParentID(), parent, backendTP, s.SpanID())
	}
	if s.Resource["service.name"] != "httpscale-interceptor" || s.Resource["k8s.pod.name"] != "interceptor-0" ||
		s.Attrs()["httpscale.app"] != "default/shop" {
		t.Errorf("span resource %v, attributes %v; want the interceptor's service, the pod, the app default/shop", s.Resource, s.Attrs())
	}
}
