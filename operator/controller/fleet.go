package controller

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// LabelFleet marks the Lease with which an operator announces the fleet it serves; its value is the
// fleet's name.
const LabelFleet = "httpscale.dev/fleet"

// Every operator lists the fleet Leases of all namespaces to tell which fleets some operator serves.
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=list

// FinalizerFor is the finalizer with which the operator of fleet keeps an object until the fleet's
// routing table no longer holds it. Each fleet has its own, so that moving an object to another fleet
// never takes away the finalizer the new fleet relies on; the default fleet's is Finalizer.
func FinalizerFor(fleet string) string {
	if fleet == "" || fleet == v1.DefaultFleet {
		return Finalizer
	}
	return "routing-table.httpscale.dev/" + fleet
}

// LeaderElectionID is the name of the leader-election Lease of fleet's operator, in its install
// namespace: distinct per fleet, so that two releases may share a namespace. The default fleet keeps
// the name it had before fleets existed, so that an upgrade never runs two leaders.
func LeaderElectionID(fleet string) string {
	if fleet == "" || fleet == v1.DefaultFleet {
		return "operator.httpscale.dev"
	}
	return fleet + ".operator.httpscale.dev"
}

// FleetLeaseName is the name of the Lease announcing fleet, in its operator's install namespace.
func FleetLeaseName(fleet string) string { return fleet + ".fleet.httpscale.dev" }

// ServedFleets is an immutable view of the fleets whose operators announced themselves recently.
type ServedFleets struct {
	// Known is false until the first list of the fleet Leases succeeded.
	Known bool
	// Live lists the served fleets, sorted.
	Live []string
}

// Serves reports whether some running operator serves fleet.
func (s *ServedFleets) Serves(fleet string) bool {
	_, ok := slices.BinarySearch(s.Live, fleet)
	return ok
}

// Reporter reports whether the operator of fleet is the one that reports objects of unserved fleets:
// the served fleet whose name sorts first, so that exactly one operator writes that status while the
// announcements are settled, whichever releases are installed (there need not be a default fleet).
func (s *ServedFleets) Reporter(fleet string) bool {
	return s.Known && (len(s.Live) == 0 || s.Live[0] >= fleet)
}

// FleetLeases announces this operator's fleet and keeps the view of every fleet announced. The leader
// renews a Lease named FleetLeaseName(Fleet), labelled LabelFleet=Fleet, in Namespace every Interval,
// valid for three intervals, and lists the Leases of all namespaces carrying that label (uncached: a
// handful of objects, read once per Interval). A fleet is served while its Lease is valid, so an
// uninstalled release stops counting within three intervals. It runs only on the elected leader.
type FleetLeases struct {
	Client    client.Client // writes this fleet's Lease
	Reader    client.Reader // uncached: reads this fleet's Lease and lists every fleet's
	Namespace string
	Fleet     string
	// Identity is the Lease's holder (the pod's name).
	Identity string
	Interval time.Duration
	Now      func() time.Time
	Log      logr.Logger
	// OnChange is called when the set of served fleets changed, and after the first list.
	OnChange func()

	view      atomic.Pointer[ServedFleets]
	announced atomic.Bool
}

// Announced reports whether this fleet's Lease was written since the start. The operator writes
// the status of its fleet's objects only after that, so that an operator reading a fresh Lease list
// (ServedNow) before it reports an object unserved cannot overwrite the status its fleet's operator
// wrote. Safe for concurrent use.
func (f *FleetLeases) Announced() bool { return f.announced.Load() }

// ServedNow asks the API server (not the periodic view) whether a running operator serves fleet.
func (f *FleetLeases) ServedNow(ctx context.Context, fleet string) (bool, error) {
	var list coordinationv1.LeaseList
	if err := f.Reader.List(ctx, &list, client.MatchingLabels{LabelFleet: fleet}); err != nil {
		return false, fmt.Errorf("listing Leases of fleet %s: %w", fleet, err)
	}
	return len(liveFleets(list.Items, f.Now())) > 0, nil
}

// Served returns the current view; before the first list it is not Known. Safe for concurrent use.
func (f *FleetLeases) Served() *ServedFleets {
	if v := f.view.Load(); v != nil {
		return v
	}
	return &ServedFleets{}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: only the operator that writes the
// fleet's table announces it.
func (f *FleetLeases) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable.
func (f *FleetLeases) Start(ctx context.Context) error {
	t := time.NewTicker(f.Interval)
	defer t.Stop()
	for {
		now := f.Now()
		if err := f.announce(ctx, now); err != nil && ctx.Err() == nil {
			f.Log.Error(err, "announcing fleet", "fleet", f.Fleet)
		}
		if err := f.refresh(ctx, now); err != nil && ctx.Err() == nil {
			f.Log.Error(err, "listing fleet Leases")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (f *FleetLeases) announce(ctx context.Context, now time.Time) error {
	lease := &coordinationv1.Lease{}
	key := types.NamespacedName{Namespace: f.Namespace, Name: FleetLeaseName(f.Fleet)}
	err := f.Reader.Get(ctx, key, lease) // uncached: a cached read would watch every Lease of the cluster
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading Lease %s: %w", key, err)
	}
	create := apierrors.IsNotFound(err)
	lease.Name, lease.Namespace = key.Name, key.Namespace
	if lease.Labels == nil {
		lease.Labels = map[string]string{}
	}
	lease.Labels[LabelFleet] = f.Fleet
	lease.Spec.HolderIdentity = ptr.To(f.Identity)
	lease.Spec.LeaseDurationSeconds = ptr.To(int32(max(1, (3*f.Interval).Round(time.Second)/time.Second)))
	lease.Spec.RenewTime = &metav1.MicroTime{Time: now}
	if create {
		err = f.Client.Create(ctx, lease)
	} else {
		err = f.Client.Update(ctx, lease)
	}
	if err != nil {
		return fmt.Errorf("writing Lease %s: %w", key, err)
	}
	f.announced.Store(true)
	return nil
}

func (f *FleetLeases) refresh(ctx context.Context, now time.Time) error {
	var list coordinationv1.LeaseList
	if err := f.Reader.List(ctx, &list, client.HasLabels{LabelFleet}); err != nil {
		return err
	}
	next := &ServedFleets{Known: true, Live: liveFleets(list.Items, now)}
	prev := f.view.Swap(next)
	if prev == nil || !slices.Equal(prev.Live, next.Live) {
		f.Log.Info("fleets served", "fleets", next.Live)
		if f.OnChange != nil {
			f.OnChange()
		}
	}
	return nil
}

// liveFleets returns the sorted fleets of the Leases still valid at now.
func liveFleets(leases []coordinationv1.Lease, now time.Time) []string {
	var live []string
	for _, l := range leases {
		name := l.Labels[LabelFleet]
		if name == "" || l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
			continue
		}
		if now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second)) {
			continue
		}
		live = append(live, name)
	}
	slices.Sort(live)
	return slices.Compact(live)
}
