package controller

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
)

// Serve ports: the elected operator gives each Serve-mode app that owns its Service's redirect a port
// of its own on the interceptors (routing.Entry.ServePort), from a range, as part of the routing
// table's decision (tableState.decide, under the writer's lock). The redirect EndpointSlice points
// the app's Service at that port, and the interceptors route whatever arrives on it to that app
// alone. A port stays with its app while the app is in the table; a restarted writer takes the ports
// back from the stored table.

// Default Serve port range (--serve-ports).
const (
	DefaultServePortMin int32 = 20000
	DefaultServePortMax int32 = 29999
)

// portAllocator hands out ports of [lo, hi], one per key. Not safe for concurrent use (the writer's
// lock guards it).
type portAllocator struct {
	lo, hi int32
	next   int32
	byKey  map[string]int32
	byPort map[int32]string
}

func newPortAllocator(lo, hi int32) *portAllocator {
	if lo <= 0 || hi < lo {
		lo, hi = DefaultServePortMin, DefaultServePortMax
	}
	return &portAllocator{lo: lo, hi: hi, next: lo, byKey: map[string]int32{}, byPort: map[int32]string{}}
}

// hint gives key port when it is in the range and free (the port a stored table recorded for it).
func (a *portAllocator) hint(key string, port int32) {
	if _, has := a.byKey[key]; has || port < a.lo || port > a.hi {
		return
	}
	if _, taken := a.byPort[port]; !taken {
		a.byKey[key], a.byPort[port] = port, key
	}
}

// assign returns key's port, giving it the next free one if it has none; 0 when all are taken.
func (a *portAllocator) assign(key string) int32 {
	if p, ok := a.byKey[key]; ok {
		return p
	}
	for range int(a.hi-a.lo) + 1 {
		p := a.next
		a.next++
		if a.next > a.hi {
			a.next = a.lo
		}
		if _, taken := a.byPort[p]; !taken {
			a.byKey[key], a.byPort[p] = p, key
			return p
		}
	}
	return 0
}

// free reports whether a port is free.
func (a *portAllocator) free() bool { return len(a.byPort) < int(a.hi-a.lo)+1 }

// release frees key's port.
func (a *portAllocator) release(key string) {
	if p, ok := a.byKey[key]; ok {
		delete(a.byKey, key)
		delete(a.byPort, p)
	}
}

// port returns key's port, 0 when it has none.
func (a *portAllocator) port(key string) int32 { return a.byKey[key] }

// ServePort returns the Serve port the writer decided for key, 0 when it has none (not in Serve mode,
// not the owner of its Service's redirect, out of the table, or the range is exhausted). The port is
// in the table once a write after this decision succeeded (Written). Safe for concurrent use.
func (w *TableWriter) ServePort(key string) int32 {
	w.init()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == nil || w.state.ports == nil {
		return 0
	}
	return w.state.ports.port(key)
}

// Reasons of the Serving condition when the redirect cannot be put in place.
const (
	// ServingReasonRoutesNotOwned: the object lost a route conflict or some of its hosts are refused.
	ServingReasonRoutesNotOwned = "RoutesNotOwned"
	// ServingReasonNoServePort: the object has no Serve port (yet, or the range is exhausted).
	ServingReasonNoServePort = "NoServePort"
)

// servePort returns hso's Serve port, or the reason and message of the Serving condition why its
// Service cannot be redirected: traffic redirected from a Service may reach only that Service's own
// app, so there is no redirect while the app does not own its routes, and none before the table that
// gives it its port is written (the interceptors open the port when they read it).
func (r *Reconciler) servePort(hso *v1.HTTPScaledObject) (port int32, reason, msg string) {
	key := appkey.New(hso.Namespace, hso.Name).String()
	w := r.Table.Written()
	if w.Lost(key) {
		return 0, ServingReasonRoutesNotOwned, "another object holds one of this object's routes (see condition Conflict): its Service is not redirected while it does not own its routes"
	}
	if v, ok := r.own.verdict(key, hso.UID, hso.Generation); ok && len(v.refused) > 0 {
		return 0, ServingReasonRoutesNotOwned, "some of this object's hosts are not its namespace's (see condition HostsAccepted): its Service is not redirected while it does not own its routes"
	}
	port = r.Table.ServePort(key)
	if port == 0 || !w.Contains(key) {
		return 0, ServingReasonNoServePort, "the app has no Serve port on the interceptors yet (the routing table that gives it one is not written, or every port of the operator's --serve-ports range is taken)"
	}
	return port, "", ""
}

// wantsServePort reports whether hso asks for a Serve port: it is in Serve mode, its Service can be
// redirected, and it is the object that owns the Service's redirect (the oldest Serve-mode object
// on it). Reads the cache.
func (r *Reconciler) wantsServePort(ctx context.Context, hso *v1.HTTPScaledObject) (bool, error) {
	if !hso.Spec.Serve() {
		return false, nil
	}
	svc := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: hso.Namespace, Name: hso.Spec.ScaleTargetRef.Service}, svc); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	if serveUnsupported(svc) != "" {
		return false, nil
	}
	owner, err := r.serveOwner(ctx, hso)
	return owner == hso.Name, err
}
