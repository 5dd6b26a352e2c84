package main

import (
	"testing"

	"github.com/httpscale/httpscale/pkg/testenv"
)

func TestRunStopsCleanlyOnCancel(t *testing.T) {
	testenv.CheckCleanShutdown(t, run, "--leader-elect=true", "--namespace=default", "--webhook-bind-address=0")
}
