package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, and fails t if it does not within the given time:
// plain Go tests observing what other goroutines or processes do.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting until %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
