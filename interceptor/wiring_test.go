package main

import (
	"context"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/gcheadroom"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/routing"
)

// Building the servers leaves the process's GC setting alone: only the tuner Runnable the wiring
// adds changes it, once the manager starts it (TestRunServesAdminAndProxyAndStopsCleanlyOnCancel
// checks that --gc-percent is in effect then).
func TestNewServersLeavesTheGCAlone(t *testing.T) {
	t.Setenv("GOGC", "") // as the binary runs without it
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	debug.SetGCPercent(100)
	cfg := &config.Interceptor{GCPercent: 321, ProxyAddr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0"}
	var empty *routing.Table
	srv, err := newServers(cfg, kubeParts{tables: proxy.TableFunc(func() *routing.Table { return empty }), endpoints: proxytest.NewSource()}, prometheus.NewRegistry(), nil, testr.New(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GC percent %d after newServers, want it untouched (100)", got)
	}
	for _, r := range srv.runnables {
		if _, ok := r.(*gcheadroom.Runnable); ok {
			t.Errorf("newServers returned the GC tuner among its runnables; the wiring adds it")
		}
	}
	r, ok := gcTuner(cfg).(*gcheadroom.Runnable)
	if !ok || r.Options.MaxPercent != 321 || r.Options.MinPercent != gcMinPercent || r.Options.Headroom != gcHeadroom {
		t.Errorf("gcTuner = %#v, want a gcheadroom.Runnable for --gc-percent 321", gcTuner(cfg))
	}
	t.Setenv("GOGC", "200")
	if r := gcTuner(cfg); r != nil {
		t.Errorf("gcTuner with GOGC set = %#v, want nil (GOGC decides)", r)
	}
}

// runUntilDone is a Runnable that runs until its context ends and reports when.
type runUntilDone struct{ stopped chan struct{} }

func (r runUntilDone) Start(ctx context.Context) error {
	<-ctx.Done()
	close(r.stopped)
	return nil
}

// The endpoint cache keeps running after the manager's stop until the proxy has drained, so held
// requests are still woken during the drain; a drain that never ends stops it at the limit.
func TestKeepUntilDrained(t *testing.T) {
	for _, c := range []struct {
		name  string
		limit time.Duration
		drain bool
	}{{"drained", time.Minute, true}, {"limit", 200 * time.Millisecond, false}} {
		t.Run(c.name, func(t *testing.T) {
			r := runUntilDone{stopped: make(chan struct{})}
			drained := make(chan struct{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- keepUntilDrained{Runnable: r, drained: drained, limit: c.limit}.Start(ctx) }()
			cancel()
			select {
			case <-r.stopped:
				t.Fatal("stopped with the manager, before the proxy drained")
			case <-time.After(100 * time.Millisecond):
			}
			if c.drain {
				close(drained)
			}
			select {
			case <-r.stopped:
			case <-time.After(5 * time.Second):
				t.Fatal("still running after the drain (or the limit)")
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
	if (keepUntilDrained{}).NeedLeaderElection() {
		t.Error("needs leader election: it would be stopped after the servers' group, not with it")
	}
}

// A proxy port starts only once the first routing table is loaded (before it, every request would be
// answered 404: a container restarted in place gets connections kube-proxy still sends it), and is
// still started, to drain at once, when the interceptor stops first.
func TestProxyPortStartsAfterTheFirstTable(t *testing.T) {
	var table atomic.Pointer[routing.Table]
	started := make(chan struct{}, 1)
	a := afterFirstTable{
		Runnable: manager.RunnableFunc(func(context.Context) error { started <- struct{}{}; return nil }),
		tables:   proxy.TableFunc(table.Load),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Start(ctx) }()
	select {
	case <-started:
		t.Fatal("the port started before a table was loaded")
	case <-time.After(100 * time.Millisecond):
	}
	tbl, err := routing.NewTable(nil)
	if err != nil {
		t.Fatal(err)
	}
	table.Store(tbl)
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the port did not start once the table was loaded")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	stopped, stop := context.WithCancel(context.Background())
	stop()
	a.tables = proxy.TableFunc(func() *routing.Table { return nil })
	if err := a.Start(stopped); err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	default:
		t.Error("a port whose context ended before the first table was never started (it would never drain)")
	}
}
