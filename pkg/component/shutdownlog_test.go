package component

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// recordSink records each line as "error: msg" or "info: msg".
type recordSink struct{ lines *[]string }

func (recordSink) Init(logr.RuntimeInfo) {}
func (recordSink) Enabled(int) bool      { return true }
func (s recordSink) Info(_ int, msg string, _ ...any) {
	*s.lines = append(*s.lines, "info: "+msg)
}
func (s recordSink) Error(_ error, msg string, _ ...any) {
	*s.lines = append(*s.lines, "error: "+msg)
}
func (s recordSink) WithValues(...any) logr.LogSink { return s }
func (s recordSink) WithName(string) logr.LogSink   { return s }

func TestShutdownLoggerTurnsOnlyTheStopsOwnErrorsIntoInfo(t *testing.T) {
	var lines []string
	ctx, cancel := context.WithCancel(context.Background())
	log := shutdownLogger(ctx, logr.New(recordSink{&lines})).WithName("operator").WithValues("k", "v")
	logAll := func(when string) {
		log.Error(context.Canceled, when+" canceled")
		log.Error(fmt.Errorf("retrieving lease: %w", context.Canceled), when+" wrapped canceled")
		log.Error(errors.New("leader election lost"), when+" lease released")
		log.Error(nil, when+" klog: error retrieving lease lock: context canceled")
		log.Error(errors.New("connection refused"), when+" real failure")
	}
	logAll("running")
	cancel()
	// context.AfterFunc runs in its own goroutine: wait until the logger sees the stop.
	testenv.Eventually(t, 10*time.Second, "the logger sees the stop", log.GetSink().(shutdownSink).stopping.Load)
	logAll("stopping")
	want := []string{
		"error: running canceled", "error: running wrapped canceled", "error: running lease released",
		"error: running klog: error retrieving lease lock: context canceled", "error: running real failure",
		"info: stopping canceled", "info: stopping wrapped canceled", "info: stopping lease released",
		"info: stopping klog: error retrieving lease lock: context canceled", "error: stopping real failure",
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("lines (-want +got):\n%s", diff)
	}
}
