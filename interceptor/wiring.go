package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
)

// zoneLabel is the well-known node label holding the node's zone.
const zoneLabel = "topology.kubernetes.io/zone"

// kubeParts are the interceptor's Kubernetes-facing parts the request path depends on.
type kubeParts struct {
	// tables yields the routing table (pkg/tablewatch's Watcher).
	tables proxy.TableSource
	// endpoints is the EndpointSlice cache of routed Services (pkg/endpoints).
	endpoints endpoints.Source
	// onTableChange registers a callback for every new table, called before the table is served.
	onTableChange func(func(*routing.Table))
	// ready fails until a routing table is loaded.
	ready func() error
	// zone is this replica's zone, "" when unknown.
	zone string
}

// wireKubernetes builds the routing-table watch and the EndpointSlice cache and adds them to mgr.
//
// WIRING POINT. pkg/tablewatch and the EndpointSlice cache (pkg/endpoints.Cache) are being written on
// another branch. With the API they have there, this function becomes:
//
//	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
//	zone, err := endpoints.ResolveZone(ctx, cs, cfg.Zone, cfg.NodeName)   // replaces replicaZone
//	cache, err := endpoints.NewCache(cs, endpoints.CacheOptions{Zone: zone, Log: log.WithName("endpoints")})
//	table, err := tablewatch.NewForClient(cs, tablewatch.Options{
//		Namespace: cfg.Namespace, Resync: cfg.TableResync, Log: log.WithName("routing")})
//	table.OnChange(cache.OnTable) // registered first: Services are tracked before the proxy routes to them
//	mgr.Add(table); mgr.Add(cache)
//	return kubeParts{tables: table, endpoints: cache, onTableChange: table.OnChange, zone: zone,
//		ready: func() error {
//			if err := table.Ready(); err != nil {
//				return err
//			}
//			return cache.ReadyCheck(nil)
//		}}, nil
//
// (each err checked and wrapped). Until then it returns parts that know no route and no endpoint:
// the binary starts, serves the admin port, reports not ready, and answers every proxied request 404.
func wireKubernetes(mgr manager.Manager, cfg *config.Interceptor, log logr.Logger) (kubeParts, error) {
	zone, err := replicaZone(mgr, cfg)
	if err != nil {
		return kubeParts{}, err
	}
	log.Info("zone", "zone", zone, "zoneAware", cfg.ZoneAware)
	return kubeParts{
		tables:    proxy.TableFunc(func() *routing.Table { return nil }),
		endpoints: unwiredEndpoints{},
		ready:     func() error { return errors.New("routing table watch is not wired into this build") },
		zone:      zone,
	}, nil
}

// replicaZone returns the configured zone, else the zone label of the node named by NodeName, else
// "" (zone preference off).
func replicaZone(mgr manager.Manager, cfg *config.Interceptor) (string, error) {
	if cfg.Zone != "" || cfg.NodeName == "" {
		return cfg.Zone, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.DialTimeout*5)
	defer cancel()
	var node corev1.Node
	if err := mgr.GetAPIReader().Get(ctx, types.NamespacedName{Name: cfg.NodeName}, &node); err != nil {
		return "", fmt.Errorf("reading node %s for its zone: %w", cfg.NodeName, err)
	}
	return node.Labels[zoneLabel], nil
}

// unwiredEndpoints knows no endpoint; it stands in until the EndpointSlice cache is wired.
type unwiredEndpoints struct{}

func (unwiredEndpoints) Ready(endpoints.ServiceKey) *endpoints.Set { return nil }

func (unwiredEndpoints) WaitReady(ctx context.Context, _ endpoints.ServiceKey) (*endpoints.Set, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}
