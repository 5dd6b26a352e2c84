package admin

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// PathColdStarts answers GET ?since=<seq>&epoch=<epoch> with ColdStarts: the cold starts the replica
// finished recording after since (all it keeps for since 0 or another epoch).
const PathColdStarts = "/coldstarts"

// Step names of a cold start, in the order they usually happen. Held is always the first step;
// the others appear when they happened and were seen.
const (
	StepHeld              = "Held"              // the first request of the cold start was held
	StepWakeSent          = "WakeSent"          // the wake notice was published on the wake streams
	StepScaled            = "Scaled"            // KEDA scaled the workload from zero (the operator adds it)
	StepPodCreated        = "PodCreated"        // the pod's creationTimestamp (to the second)
	StepPodScheduled      = "PodScheduled"      // the pod's PodScheduled condition (to the second)
	StepContainersStarted = "ContainersStarted" // the latest container startedAt (to the second)
	StepEndpointListed    = "EndpointListed"    // the pod's address appeared in the EndpointSlice, not ready
	StepAppAnswered       = "AppAnswered"       // the interceptor's cold-start probe passed
	StepEndpointReady     = "EndpointReady"     // the kubelet's readiness reached the EndpointSlice
	StepForwarded         = "Forwarded"         // the first held request was sent to the app
)

// Outcomes of a cold start.
const (
	OutcomeForwarded = "Forwarded" // a held request was forwarded
	OutcomeTimedOut  = "TimedOut"  // held requests reached the readiness timeout
	OutcomeAbandoned = "Abandoned" // every held request went away (or the replica stopped) first
	OutcomeReady     = "Ready"     // the app became ready with no request held (waiting-page requests)
)

// MaxColdStarts bounds the cold starts of one ColdStarts answer a client accepts, and
// MaxColdStartSteps the steps of one.
const (
	MaxColdStarts     = 4096
	MaxColdStartSteps = 16
)

// ColdStarts is the body of PathColdStarts.
type ColdStarts struct {
	// Epoch identifies the replica's process (as Counts.Epoch).
	Epoch string `json:"epoch"`
	// Seq is the value to pass as since in the next request.
	Seq uint64 `json:"seq"`
	// ColdStarts are oldest first.
	ColdStarts []ColdStart `json:"coldStarts"`
}

// ColdStart is one app's cold start as one interceptor replica recorded it.
type ColdStart struct {
	// Seq orders the replica's records.
	Seq uint64 `json:"seq"`
	// App is the HTTPScaledObject's "namespace/name".
	App string `json:"app"`
	// Interceptor is the replica's pod name.
	Interceptor string `json:"interceptor,omitempty"`
	// Pod is the app's pod the held requests went to (or that answered first).
	Pod string `json:"pod,omitempty"`
	// Probe is what the replica probed, or why it did not.
	Probe string `json:"probe,omitempty"`
	// Outcome is one of the Outcome constants.
	Outcome string `json:"outcome"`
	// Steps are in time order; the first is StepHeld.
	Steps []ColdStartStep `json:"steps"`
}

// ColdStartStep is one step of a ColdStart.
type ColdStartStep struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
	// Coarse marks a time the API server keeps to the second (pod creation, scheduling, start).
	Coarse bool `json:"coarse,omitempty"`
}

// Step returns the time of the step named name, zero when it did not happen.
func (c ColdStart) Step(name string) time.Time {
	for _, s := range c.Steps {
		if s.Name == name {
			return s.At
		}
	}
	return time.Time{}
}

// Validate reports the first way c is not a believable record: an app key that is not
// "namespace/name", no Held step first, too many steps, or over-long strings.
func (c ColdStart) Validate() error {
	if err := CheckAppKey(c.App); err != nil {
		return err
	}
	if len(c.Steps) == 0 || c.Steps[0].Name != StepHeld || len(c.Steps) > MaxColdStartSteps {
		return fmt.Errorf("cold start of %s: %d steps, want Held first and at most %d", c.App, len(c.Steps), MaxColdStartSteps)
	}
	for _, s := range []string{c.Interceptor, c.Pod, c.Outcome} {
		if len(s) > 253 {
			return fmt.Errorf("cold start of %s: a name longer than 253 bytes", c.App)
		}
	}
	if len(c.Probe) > 1024 {
		return fmt.Errorf("cold start of %s: probe description longer than 1024 bytes", c.App)
	}
	return nil
}

// ColdStartSource is what PathColdStarts serves. pkg/coldstart's Tracker implements it.
type ColdStartSource interface {
	// ColdStartsSince returns the records finished after since of the current epoch; all that are
	// kept when since is 0 or epoch is not the source's. It must not block on I/O.
	ColdStartsSince(since uint64, epoch string) ColdStarts
}

// coldStartsHandler serves PathColdStarts.
func coldStartsHandler(src ColdStartSource) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if since, ok := sinceParam(w, q); ok {
			writeJSON(w, src.ColdStartsSince(since, q.Get("epoch")))
		}
	}
}

// ColdStarts fetches the cold starts the replica at baseURL recorded after since (of epoch). It
// rejects an answer with more than MaxColdStarts records or a record that is not believable
// (ColdStart.Validate). It blocks for one HTTP round trip, bounded by ctx.
func (c Client) ColdStarts(ctx context.Context, baseURL string, since uint64, epoch string) (ColdStarts, error) {
	q := url.Values{}
	q.Set("since", strconv.FormatUint(since, 10))
	q.Set("epoch", epoch)
	var out ColdStarts
	if err := c.getJSON(ctx, baseURL+PathColdStarts+"?"+q.Encode(), &out); err != nil {
		return ColdStarts{}, err
	}
	if len(out.ColdStarts) > MaxColdStarts {
		return ColdStarts{}, fmt.Errorf("cold starts from %s: %d records, more than %d", baseURL, len(out.ColdStarts), MaxColdStarts)
	}
	for _, cs := range out.ColdStarts {
		if err := cs.Validate(); err != nil {
			return ColdStarts{}, fmt.Errorf("cold starts from %s: %w", baseURL, err)
		}
	}
	return out, nil
}
