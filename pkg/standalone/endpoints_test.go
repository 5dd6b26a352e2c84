package standalone

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

func TestWaitReadyWakesOnlyTheKeyThatGetsAnEndpoint(t *testing.T) {
	e := NewEndpoints()
	a := endpoints.ServiceKey{Namespace: "default", Service: "a"}
	b := endpoints.ServiceKey{Namespace: "default", Service: "b"}
	setA := &endpoints.Set{Key: a, Endpoints: []endpoints.Endpoint{{IP: "127.0.0.1", Port: 9000}}}

	type result struct {
		set *endpoints.Set
		err error
	}
	wait := func(ctx context.Context, k endpoints.ServiceKey) chan result {
		ch := make(chan result, 1)
		go func() {
			s, err := e.WaitReady(ctx, k)
			ch <- result{s, err}
		}()
		return ch
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gotA, gotB := wait(ctx, a), wait(ctx, b)

	e.Set(map[endpoints.ServiceKey]*endpoints.Set{a: setA})
	select {
	case r := <-gotA:
		if r.err != nil || r.set != setA {
			t.Fatalf("a: %+v, want its set", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a's waiter did not wake")
	}
	select {
	case r := <-gotB:
		t.Fatalf("b's waiter woke without an endpoint: %+v", r)
	case <-time.After(50 * time.Millisecond):
	}
	if e.Ready(a) != setA || e.Ready(b) != nil {
		t.Errorf("Ready: a=%v b=%v", e.Ready(a), e.Ready(b))
	}
	cancel()
	if r := <-gotB; !errors.Is(r.err, context.Canceled) {
		t.Errorf("b after cancel: %+v, want context.Canceled", r)
	}
	// A key that has an endpoint returns at once.
	if s, err := e.WaitReady(context.Background(), a); err != nil || s != setA {
		t.Errorf("WaitReady(a) = %v, %v", s, err)
	}
}
