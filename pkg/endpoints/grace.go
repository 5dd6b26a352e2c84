package endpoints

import (
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// The readiness grace. When the API server comes back after an outage longer than the node
// monitor's grace period (50 s by default), the controller-manager marks the nodes whose leases it
// has not seen renewed yet Unknown and every pod on them not ready, before the kubelets report again
// a few seconds later and set them ready. Nothing happened to the pods: they serve on. A warm app's
// endpoints then all turn not ready at once, none terminating, and an interceptor that took that at
// its word would hold the app's requests as if it were at zero, for the seconds until the kubelets
// report (e2e "Fault: API server stopped for 60 s": 13 of 1,046 requests held past a 5 s client
// timeout; the pods were marked not ready for 7 to 9 s).
//
// So when every endpoint of a key turns not ready at once while the pods are still listed and none
// is terminating, the key keeps those endpoints for the readiness grace. A pod that really stopped
// answering fails its connections (a dial error, which the proxy answers 502 or retries elsewhere),
// and a pod that is being deleted, scaled away or rolled is terminating and never kept; after the
// grace the key has no ready endpoint and requests are held as usual. A key with some endpoints
// still ready is not affected: it uses those.

// publish sets k's ready endpoints to set, computed from ss (all slices of k's Service), or keeps
// the endpoints it had for the readiness grace when set is empty and they are all still listed, not
// ready and not terminating. c.mu held.
func (c *Cache) publish(w *sliceWatch, k ServiceKey, ks *keyState, set *Set, ss []*discoveryv1.EndpointSlice) {
	old := ks.state.Load().set
	var kept *Set
	if set == nil && old != nil && c.grace > 0 {
		kept = unreadyListed(old, ss, k.PortName)
	}
	if kept == nil {
		ks.unreadySince = time.Time{}
		ks.update(set)
		return
	}
	now := c.clock.Now()
	if ks.unreadySince.IsZero() {
		ks.unreadySince = now
		c.log.Info("every endpoint of a routed Service turned not ready at once, none terminating; keeping them for the readiness grace",
			"service", k.String(), "endpoints", len(kept.Endpoints), "grace", c.grace.String())
		namespace, service := k.Namespace, k.Service
		// In a goroutine of its own: a clock may run the function with its own lock held, which
		// recompute needs too (Now).
		c.clock.AfterFunc(c.grace, func() {
			go func() {
				c.mu.Lock()
				defer c.mu.Unlock()
				if c.stopped || c.active[w.key] != w {
					return
				}
				c.recompute(w, namespace, service)
			}()
		})
	}
	if now.Sub(ks.unreadySince) >= c.grace {
		ks.update(nil)
		return
	}
	ks.update(kept)
}

// unreadyListed returns the endpoints of old that ss still lists on portName, not ready and not
// terminating, or nil when there are none.
func unreadyListed(old *Set, ss []*discoveryv1.EndpointSlice, portName string) *Set {
	type addr struct {
		ip   string
		port int32
	}
	listed := map[addr]bool{}
	for _, s := range ss {
		port, ok := slicePort(s.Ports, portName)
		if !ok || s.AddressType == discoveryv1.AddressTypeFQDN {
			continue
		}
		for i := range s.Endpoints {
			e := &s.Endpoints[i]
			if e.Conditions.Terminating != nil && *e.Conditions.Terminating {
				continue
			}
			for _, ip := range e.Addresses {
				listed[addr{ip, port}] = true
			}
		}
	}
	var eps []Endpoint
	for _, e := range old.Endpoints {
		if listed[addr{e.IP, e.Port}] {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return nil
	}
	return &Set{Key: old.Key, Endpoints: eps}
}
