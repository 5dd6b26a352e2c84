package endpoints_test

import (
	"context"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/tablewatch"
)

// How an interceptor wires the routing table and the endpoint cache into its manager.
func Example_interceptorWiring() {
	var (
		ctx        context.Context
		restCfg    *rest.Config
		mgr        manager.Manager
		log        logr.Logger
		configZone string // --zone, may be empty
		namespace  = "httpscale-system"
	)
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		panic(err)
	}
	zone, err := endpoints.ResolveZone(ctx, cs, configZone, os.Getenv("NODE_NAME"))
	if err != nil {
		panic(err)
	}
	cache, err := endpoints.NewCache(cs, endpoints.CacheOptions{Log: log.WithName("endpoints")})
	if err != nil {
		panic(err)
	}
	table, err := tablewatch.NewForClient(cs, tablewatch.Options{Namespace: namespace, Log: log.WithName("routing")})
	if err != nil {
		panic(err)
	}
	table.OnChange(cache.OnTable) // every routed Service is watched before requests are routed to it
	for _, r := range []manager.Runnable{table, cache} {
		if err := mgr.Add(r); err != nil {
			panic(err)
		}
	}
	_ = mgr.AddReadyzCheck("routing-table", table.ReadyCheck)
	_ = mgr.AddReadyzCheck("endpoints", cache.ReadyCheck)

	// On the request path:
	entry, _ := table.Table().Lookup("shop/web")
	k := endpoints.ServiceKey{Namespace: entry.Namespace, Service: entry.Service, PortName: entry.PortName}
	set := cache.Ready(k)
	if set.Len() == 0 {
		set, _ = cache.WaitReady(ctx, k) // hold until the app has a ready endpoint
	}
	if eps, crossZone := endpoints.Candidates(set, zone, true); len(eps) > 0 {
		_ = crossZone // forward to one of eps; count it when crossZone
	}
}
