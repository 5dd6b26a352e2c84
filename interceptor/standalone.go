package main

import (
	"context"
	"errors"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/standalone"
)

// runStandalone runs the interceptor without Kubernetes until ctx ends: routes and endpoints come
// from the --standalone file (reloaded when it changes), requests go through the same proxy and
// admin servers as in a cluster. A file that is invalid at start is an error naming what to fix.
func runStandalone(ctx context.Context, cfg *config.Interceptor, dial dialFunc, log logr.Logger) error {
	if limit := setMemoryLimit(cfg); limit > 0 {
		log.Info("Go memory limit", "bytes", limit)
	}
	src, err := standalone.NewSource(cfg.Standalone, standalone.DefaultInterval, log.WithName("standalone"))
	if err != nil {
		return err
	}
	srv, err := newServers(cfg, kubeParts{
		tables:        src,
		endpoints:     src.Endpoints(),
		onTableChange: src.OnChange,
	}, newMetricsRegistry(), dial, log)
	if err != nil {
		return err
	}
	log.Info("starting without Kubernetes", "file", cfg.Standalone, "version", src.Table().Version(), "apps", src.Table().Len(),
		"proxyAddr", cfg.ProxyAddr, "adminAddr", cfg.AdminAddr)
	runnables := append([]manager.Runnable{src}, srv.runnables...)
	if gc := gcTuner(cfg); gc != nil {
		runnables = append(runnables, gc)
	}
	if cfg.PprofAddr != "" && cfg.PprofAddr != "0" {
		runnables = append(runnables, pprofServer(cfg.PprofAddr))
	}
	if err := runAll(ctx, runnables); err != nil {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}

// runAll starts every runnable and waits until all have returned: they stop when ctx ends, or as soon
// as one of them fails, whose error is returned.
func runAll(ctx context.Context, runnables []manager.Runnable) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, r := range runnables {
		wg.Go(func() {
			if err := r.Start(ctx); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pprofServer serves /debug/pprof/ on addr (the manager does it in a cluster): heap profiles for
// the memory measurements of hack/bench.
func pprofServer(addr string) manager.Runnable {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return manager.RunnableFunc(func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			_ = srv.Close()
		}()
		if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
}
