package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func TestLiveFleets(t *testing.T) {
	now := time.Date(2026, 11, 24, 4, 0, 0, 0, time.UTC)
	lease := func(fleet string, renewed time.Duration, seconds int32) coordinationv1.Lease {
		l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{LabelFleet: fleet}}}
		l.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-renewed)}
		l.Spec.LeaseDurationSeconds = ptr.To(seconds)
		return l
	}
	unlabelled := lease("", 0, 45)
	noRenew := lease("never", 0, 45)
	noRenew.Spec.RenewTime = nil
	got := liveFleets([]coordinationv1.Lease{
		lease("red", 10*time.Second, 45),
		lease("blue", 44*time.Second, 45),
		lease("gone", 46*time.Second, 45), // an uninstalled release: its Lease expired
		lease("red", time.Second, 45),     // the same fleet twice (two namespaces): listed once
		unlabelled, noRenew,
	}, now)
	if diff := cmp.Diff([]string{"blue", "red"}, got); diff != "" {
		t.Errorf("live fleets (-want +got):\n%s", diff)
	}
}

func TestReporterIsTheFirstServedFleet(t *testing.T) {
	s := &ServedFleets{Known: true, Live: []string{"blue", "default"}}
	for fleet, want := range map[string]bool{"blue": true, "default": false, "alpha": true} {
		if got := s.Reporter(fleet); got != want {
			t.Errorf("Reporter(%s) with fleets %v = %v, want %v", fleet, s.Live, got, want)
		}
	}
	if (&ServedFleets{}).Reporter("blue") {
		t.Error("an operator that has not listed the fleets yet must not report")
	}
	if !s.Serves("default") || s.Serves("green") {
		t.Errorf("Serves: default %v, green %v", s.Serves("default"), s.Serves("green"))
	}
}

// Names the operator derives from its fleet: the default fleet keeps the ones it had before fleets
// existed (an upgrade must not run two leaders or strand finalizers); other fleets get their own.
func TestFleetNames(t *testing.T) {
	for _, c := range []struct {
		fleet, lease, finalizer string
	}{
		{"", "operator.httpscale.dev", "httpscale.dev/routing-table"},
		{"default", "operator.httpscale.dev", "httpscale.dev/routing-table"},
		{"blue", "blue.operator.httpscale.dev", "routing-table.httpscale.dev/blue"},
	} {
		if got := LeaderElectionID(c.fleet); got != c.lease {
			t.Errorf("LeaderElectionID(%q) = %s, want %s", c.fleet, got, c.lease)
		}
		if got := FinalizerFor(c.fleet); got != c.finalizer {
			t.Errorf("FinalizerFor(%q) = %s, want %s", c.fleet, got, c.finalizer)
		}
	}
}
