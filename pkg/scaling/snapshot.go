package scaling

import (
	"time"
)

// Snapshot is the aggregated view of every interceptor replica at one moment. It is immutable once
// published: readers may keep and share it without locks.
type Snapshot struct {
	// At is when the snapshot was built; rates are computed as of At.
	At time.Time
	// Apps holds every app that some replica counts or that had requests recently.
	Apps map[string]*AppStats
	// FleetConcurrency is the concurrency summed over every app and replica (the interceptor
	// fleet's own metric).
	FleetConcurrency int64
	// Replicas describes each interceptor replica, sorted by Key.
	Replicas []ReplicaStatus
}

// AppStats is one app's aggregate in a Snapshot.
type AppStats struct {
	// Concurrency is in-flight plus held requests, summed over the replicas that count.
	Concurrency int64
	// Stale is true when part of the numbers comes from a replica whose latest poll failed and whose
	// last good answer is being kept for the grace period.
	Stale bool
	// Active is the activity KEDA is told about as of At: concurrency above zero, a request
	// observed within the active hold (AggregatorOptions.ActiveHold), or a recent wake. Requests
	// further back in the rate window count toward the rate, not toward activity.
	Active bool

	hist history
}

// Requests counts the app's requests within the window of length w ending at the snapshot's time,
// aligned to granularity g.
func (s *Snapshot) Requests(app string, w, g time.Duration) uint64 {
	a := s.Apps[app]
	if a == nil {
		return 0
	}
	return a.hist.inWindow(s.At, w, g)
}

// Rate is the app's request rate (requests per second) over the window w with granularity g. It is
// never below MinReportedRate when the window holds at least one request: KEDA formats metric
// values with three decimals, and a real request must not be rounded down to zero.
func (s *Snapshot) Rate(app string, w, g time.Duration) float64 {
	n := s.Requests(app, w, g)
	if n == 0 || w <= 0 {
		return 0
	}
	return max(float64(n)/w.Seconds(), MinReportedRate)
}

// Concurrency is the app's concurrency, zero for an unknown app.
func (s *Snapshot) Concurrency(app string) int64 {
	if a := s.Apps[app]; a != nil {
		return a.Concurrency
	}
	return 0
}

// active reports whether app was active in s; false for an unknown app or a nil Snapshot.
func (s *Snapshot) active(app string) bool {
	return s != nil && s.Apps[app] != nil && s.Apps[app].Active
}

// MinReportedRate is the smallest non-zero rate reported: the resolution (one milli-unit) at which
// KEDA turns metric values into Kubernetes quantities.
const MinReportedRate = 0.001

// ReplicaStatus describes one interceptor replica in a Snapshot.
type ReplicaStatus struct {
	// Key identifies the replica (its Pod's namespace/name, or its address).
	Key string
	// URL is the admin base URL polled.
	URL string
	// Epoch is the replica process's epoch from its last good answer.
	Epoch string
	// LastSuccess is when its last poll succeeded; zero if none did yet.
	LastSuccess time.Time
	// Stale is true when its latest poll failed (or is overdue) but its last counts are still used.
	Stale bool
	// Expired is true when no poll succeeded for longer than the grace period: its counts are ignored.
	Expired bool
	// Err is the latest poll error, if any.
	Err string
}
