package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/gcheadroom"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// TestRunServesAdminAndProxyAndStopsCleanlyOnCancel starts the interceptor as on a fresh install,
// before the operator wrote any routing table, and stops it: it serves its admin port, says why it
// is not ready, refuses proxy connections until the first table is written and then answers them,
// and logs nothing at error level (no table yet and shutting down are normal states).
func TestRunServesAdminAndProxyAndStopsCleanlyOnCancel(t *testing.T) {
	env, cfg := testenv.StartT(t)
	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	args := []string{
		"--kubeconfig=" + kubeconfig, "--health-probe-bind-address=" + testenv.FreeAddr(t),
		"--proxy-bind-address=" + proxyAddr, "--admin-bind-address=" + adminAddr,
		"--namespace=" + installNS, "--drain-delay=0", "--drain-timeout=5s", "--gc-percent=321",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	logs := &testenv.LogBuffer{}
	go func() { done <- run(ctx, args, runOptions{logs: logs}) }()

	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if code, _ := get("http://" + adminAddr + admin.PathHealthz); code == http.StatusOK {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("run returned before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("admin port did not answer /healthz within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// --gc-percent is the GC target of a small heap (GOGC, when set, wins); the tuner lowers it for
	// a large live heap (pkg/gcheadroom), which the race detector and a busy machine make, so the
	// target in effect is what the tuner derives from the live heap the last collection measured.
	if os.Getenv("GOGC") == "" {
		want := gcheadroom.Options{MaxPercent: 321, MinPercent: min(321, gcMinPercent), Headroom: gcHeadroom}
		var live uint64
		var got int64
		testenv.Eventually(t, 30*time.Second, "the GC target is the tuner's for --gc-percent 321", func() bool {
			var stable bool
			live, got, stable = gcState()
			if stable && got == int64(want.Percent(live)) {
				return true
			}
			// The tuner applies a collection's figure just after it; a collection started now
			// gives it one to apply, whatever else the process allocates meanwhile.
			runtime.GC()
			return false
		})
		if got > 321 {
			t.Errorf("GC percent %d above --gc-percent's 321 (live heap %d bytes)", got, live)
		}
	}
	code, body := get("http://" + adminAddr + admin.PathStatus)
	var st admin.Status
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Draining {
		t.Errorf("/status: %d %q", code, body)
	}
	if code, body := get("http://" + adminAddr + admin.PathCounts); code != http.StatusOK || !strings.Contains(body, `"full":true`) {
		t.Errorf("/counts: %d %q", code, body)
	}
	if code, body := get("http://" + adminAddr + admin.PathMetrics); code != http.StatusOK || !strings.Contains(body, "httpscale_interceptor_unrouted_requests_total") {
		t.Errorf("/metrics: %d, missing the interceptor's metrics", code)
	}
	if code, body := get("http://" + proxyAddr + "/"); code != 0 || !strings.Contains(body, "connection refused") {
		t.Errorf("proxy port before the first routing table: %d %q, want the connection refused", code, body)
	}
	waiting := `"msg":"waiting for the operator to write the first routing table"`
	for !strings.Contains(logs.String(), waiting) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s line within 60s; logs:\n%s", waiting, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body := get("http://" + adminAddr + admin.PathReadyz); code == http.StatusOK || !strings.Contains(body, "the operator has not written a routing table yet") {
		t.Errorf("/readyz without a table: %d %q, want a failure saying the operator has not written a table", code, body)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	writeTable(t, cs, nil)
	testenv.Eventually(t, 30*time.Second, "the proxy port answers once the first table is written", func() bool {
		code, _ := get("http://" + proxyAddr + "/")
		return code != 0
	})
	if code, body := get("http://" + proxyAddr + "/"); code != http.StatusNotFound || body != "Not Found: no_route\n" {
		t.Errorf("proxy port for an unknown host: %d %q, want 404", code, body)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancellation, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancellation")
	}
	testenv.ExpectQuietShutdown(t, logs.String())
}

// gcState reads the live heap the last collection measured and the GC target in effect, without
// changing either; stable is false when a collection ended between the two reads.
func gcState() (live uint64, percent int64, stable bool) {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/live:bytes"}, {Name: "/gc/gogc:percent"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s[:3])
	metrics.Read(s[3:])
	return s[1].Value.Uint64(), int64(s[2].Value.Uint64()), s[0].Value.Uint64() == s[3].Value.Uint64()
}
