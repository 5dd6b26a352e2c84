package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, and fails t if it does not within the given time:
// plain Go tests observing what other goroutines or processes do.
func Eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyDetail(t, within, what, func() (bool, string) { return cond(), "" })
}

// EventuallyDetail is Eventually for a condition that says what it saw when it does not hold yet
// (the metric's value, the streams open, ...): the failure carries the last such detail.
func EventuallyDetail(t testing.TB, within time.Duration, what string, cond func() (ok bool, detail string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if detail != "" {
				t.Fatalf("timed out after %s waiting until %s; last: %s", within, what, detail)
			}
			t.Fatalf("timed out after %s waiting until %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
