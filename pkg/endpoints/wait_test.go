package endpoints

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/prometheus/client_golang/prometheus"
)

func newTestCache(t *testing.T) *Cache {
	t.Helper()
	c, err := NewCache(nil, CacheOptions{Log: logr.Discard(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// publish sets k's endpoints the way a watch event does.
func publish(c *Cache, k ServiceKey, eps ...Endpoint) { list(c, k, eps) }

type waitResult struct {
	set *Set
	err error
}

func wait(ctx context.Context, c *Cache, k ServiceKey) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		s, err := c.WaitReady(ctx, k)
		ch <- waitResult{s, err}
	}()
	return ch
}

func TestWaitReadyWakesOnlyThatKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t)
		a := ServiceKey{Namespace: "ns", Service: "a"}
		b := ServiceKey{Namespace: "ns", Service: "b"}
		c.Track([]ServiceKey{a, b})
		ctx := t.Context()
		wa1, wa2, wb := wait(ctx, c, a), wait(ctx, c, a), wait(ctx, c, b)
		synctest.Wait()

		publish(c, a, Endpoint{IP: "198.18.0.1", Port: 80})
		synctest.Wait()
		for _, w := range []<-chan waitResult{wa1, wa2} {
			select {
			case r := <-w:
				if r.err != nil || r.set.Len() != 1 || r.set.Endpoints[0].IP != "198.18.0.1" {
					t.Fatalf("waiter of a got %+v, %v", r.set, r.err)
				}
			default:
				t.Fatal("a waiter of a was not woken")
			}
		}
		select {
		case r := <-wb:
			t.Fatalf("the waiter of b woke with %+v, %v", r.set, r.err)
		default:
		}
		if got := c.Ready(a); got.Len() != 1 {
			t.Errorf("Ready(a) = %+v, want one endpoint", got)
		}

		// a drops to zero: new waiters block again, and wake on its return.
		publish(c, a)
		if got := c.Ready(a); got != nil {
			t.Errorf("Ready(a) after drop = %+v, want nil", got)
		}
		wa3 := wait(ctx, c, a)
		synctest.Wait()
		select {
		case <-wa3:
			t.Fatal("a waiter woke while a had no endpoint")
		default:
		}
		publish(c, a, Endpoint{IP: "198.18.0.2", Port: 80})
		synctest.Wait()
		if r := <-wa3; r.set.Endpoints[0].IP != "198.18.0.2" {
			t.Errorf("second wake got %+v", r.set)
		}
		publish(c, b, Endpoint{IP: "198.18.0.3", Port: 80})
		synctest.Wait()
		if r := <-wb; r.err != nil || r.set.Len() != 1 {
			t.Errorf("waiter of b got %+v, %v", r.set, r.err)
		}
	})
}

func TestWaitReadyHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t)
		k := ServiceKey{Namespace: "ns", Service: "a"}
		c.Track([]ServiceKey{k})
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err := c.WaitReady(ctx, k)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("WaitReady error = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("WaitReady returned after %v, want 3s", d)
		}
	})
}

func TestWaitReadyForAKeyTrackedLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t)
		k := ServiceKey{Namespace: "ns", Service: "new"}
		w := wait(t.Context(), c, k) // the proxy saw a route before the cache was told about it
		synctest.Wait()
		c.Track([]ServiceKey{k})
		synctest.Wait()
		publish(c, k, Endpoint{IP: "198.18.0.1", Port: 80})
		synctest.Wait()
		select {
		case r := <-w:
			if r.set.Len() != 1 {
				t.Errorf("got %+v", r.set)
			}
		default:
			t.Fatal("waiter not woken")
		}
	})
}

func TestUntrackingForgetsEndpointsAndKeepsWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t)
		k := ServiceKey{Namespace: "ns", Service: "a"}
		c.Track([]ServiceKey{k})
		publish(c, k, Endpoint{IP: "198.18.0.1", Port: 80})
		c.Track(nil)
		if got := c.Ready(k); got != nil {
			t.Fatalf("Ready after untracking = %+v, want nil", got)
		}
		w := wait(t.Context(), c, k)
		synctest.Wait()
		c.Track([]ServiceKey{k}) // tracked again: the waiter's key gets a watch again
		synctest.Wait()
		select {
		case r := <-w:
			t.Fatalf("waiter woke without an endpoint: %+v", r)
		default:
		}
		publish(c, k, Endpoint{IP: "198.18.0.2", Port: 80})
		synctest.Wait()
		if r := <-w; r.set.Len() != 1 {
			t.Errorf("got %+v", r.set)
		}
	})
}

func TestReadyDoesNotAllocate(t *testing.T) {
	c, err := NewCache(nil, CacheOptions{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	k := ServiceKey{Namespace: "ns", Service: "a", PortName: "http"}
	c.Track([]ServiceKey{k})
	publish(c, k, Endpoint{IP: "198.18.0.1", Port: 80, Zone: "a"}, Endpoint{IP: "198.18.0.2", Port: 80, Zone: "b"})
	if n := testing.AllocsPerRun(1000, func() { c.Ready(k) }); n != 0 {
		t.Errorf("Ready allocated %v times, want 0", n)
	}
	if s := c.Ready(k); s.Len() != 2 {
		t.Errorf("Ready = %+v, want both endpoints", s)
	}
}

func BenchmarkReady(b *testing.B) {
	c, _ := NewCache(nil, CacheOptions{Registerer: prometheus.NewRegistry()})
	keys := make([]ServiceKey, 10000)
	for i := range keys {
		keys[i] = ServiceKey{Namespace: "tenant", Service: "app-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676)), PortName: "http"}
	}
	c.Track(keys)
	k := keys[5000]
	publish(c, k, Endpoint{IP: "198.18.0.1", Port: 80})
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if c.Ready(k) == nil {
				b.Fatal("not ready")
			}
		}
	})
}

