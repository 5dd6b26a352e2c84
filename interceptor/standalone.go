package main

import (
	"context"
	"errors"
	"sync"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/standalone"
)

// runStandalone runs the interceptor without Kubernetes until ctx ends: routes and endpoints come
// from the --standalone file (reloaded when it changes), requests go through the same proxy and
// admin servers as in a cluster. A file that is invalid at start is an error naming what to fix.
func runStandalone(ctx context.Context, cfg *config.Interceptor, dial dialFunc, log logr.Logger) error {
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
