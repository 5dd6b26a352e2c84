package engine

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
)

// fakeServing is a Serving whose serve goroutine returns when told, recording the calls Run makes.
type fakeServing struct {
	errs     chan error
	calls    []string
	shutdown error // what Shutdown returns
}

func (f *fakeServing) serving() Serving {
	return Serving{
		Errs:       f.errs,
		Goroutines: 1,
		Shutdown: func(ctx context.Context) error {
			f.calls = append(f.calls, "shutdown")
			if f.shutdown != nil {
				<-ctx.Done() // a request that outlives the drain timeout
				return f.shutdown
			}
			f.errs <- errors.New("closed")
			return nil
		},
		Close: func() {
			f.calls = append(f.calls, "close")
			f.errs <- errors.New("closed")
		},
		Abort: func() { f.calls = append(f.calls, "abort") },
	}
}

// wantCalls fails t unless Run made the calls want names, in that order, comma-separated.
func (f *fakeServing) wantCalls(t *testing.T, want string) {
	t.Helper()
	if got := strings.Join(f.calls, ","); got != want {
		t.Errorf("calls = %s, want %s", got, want)
	}
}

// addrOnly is a listener that only has an address: what Listen records when given one.
type addrOnly struct{ net.Listener }

func (addrOnly) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080} }

func TestLifecycleListen(t *testing.T) {
	var l Lifecycle
	if got := l.ListenAddr(); got != "" {
		t.Fatalf("ListenAddr before Listen = %q, want empty", got)
	}
	// A port that refuses connections must not pass the readiness probe.
	if err := l.Ready(); !errors.Is(err, ErrNotListening) {
		t.Fatalf("Ready before Listen = %v, want ErrNotListening", err)
	}
	ln, err := l.Listen("test", nil, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Ready(); err != nil {
		t.Fatalf("Ready once listening = %v, want nil", err)
	}
	defer ln.Close()
	if got, want := l.ListenAddr(), ln.Addr().String(); got != want {
		t.Fatalf("ListenAddr = %q, want %q", got, want)
	}
	if _, err := l.Listen("test", nil, ln.Addr().String()); err == nil || !strings.HasPrefix(err.Error(), "test: listening on ") {
		t.Fatalf("Listen on a taken address: error %v, want one naming the server", err)
	}
}

func TestLifecycleDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l Lifecycle
		if _, err := l.Listen("test", addrOnly{}, ""); err != nil {
			t.Fatal(err)
		}
		f := &fakeServing{errs: make(chan error, 1)}
		after := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		var drainedAt time.Time
		go func() {
			done <- l.Run(ctx, Drain{Name: "test", Log: logr.Discard(), Delay: 5 * time.Second, Timeout: time.Minute,
				After:      after,
				OnShutdown: func() { drainedAt = time.Now(); f.calls = append(f.calls, "onshutdown") },
				WaitIdle:   func(context.Context) error { f.calls = append(f.calls, "waitidle"); return nil },
			}, f.serving())
		}()
		cancel()
		synctest.Wait()
		if err := l.Ready(); err != nil {
			t.Fatalf("Ready before After is closed = %v, want nil", err)
		}
		close(after)
		synctest.Wait()
		if err := l.Ready(); !errors.Is(err, ErrDraining) || !l.Draining() {
			t.Fatalf("Ready once draining = %v, want ErrDraining", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil after a drain", err)
		}
		if got := drainedAt.Sub(start); got != 5*time.Second {
			t.Errorf("stopped accepting after %v, want the delay, 5s", got)
		}
		f.wantCalls(t, "onshutdown,shutdown,waitidle")
	})
}

func TestLifecycleCutShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var l Lifecycle
		f := &fakeServing{errs: make(chan error, 1), shutdown: context.DeadlineExceeded}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		start := time.Now()
		if err := l.Run(ctx, Drain{Name: "test", Log: logr.Discard(), Timeout: 3 * time.Second}, f.serving()); err != nil {
			t.Fatalf("Run = %v, want nil after a drain cut short", err)
		}
		if got := time.Since(start); got != 3*time.Second {
			t.Errorf("cut off after %v, want the drain timeout, 3s", got)
		}
		f.wantCalls(t, "shutdown,close")
	})
}

func TestLifecycleServeFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cancel bool // the failure comes during the drain delay
	}{
		{"while serving", false},
		{"during the drain delay", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var l Lifecycle
				if _, err := l.Listen("test", fakeListener{}, ""); err != nil {
					t.Fatal(err)
				}
				f := &fakeServing{errs: make(chan error, 1)}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				go func() {
					done <- l.Run(ctx, Drain{Name: "test", Log: logr.Discard(), Delay: time.Hour, Timeout: time.Minute}, f.serving())
				}()
				if tc.cancel {
					cancel()
				}
				synctest.Wait()
				boom := errors.New("boom")
				f.errs <- boom
				err := <-done
				if !errors.Is(err, boom) || err.Error() != "test: serving on fake:1: boom" {
					t.Fatalf("Run = %v, want the failure with the server's name and address", err)
				}
				f.wantCalls(t, "abort")
			})
		})
	}
}

// fakeListener is a net.Listener that only has an address.
type fakeListener struct{ net.Listener }

func (fakeListener) Addr() net.Addr { return fakeAddr{} }

type fakeAddr struct{}

func (fakeAddr) Network() string { return "fake" }
func (fakeAddr) String() string  { return "fake:1" }
