package controller

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// The claim keeper's bookkeeping, with time as a parameter (the envtest spec "releases a host once
// its namespace left it for the retention period" runs it against a real API server).
func TestClaimKeeperSweep(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	claim := func(host, ns string, managed bool, st v1.HostClaimStatus) *v1.HostClaim {
		hc := &v1.HostClaim{ObjectMeta: metav1.ObjectMeta{Name: v1.HostClaimName(host)}, Spec: v1.HostClaimSpec{Host: v1.Host(host), Namespace: v1.NamespaceName(ns)}, Status: st}
		if managed {
			hc.Labels = map[string]string{v1.LabelClaimManagedBy: v1.ClaimManagedByOperator}
		}
		return hc
	}
	used := map[string]bool{"used.example.com/a": true}
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&v1.HostClaim{}).WithObjects(
		claim("used.example.com", "a", true, v1.HostClaimStatus{ReleasedAt: &metav1.Time{Time: t0}}),
		claim("left.example.com", "a", true, v1.HostClaimStatus{Fleets: []string{"default"}}),
		claim("other-fleet.example.com", "a", true, v1.HostClaimStatus{Fleets: []string{"edge"}}),
		claim("admin.example.com", "a", false, v1.HostClaimStatus{ReleasedAt: &metav1.Time{Time: t0.Add(-48 * time.Hour)}}),
		claim("expired.example.com", "a", true, v1.HostClaimStatus{ReleasedAt: &metav1.Time{Time: t0.Add(-25 * time.Hour)}}),
	).Build()
	k := &ClaimKeeper{Client: c, Fleet: "default", Retention: 24 * time.Hour, Log: testr.New(t),
		Uses: func(host, ns string) bool { return used[host+"/"+ns] }}
	ctx := context.Background()
	get := func(host string) (*v1.HostClaim, bool) {
		hc := &v1.HostClaim{}
		err := c.Get(ctx, client.ObjectKey{Name: v1.HostClaimName(host)}, hc)
		return hc, err == nil
	}

	k.Sweep(ctx, t0)
	if hc, _ := get("used.example.com"); len(hc.Status.Fleets) != 1 || hc.Status.ReleasedAt != nil {
		t.Errorf("a claim in use: fleets %v releasedAt %v, want [default] and none", hc.Status.Fleets, hc.Status.ReleasedAt)
	}
	if hc, _ := get("left.example.com"); len(hc.Status.Fleets) != 0 || hc.Status.ReleasedAt == nil || !hc.Status.ReleasedAt.Time.Equal(t0) {
		t.Errorf("a claim its fleet left: fleets %v releasedAt %v, want none and %s", hc.Status.Fleets, hc.Status.ReleasedAt, t0)
	}
	if hc, _ := get("other-fleet.example.com"); len(hc.Status.Fleets) != 1 || hc.Status.Fleets[0] != "edge" {
		t.Errorf("another fleet's use must stay (no fleet view): %v", hc.Status.Fleets)
	}
	if _, ok := get("admin.example.com"); !ok {
		t.Error("a claim an admin created expired")
	}
	if _, ok := get("expired.example.com"); ok {
		t.Error("a claim released longer ago than the retention period was kept")
	}

	k.Sweep(ctx, t0.Add(23*time.Hour))
	if _, ok := get("left.example.com"); !ok {
		t.Error("released 23 h ago, with a 24 h retention: deleted too early")
	}
	k.Sweep(ctx, t0.Add(24*time.Hour))
	if _, ok := get("left.example.com"); ok {
		t.Error("released 24 h ago, with a 24 h retention: kept")
	}

	// With the fleet Leases known, a fleet no running operator serves uses nothing.
	k.Fleets = &FleetLeases{}
	k.Fleets.view.Store(&ServedFleets{Known: true, Live: []string{"default"}})
	k.Sweep(ctx, t0.Add(25*time.Hour))
	if hc, _ := get("other-fleet.example.com"); len(hc.Status.Fleets) != 0 || hc.Status.ReleasedAt == nil {
		t.Errorf("an uninstalled fleet's use: fleets %v releasedAt %v, want none and set", hc.Status.Fleets, hc.Status.ReleasedAt)
	}
}
