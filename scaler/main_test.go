package main

import (
	"testing"

	"github.com/httpscale/httpscale/pkg/testenv"
)

func TestRunStopsCleanlyOnCancel(t *testing.T) {
	testenv.CheckCleanShutdown(t, run, "--grpc-bind-address="+testenv.FreeAddr(t))
}
