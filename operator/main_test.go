package main

import (
	"context"
	"flag"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// TestRunStopsCleanlyOnCancel runs the operator as a fresh install with leader election, stops it as
// SIGTERM does, and fails on any error-level line: releasing the lease on purpose, and client-go's
// lease calls cancelled by the stop, are normal and logged as info lines.
func TestRunStopsCleanlyOnCancel(t *testing.T) {
	logs := &testenv.LogBuffer{}
	testenv.CheckCleanShutdown(t, func(ctx context.Context, args []string) error {
		return runWithLogs(ctx, args, logs)
	}, "--leader-elect=true", "--namespace=default", "--webhook-bind-address=0")
	testenv.ExpectQuietShutdown(t, logs.String())
}

// TestPprofServedOnlyWhenAsked runs the built operator with --pprof-bind-address and fetches the
// profile index from it; the flag's default is off.
func TestPprofServedOnlyWhenAsked(t *testing.T) {
	env, _ := testenv.StartT(t)
	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pprofAddr := testenv.FreeAddr(t)
	// Its own process: a second run in this test process would register the controllers' names twice.
	op := startOperatorBinary(t, "--kubeconfig="+kubeconfig, "--leader-elect=false", "--namespace=default",
		"--webhook-bind-address=0", "--metrics-bind-address=0", "--health-probe-bind-address="+testenv.FreeAddr(t),
		"--pprof-bind-address="+pprofAddr, "--zap-log-level=error")

	var code int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && code != http.StatusOK; {
		if resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/"); err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ on --pprof-bind-address: %d, want 200\n%s", code, op.stderr.String())
	}

	var cfg config.Operator
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	cfg.Bind(fs)
	if err := fs.Parse(nil); err != nil || cfg.PprofAddr != "" {
		t.Errorf("default --pprof-bind-address = %q (%v), want off", cfg.PprofAddr, err)
	}
}

// startOperatorBinary builds the operator and runs it with args in a process of its own until the test
// ends, then stops it with SIGTERM and fails the test unless it exits cleanly within 30 s.
func startOperatorBinary(t *testing.T, args ...string) *operatorProcess {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "operator")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	op := &operatorProcess{stderr: &testenv.LogBuffer{}, done: make(chan error, 1)}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = op.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stderr, done := op.stderr, op.done
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("operator exited with %v after SIGTERM:\n%s", err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("operator did not stop within 30s of SIGTERM")
		}
	})
	return op
}

// operatorProcess is an operator started by startOperatorBinary.
type operatorProcess struct {
	stderr *testenv.LogBuffer // its standard error: failure messages, and log lines while it runs
	done   chan error         // receives its exit; a receiver that is not the cleanup must send it back
}
