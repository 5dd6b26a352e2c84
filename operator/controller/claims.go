package controller

import (
	"context"
	"slices"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// ClaimKeeper keeps the HostClaims' record of who uses them, and deletes the claims the operators
// created once nobody has used them for Retention. Every Interval it looks at every claim (in the
// cache): this fleet is listed in status.fleets while an object of this fleet in the claim's
// namespace is granted the host, fleets no running operator announces are dropped, and
// status.releasedAt is set when the list becomes empty (cleared when it is not). A claim labelled
// as the operator's whose releasedAt is older than Retention is deleted (with a precondition on its
// resourceVersion, so a claim another fleet took up again in the meantime stays). A claim an admin
// created without that label is never deleted. It runs on the elected leader only.
type ClaimKeeper struct {
	Client client.Client
	// Fleet is this operator's fleet.
	Fleet string
	// Fleets tells which fleets run; nil keeps every fleet listed.
	Fleets *FleetLeases
	// Retention is how long a claim nobody uses is kept; zero keeps it for good.
	Retention time.Duration
	Interval  time.Duration
	// Uses reports whether an object of this fleet in namespace ns is granted host.
	Uses func(host, ns string) bool
	// Ready reports whether every existing object was decided since the start (nil: at once), so a
	// starting operator does not take claims of objects it has not looked at yet for released.
	Ready func() bool
	Now   func() time.Time
	Log   logr.Logger
}

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (k *ClaimKeeper) NeedLeaderElection() bool { return true }

// Start sweeps every Interval until ctx ends.
func (k *ClaimKeeper) Start(ctx context.Context) error {
	t := time.NewTicker(k.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if k.Ready != nil && !k.Ready() {
			continue
		}
		k.Sweep(ctx, k.Now())
	}
}

// Sweep looks at every claim once at time now.
func (k *ClaimKeeper) Sweep(ctx context.Context, now time.Time) {
	var list v1.HostClaimList
	if err := k.Client.List(ctx, &list); err != nil {
		k.Log.Error(err, "listing HostClaims")
		return
	}
	var served *ServedFleets
	if k.Fleets != nil {
		served = k.Fleets.Served()
	}
	for i := range list.Items {
		hc := &list.Items[i]
		if !hc.DeletionTimestamp.IsZero() {
			continue
		}
		want := k.status(hc, served, now)
		if !equalClaimStatus(want, hc.Status) {
			hc.Status = want
			if err := k.Client.Status().Update(ctx, hc); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
				k.Log.Error(err, "updating HostClaim status", "claim", hc.Name, "host", hc.Spec.Host)
			}
			continue
		}
		if k.Retention > 0 && len(hc.Status.Fleets) == 0 && hc.Status.ReleasedAt != nil && hc.Labels[v1.LabelClaimManagedBy] == v1.ClaimManagedByOperator &&
			now.Sub(hc.Status.ReleasedAt.Time) >= k.Retention {
			rv := hc.ResourceVersion
			err := k.Client.Delete(ctx, hc, client.Preconditions{ResourceVersion: &rv})
			switch {
			case err == nil:
				k.Log.Info("released host: no object of its namespace used it for the retention period", "host", hc.Spec.Host,
					"namespace", hc.Spec.Namespace, "releasedAt", hc.Status.ReleasedAt.Time, "retention", k.Retention)
			case !apierrors.IsConflict(err) && !apierrors.IsNotFound(err):
				k.Log.Error(err, "deleting an expired HostClaim", "claim", hc.Name, "host", hc.Spec.Host)
			}
		}
	}
}

// status is the claim's status as this fleet sees it at now.
func (k *ClaimKeeper) status(hc *v1.HostClaim, served *ServedFleets, now time.Time) v1.HostClaimStatus {
	st := *hc.Status.DeepCopy()
	fleets := st.Fleets[:0:0]
	for _, f := range st.Fleets {
		if f == k.Fleet || served != nil && served.Known && !served.Serves(f) {
			continue // this fleet's entry is decided below; an unserved fleet routes nothing
		}
		fleets = append(fleets, f)
	}
	if k.Uses(string(hc.Spec.Host), string(hc.Spec.Namespace)) {
		fleets = append(fleets, k.Fleet)
	}
	slices.Sort(fleets)
	if len(fleets) == 0 {
		fleets = nil
	}
	st.Fleets = fleets
	switch {
	case len(fleets) > 0:
		st.ReleasedAt = nil
	case st.ReleasedAt == nil:
		st.ReleasedAt = &metav1.Time{Time: now}
	}
	return st
}

func equalClaimStatus(a, b v1.HostClaimStatus) bool {
	return slices.Equal(a.Fleets, b.Fleets) && (a.ReleasedAt == nil) == (b.ReleasedAt == nil) &&
		(a.ReleasedAt == nil || a.ReleasedAt.Equal(b.ReleasedAt))
}
