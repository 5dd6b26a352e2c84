package main

import (
	"context"
	"testing"

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
