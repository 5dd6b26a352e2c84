package main

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// syncBuffer collects the operator's log lines while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRunStopsCleanlyOnCancel runs the operator as a fresh install with leader election, stops it as
// SIGTERM does, and fails on any error-level line: releasing the lease on purpose, and client-go's
// lease calls cancelled by the stop, are normal and logged as info lines.
func TestRunStopsCleanlyOnCancel(t *testing.T) {
	logs := &syncBuffer{}
	testenv.CheckCleanShutdown(t, func(ctx context.Context, args []string) error {
		return runWithLogs(ctx, args, logs)
	}, "--leader-elect=true", "--namespace=default", "--webhook-bind-address=0")
	out := logs.String()
	if !strings.Contains(out, "stopped cleanly") {
		t.Fatalf("no stopped-cleanly line; logs:\n%s", out)
	}
	for line := range strings.SplitSeq(out, "\n") {
		if strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"stacktrace"`) {
			t.Errorf("error-level line on a fresh install or its shutdown: %s", line)
		}
	}
}
