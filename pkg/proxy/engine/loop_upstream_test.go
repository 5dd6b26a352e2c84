//go:build linux

package engine

import "testing"

// An idle upstream connection pooled during the current batch of events has had no epoll wait to
// report bytes sent on it since, so acquire peeks at it before use; popIdle hands out one pooled
// before the batch when there is one (no peek needed), and the batch's own only after those.
func TestPopIdlePrefersConnectionsPooledBeforeTheBatch(t *testing.T) {
	const addr = "10.0.0.1:80"
	l := &evLoop{batch: 7}
	l.ups = loopPool{l: l, idle: map[string][]*evUp{}}
	older := &evUp{fd: 1, addr: addr, idleBatch: 5}
	old := &evUp{fd: 2, addr: addr, idleBatch: 6}
	now1 := &evUp{fd: 3, addr: addr, idleBatch: 7}
	now2 := &evUp{fd: 4, addr: addr, idleBatch: 7}
	l.ups.idle[addr] = []*evUp{older, old, now1, now2}
	for i, want := range []*evUp{old, older, now2, now1, nil} {
		if got := l.ups.popIdle(addr); got != want {
			t.Fatalf("pop %d: got fd %v, want fd %v", i, fdOf(got), fdOf(want))
		}
	}
	if n := len(l.ups.idle[addr]); n != 0 {
		t.Fatalf("%d connections left in the pool", n)
	}
}

func fdOf(up *evUp) int {
	if up == nil {
		return -1
	}
	return up.fd
}
