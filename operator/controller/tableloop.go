package controller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/clock"
)

// The writer's pacing: when to write, given when changes arrive. It reads time only from
// TableWriter.Clock, so tests run it in simulated time.

// Start seeds the desired set from the table already in the cluster (so a restarted operator never
// writes a table missing apps it has not reconciled yet), then writes on every change until ctx ends.
//
// A change that finds the writer idle (no write within the last Debounce) is written at once, so a
// single new or changed object is routed without waiting for a quiet period. Changes that follow a
// write closely are coalesced: the writer waits until no further change arrived for Debounce, but
// never longer than MaxDelay after the first one, and then writes the whole table once. A burst of
// thousands of changes therefore costs about (burst duration / MaxDelay) + 2 writes.
func (w *TableWriter) Start(ctx context.Context) error {
	w.init()
	if w.initErr != nil {
		return fmt.Errorf("routing-table writer: %w", w.initErr)
	}
	if err := w.seed(ctx); err != nil {
		return err
	}
	clk := w.clock()
	startedAt := clk.Now()
	var lastWrite time.Time // zero: idle since the start
	retry := time.Duration(0)
	for {
		var wait <-chan time.Time
		var retryTimer clock.Timer
		if retry > 0 {
			retryTimer = clk.NewTimer(retry)
			wait = retryTimer.C()
		}
		select {
		case <-ctx.Done():
		case <-w.dirty:
		case <-wait:
		}
		if retryTimer != nil {
			retryTimer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
		// Leading edge when idle; trailing debounce while changes keep coming.
		if clk.Since(lastWrite) < w.Debounce && !w.settle(ctx) {
			return nil
		}
		w.mu.Lock()
		waiting := len(w.pending)
		w.mu.Unlock()
		if waiting > 0 && clk.Since(startedAt) < w.StartupGrace {
			retry = w.Debounce
			continue
		}
		if err := w.write(ctx); err != nil {
			w.Log.Error(err, "writing routing table; retrying")
			retry = time.Second
			continue
		}
		lastWrite = clk.Now()
		retry = 0
	}
}

// settle waits until no change arrived for Debounce or MaxDelay passed, whichever is first. It
// returns false when ctx ended.
func (w *TableWriter) settle(ctx context.Context) bool {
	maxDelay := w.MaxDelay
	if maxDelay < w.Debounce {
		maxDelay = w.Debounce
	}
	clk := w.clock()
	deadline := clk.NewTimer(maxDelay)
	defer deadline.Stop()
	quiet := clk.NewTimer(w.Debounce)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C():
			return true
		case <-quiet.C():
			return true
		case <-w.dirty:
			quiet.Reset(w.Debounce)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
