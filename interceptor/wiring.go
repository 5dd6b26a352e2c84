package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/coldstart"
	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/gcheadroom"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/tablewatch"
	"github.com/httpscale/httpscale/pkg/tlsterm"
)

// kubeParts are the interceptor's Kubernetes-facing parts the request path depends on.
type kubeParts struct {
	// tables yields the routing table (pkg/tablewatch's Watcher).
	tables proxy.TableSource
	// endpoints is the EndpointSlice cache of routed Services (pkg/endpoints).
	endpoints endpoints.Source
	// pods reads the starting pods of cold starts; nil without Kubernetes.
	pods coldstart.PodReader
	// onTableChange registers a callback for every new table, called before the table is served.
	onTableChange func(func(*routing.Table))
	// ready fails until a routing table is loaded and the endpoint watches have synced.
	ready func() error
	// zone is this replica's zone, "" when unknown.
	zone string
	// certs holds the apps' TLS certificates; nil when the TLS port is off.
	certs *tlsterm.Store
	// endpointWatch runs the EndpointSlice cache; the servers add it so that it runs until the proxy
	// has drained (nil: nothing to run).
	endpointWatch manager.Runnable
	// adminAuth authenticates the admin port's callers; nil leaves the port open (--admin-auth=none).
	adminAuth *admin.Auth
}

// wireKubernetes builds the routing-table watch and the EndpointSlice cache, and adds the table watch
// to mgr (the servers add the cache, see keepUntilDrained).
func wireKubernetes(mgr manager.Manager, cfg *config.Interceptor, metrics *prometheus.Registry, log logr.Logger) (kubeParts, error) {
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return kubeParts{}, fmt.Errorf("creating Kubernetes client: %w", err)
	}
	zone, err := endpoints.ResolveZone(context.Background(), cs, cfg.Zone, cfg.NodeName) // NodeZone bounds the read
	if err != nil {
		return kubeParts{}, err
	}
	log.Info("zone", "zone", zone, "zoneAware", cfg.ZoneAware)

	cache, err := endpoints.NewCache(cs, endpoints.CacheOptions{Log: log.WithName("endpoints"), Registerer: metrics, ReadinessGrace: cfg.ReadinessGrace})
	if err != nil {
		return kubeParts{}, fmt.Errorf("creating endpoint cache: %w", err)
	}
	var probe kubernetes.Interface
	if cfg.TableStaleAfter > 0 {
		if probe, err = tablewatch.ProbeClient(mgr.GetConfig()); err != nil {
			return kubeParts{}, err
		}
	}
	table, err := tablewatch.NewForClient(cs, tablewatch.Options{Namespace: cfg.Namespace, Base: cfg.TableName, Resync: cfg.TableResync,
		StaleAfter: cfg.TableStaleAfter, Probe: probe, Log: log.WithName("routing"), Registerer: metrics})
	if err != nil {
		return kubeParts{}, fmt.Errorf("creating routing-table watch: %w", err)
	}
	// Registered first, so a new app's Service is watched before the proxy can route to it.
	table.OnChange(cache.OnTable)
	var certs *tlsterm.Store
	if cfg.TLSAddr != "" {
		def, err := cfg.TLSDefaultSecretKey()
		if err != nil {
			return kubeParts{}, err
		}
		certs = tlsterm.NewStore(def)
		secrets := tlsterm.NewWatcher(cs, certs, log.WithName("tls"))
		table.OnChange(secrets.OnTable)
		if err := mgr.Add(secrets); err != nil {
			return kubeParts{}, fmt.Errorf("adding TLS Secret watch: %w", err)
		}
	}
	if err := mgr.Add(table); err != nil {
		return kubeParts{}, fmt.Errorf("adding routing-table watch: %w", err)
	}
	var auth *admin.Auth
	if cfg.AdminAuth.Mode == config.AdminAuthToken {
		auth, err = admin.NewAuth(admin.AuthOptions{
			Tokens:     cs.AuthenticationV1().TokenReviews(),
			Access:     cs.AuthorizationV1().SubjectAccessReviews(),
			Audience:   cfg.AdminAuth.Audience,
			Allowed:    cfg.AdminAuth.AllowedServiceAccounts,
			Registerer: metrics,
			Log:        log.WithName("admin.auth"),
		})
		if err != nil {
			return kubeParts{}, err
		}
		log.Info("admin port authenticates its callers", "audience", cfg.AdminAuth.Audience, "allowed", cfg.AdminAuth.AllowedServiceAccounts)
	}
	return kubeParts{
		adminAuth:     auth,
		tables:        table,
		endpoints:     cache,
		pods:          coldstart.PodsFrom(cs),
		endpointWatch: cache,
		onTableChange: table.OnChange,
		zone:          zone,
		certs:         certs,
		ready: func() error {
			if err := table.Ready(); err != nil {
				return err
			}
			return cache.ReadyCheck(nil)
		},
	}, nil
}

// gcHeadroom and gcMinPercent bound the heap's growth between collections once the live heap is
// large (see pkg/gcheadroom). 24 MiB is what --gc-percent 400 allows a 6 MiB heap, about an
// interceptor with one route; below that nothing changes. Under load the heap reaches its goal, so
// it is what an interceptor with 10,000 apps (17–18 MiB live) holds: with 40 MiB it reached 102 MiB
// resident, with 24 MiB 88 MiB, at the same CPU per request (the binary's own pages are 37 MiB of
// either; docs/benchmarks/memory.md).
const (
	gcHeadroom   = 24 << 20
	gcMinPercent = 50
)

// gcTuner returns the Runnable that sets the process's GC target from --gc-percent: a small heap may
// grow 4x between collections (cheap in CPU per request); a heap made large by tens of thousands of
// routed apps may only grow by gcHeadroom, so the percentage does not multiply every app's memory.
// It returns nil when GOGC is set, which then decides alone.
func gcTuner(cfg *config.Interceptor) manager.Runnable {
	if os.Getenv("GOGC") != "" {
		return nil
	}
	return &gcheadroom.Runnable{Options: gcheadroom.Options{MaxPercent: cfg.GCPercent, MinPercent: min(cfg.GCPercent, gcMinPercent), Headroom: gcHeadroom}}
}

// setMemoryLimit sets the Go runtime's soft memory limit to config.MemoryLimitFraction of
// --memory-limit (the container's limit), unless GOMEMLIMIT is set. Held requests are bounded by
// what they keep alive (--max-held-bytes); the soft limit keeps the garbage they leave (the heads of
// refused requests, parsed before they could be refused) from growing the heap into the container's
// limit between two collections. It returns the limit set, 0 for none.
func setMemoryLimit(cfg *config.Interceptor) int64 {
	if cfg.MemoryLimit <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	limit := int64(float64(cfg.MemoryLimit) * config.MemoryLimitFraction)
	debug.SetMemoryLimit(limit)
	return limit
}