// TestChannelsOnlyOnceWaitedFor: a key nobody waits for or follows has no channels however its
// endpoints change; the first waiter or Listed gives it channels, which then wake as always.
func TestChannelsOnlyOnceWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t)
		k := ServiceKey{Namespace: "ns", Service: "a"}
		c.Track([]ServiceKey{k})
		ks, _ := c.keys.Load().Get(k)
		unarmedNow := func(step string) {
			t.Helper()
			if st := ks.state.Load(); st.ready != nil || st.changed != nil {
				t.Fatalf("%s: the key has channels though nobody waited", step)
			}
		}
		unarmedNow("tracked")
		publish(c, k, Endpoint{IP: "198.18.0.1", Port: 80})
		unarmedNow("ready")
		if c.Ready(k).Len() != 1 {
			t.Fatal("not ready")
		}
		if r := <-wait(t.Context(), c, k); r.set.Len() != 1 {
			t.Fatalf("a waiter of a ready key got %+v, %v", r.set, r.err)
		}

		publish(c, k)
		l := c.Listed(k)
		if l.Changed == nil {
			t.Fatal("Listed gave no Changed channel")
		}
		w := wait(t.Context(), c, k)
		synctest.Wait()
		select {
		case r := <-w:
			t.Fatalf("a waiter of a key without endpoints returned %+v, %v", r.set, r.err)
		default:
		}
		publish(c, k, Endpoint{IP: "198.18.0.2", Port: 80})
		synctest.Wait()
		select {
		case r := <-w:
			if r.set.Len() != 1 || r.set.Endpoints[0].IP != "198.18.0.2" {
				t.Fatalf("the waiter got %+v, %v", r.set, r.err)
			}
		default:
			t.Fatal("the waiter was not woken")
		}
		select {
		case <-l.Changed:
		default:
			t.Fatal("Changed was not closed")
		}

		// A key that never had channels is dropped without waking anyone; its next state is armed
		// by its next waiter.
		other := ServiceKey{Namespace: "ns", Service: "b"}
		c.Track([]ServiceKey{k, other})
		c.Track([]ServiceKey{k})
		w = wait(t.Context(), c, other)
		c.Track([]ServiceKey{k, other})
		publish(c, other, Endpoint{IP: "198.18.0.3", Port: 80})
		synctest.Wait()
		select {
		case r := <-w:
			if r.set.Len() != 1 || r.set.Endpoints[0].IP != "198.18.0.3" {
				t.Fatalf("the waiter of the key tracked again got %+v, %v", r.set, r.err)
			}
		default:
			t.Fatal("the waiter of the key tracked again was not woken")
		}
	})
}

// A key waited for and followed once keeps its channels only until Unfollow: 10,000 keys at zero
// that each had a held request and a cold start cost no channel and no snapshot of their own
// afterwards. A waiter still waiting when Unfollow comes is woken when the key turns ready, and a
// follower sees the change.
func TestUnfollowDropsAKeysChannels(t *testing.T) {
	c := newTestCache(t)
	const n = 10000
	keys := make([]ServiceKey, n)
	for i := range keys {
		keys[i] = ServiceKey{Namespace: "ns", Service: fmt.Sprintf("app-%d", i), PortName: "http"}
	}
	c.Track(keys)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	tracked := testenv.HeapInUse()
	for _, k := range keys {
		if _, err := c.WaitReady(gone, k); err == nil { // a held request that timed out
			t.Fatal("WaitReady returned without an endpoint")
		}
		_ = c.Listed(k) // its cold start followed it
	}
	armed := (int64(testenv.HeapInUse()) - int64(tracked)) / n
	for _, k := range keys {
		c.Unfollow(k)
	}
	left := (int64(testenv.HeapInUse()) - int64(tracked)) / n
	runtime.KeepAlive(keys)
	runtime.KeepAlive(c)
	t.Logf("a key at zero waited for and followed: %d bytes more than tracked, %d after Unfollow", armed, left)
	if armed < 250 || left > 16 {
		t.Errorf("a key waited for costs %d bytes, %d after Unfollow; want its channels and snapshot (over 250) dropped (16 at most left)", armed, left)
	}

	synctest.Test(t, func(t *testing.T) {
		c := newTestCache(t)
		a := ServiceKey{Namespace: "ns", Service: "a"}
		c.Track([]ServiceKey{a})
		w := wait(t.Context(), c, a)
		l := c.Listed(a)
		synctest.Wait()
		c.Unfollow(a)
		synctest.Wait()
		select {
		case <-l.Changed:
		default:
			t.Fatal("a follower was not told of Unfollow")
		}
		l = c.Listed(a)
		select {
		case r := <-w:
			t.Fatalf("the waiter returned at Unfollow: %+v, %v", r.set, r.err)
		default:
		}
		publish(c, a, Endpoint{IP: "198.18.0.1", Port: 80})
		synctest.Wait()
		select {
		case r := <-w:
			if r.err != nil || r.set.Len() != 1 {
				t.Fatalf("waiter got %+v, %v", r.set, r.err)
			}
		default:
			t.Fatal("a waiter waiting across Unfollow was not woken by the ready endpoint")
		}
		select {
		case <-l.Changed:
		default:
			t.Fatal("a follower that listed again after Unfollow was not told of the change")
		}
	})
}
