package main

import (
	"context"
	"flag"
	"net/http"
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

// TestPprofServedOnlyWhenAsked runs the operator with --pprof-bind-address and fetches a profile
// index from it; without the flag the operator opens no such port (the default is off).
func TestPprofServedOnlyWhenAsked(t *testing.T) {
	env, _ := testenv.StartT(t)
	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pprofAddr := testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runWithLogs(ctx, []string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--namespace=default",
			"--webhook-bind-address=0", "--metrics-bind-address=0", "--health-probe-bind-address=" + testenv.FreeAddr(t),
			"--pprof-bind-address=" + pprofAddr}, &testenv.LogBuffer{})
	}()
	var code int
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && code != http.StatusOK; {
		if resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/"); err == nil {
			code = resp.StatusCode
			resp.Body.Close()
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != http.StatusOK {
		t.Errorf("GET /debug/pprof/ on --pprof-bind-address: %d, want 200", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run returned %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancellation")
	}

	var cfg config.Operator
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	cfg.Bind(fs)
	if err := fs.Parse(nil); err != nil || cfg.PprofAddr != "" {
		t.Errorf("default --pprof-bind-address = %q (%v), want off", cfg.PprofAddr, err)
	}
}
