package testenv

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// RunFunc is a binary's run function: what main calls with the signal context and os.Args[1:].
type RunFunc func(ctx context.Context, args []string) error

// CheckCleanShutdown starts a fresh API server, runs a binary's run function against it until its
// /healthz answers 200, then cancels the context as SIGTERM would and fails t unless run returns nil
// within 30 s.
func CheckCleanShutdown(t *testing.T, run RunFunc, args ...string) {
	t.Helper()
	env, _, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	kubeconfig, err := WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	probe := FreeAddr(t)
	args = append([]string{"--kubeconfig=" + kubeconfig, "--health-probe-bind-address=" + probe, "--metrics-bind-address=0"}, args...)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, args) }()

	if err := waitHealthy(ctx, "http://"+probe+"/healthz", done); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run returned %v after cancellation, want nil (clean shutdown)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancellation")
	}
}

func waitHealthy(ctx context.Context, url string, done <-chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			return fmt.Errorf("run returned before becoming healthy: %v", err)
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer 200 within 60s", url)
}

// LogBuffer collects a binary's log lines while it runs; safe for concurrent writes.
type LogBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// ExpectQuietShutdown fails t unless logs (JSON lines) end with a clean stop and hold no error-level
// line or stack trace: on a fresh install and a SIGTERM nothing asks the user to act.
func ExpectQuietShutdown(t *testing.T, logs string) {
	t.Helper()
	if !strings.Contains(logs, "stopped cleanly") {
		t.Fatalf("no stopped-cleanly line; logs:\n%s", logs)
	}
	for line := range strings.SplitSeq(logs, "\n") {
		if strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"stacktrace"`) {
			t.Errorf("error-level line on a fresh install or its shutdown: %s", line)
		}
	}
}
