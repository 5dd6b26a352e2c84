package controller

import (
	"context"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/pkg/admin"
)

// Replica is one ready interceptor replica as last probed.
type Replica struct {
	Address string
	// Version is the routing-table version it reported; empty when it did not answer.
	Version string
	Err     string
}

// Fleet is an immutable view of the interceptor replicas.
type Fleet struct {
	Replicas []Replica
	ProbedAt time.Time
}

// Propagation counts the replicas of f that serve a table at or after seq, given the writer's view.
func (f *Fleet) Propagation(w *Written, seq uint64) (ready, total int32) {
	for _, r := range f.Replicas {
		total++
		if s, ok := w.Seq(r.Version); ok && s >= seq {
			ready++
		}
	}
	return ready, total
}

// Prober finds interceptor replicas through the EndpointSlices of their admin Service and asks each
// which routing-table version it serves. It probes every Interval and whenever Kick is called; calls
// run concurrently, each bounded by Timeout, and no lock is held across them.
type Prober struct {
	Reader    client.Reader // EndpointSlices (cached)
	Namespace string
	Selector  labels.Selector
	// PortName picks the admin port in the EndpointSlice; empty takes the first port.
	PortName string
	Interval time.Duration
	Timeout  time.Duration
	Admin    admin.Client
	Log      logr.Logger
	// OnChange is called with the previous and the new result when a probe round's result differs
	// from the previous one.
	OnChange func(prev, next *Fleet)
	// Written, when set, is the table writer's view; each round then also measures how far behind the
	// tables written the replicas are (the operator's propagation metrics, metrics.go).
	Written func() *Written
	// ColdStarts, when set, fetches the cold starts a replica recorded since the last round, when
	// its status says it has new ones (within the same timeout as its status).
	ColdStarts *ColdStarts

	lag   lagTracker
	fleet atomic.Pointer[Fleet]
	kick  chan struct{}
	once  sync.Once
}

func (p *Prober) init() {
	p.once.Do(func() {
		p.kick = make(chan struct{}, 1)
		p.fleet.Store(&Fleet{})
	})
}

// Fleet returns the last probe round's result. Safe for concurrent use.
func (p *Prober) Fleet() *Fleet {
	p.init()
	return p.fleet.Load()
}

// Kick asks for a probe round now (after a table write). It never blocks.
func (p *Prober) Kick() {
	p.init()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Start probes until ctx ends.
func (p *Prober) Start(ctx context.Context) error {
	p.init()
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		p.probe(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-p.kick:
			// Give interceptors a moment to receive the new table before asking.
			if !sleep(ctx, 50*time.Millisecond) {
				return nil
			}
		}
	}
}

func (p *Prober) probe(ctx context.Context) {
	addrs, err := p.readyAddresses(ctx)
	if err != nil {
		p.Log.Error(err, "listing interceptor EndpointSlices")
		return
	}
	replicas := make([]Replica, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, p.Timeout)
			defer cancel()
			replicas[i].Address = addr
			st, err := p.Admin.Status(cctx, "http://"+addr)
			if err != nil {
				replicas[i].Err = err.Error()
				return
			}
			replicas[i].Version = st.TableVersion
			if p.ColdStarts != nil {
				p.ColdStarts.Fetch(cctx, "http://"+addr, st)
			}
		}()
	}
	wg.Wait()
	next := &Fleet{Replicas: replicas, ProbedAt: time.Now()}
	if p.Written != nil {
		p.lag.observe(next.ProbedAt, p.Written(), next).export()
	}
	prev := p.fleet.Swap(next)
	if !sameFleet(prev, next) {
		p.Log.V(1).Info("interceptor fleet changed", "replicas", len(replicas))
		if p.OnChange != nil {
			p.OnChange(prev, next)
		}
	}
}

// Affected returns the keys whose propagation status (Propagation) can differ between fleets prev and
// next, or all=true when that is every object: the replicas themselves changed, or one serves a
// version w does not know. Otherwise only objects introduced after the oldest table any replica of
// either fleet serves can be counted differently; after a write that is the few objects it
// introduced, not every object. Cost: one pass over w's keys.
func Affected(prev, next *Fleet, w *Written) (keys []string, all bool) {
	if len(prev.Replicas) != len(next.Replicas) {
		return nil, true
	}
	lowest := uint64(math.MaxUint64)
	for i := range next.Replicas {
		a, b := prev.Replicas[i], next.Replicas[i]
		if a.Address != b.Address || (a.Err == "") != (b.Err == "") {
			return nil, true
		}
		for _, v := range []string{a.Version, b.Version} {
			s, ok := w.Seq(v)
			if !ok {
				return nil, true
			}
			lowest = min(lowest, s)
		}
	}
	for k, in := range w.introduced {
		if in.seq > lowest {
			keys = append(keys, k)
		}
	}
	return keys, false
}

func sameFleet(a, b *Fleet) bool {
	return slices.EqualFunc(a.Replicas, b.Replicas, func(x, y Replica) bool {
		return x.Address == y.Address && x.Version == y.Version && (x.Err == "") == (y.Err == "")
	})
}

// readyAddresses returns host:port of every ready endpoint, sorted.
func (p *Prober) readyAddresses(ctx context.Context) ([]string, error) {
	var slicesList discoveryv1.EndpointSliceList
	if err := p.Reader.List(ctx, &slicesList, client.InNamespace(p.Namespace), client.MatchingLabelsSelector{Selector: p.Selector}); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range slicesList.Items {
		port := int32(0)
		for _, sp := range s.Ports {
			if sp.Port != nil && (p.PortName == "" || (sp.Name != nil && *sp.Name == p.PortName)) {
				port = *sp.Port
				break
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			if len(ep.Addresses) == 0 {
				continue
			}
			addr := net.JoinHostPort(ep.Addresses[0], strconv.Itoa(int(port)))
			if !seen[addr] {
				seen[addr] = true
				out = append(out, addr)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
