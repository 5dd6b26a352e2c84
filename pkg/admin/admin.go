// Package admin is the contract of the interceptor's admin port: the paths, the JSON bodies, and a
// client. The operator asks it which routing-table version a replica serves; the scaler reads per-app
// counts and subscribes to wake notices.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Paths served on the interceptor's admin port.
const (
	// PathStatus answers GET with Status.
	PathStatus = "/status"
	// PathCounts answers GET with Counts.
	PathCounts = "/counts"
	// PathWake streams WakeEvents as newline-delimited JSON for as long as the client stays connected.
	PathWake = "/wake"
	// PathMetrics serves Prometheus metrics.
	PathMetrics = "/metrics"
	// PathHealthz and PathReadyz are the probes; readyz turns 503 when the replica starts draining.
	PathHealthz = "/healthz"
	PathReadyz  = "/readyz"
)

// Status describes what one interceptor replica serves.
type Status struct {
	// TableVersion is the version of the routing table the replica routes with; empty before the first
	// table was loaded.
	TableVersion string `json:"tableVersion"`
	// TableEntries counts the apps in that table.
	TableEntries int `json:"tableEntries"`
	// Draining is true once the replica received SIGTERM.
	Draining bool `json:"draining"`
	// ColdStartEpoch and ColdStartSeq say which cold starts the replica has recorded: a client that
	// holds them all up to this sequence of this epoch need not ask PathColdStarts again.
	ColdStartEpoch string `json:"coldStartEpoch,omitempty"`
	ColdStartSeq   uint64 `json:"coldStartSeq,omitempty"`
}

// Counts is one replica's per-app traffic counts, the body of PathCounts.
//
// Values are absolute, never deltas. A Full answer lists every app the replica counts: the consumer
// replaces everything it knew about the replica, forgetting apps that are absent. A delta answer
// (Full false) lists only the apps whose counts changed since the requested sequence plus every app
// with requests in flight or held; apps that are absent keep their previous values. An app may
// appear again with unchanged values: duplicates are harmless because values are absolute.
type Counts struct {
	// Epoch identifies the replica's process; it changes when the replica restarts and its counters
	// start again from zero.
	Epoch string `json:"epoch"`
	// Seq is the value to pass as since in the next request to the same replica.
	Seq uint64 `json:"seq"`
	// Full is true when Apps is a complete snapshot rather than a delta.
	Full bool `json:"full,omitempty"`
	// Apps is sorted by Key.
	Apps []AppCount `json:"apps"`
}

// AppCount is one app's counters on one replica. The JSON tags are short because a full snapshot
// carries thousands of them several times a second; zero values are omitted.
type AppCount struct {
	// Key is the HTTPScaledObject's "namespace/name".
	Key string `json:"k"`
	// InFlight counts requests forwarded to the app and not finished (open WebSockets included).
	InFlight int64 `json:"i,omitempty"`
	// Held counts requests waiting for the app to have a ready endpoint.
	Held int64 `json:"h,omitempty"`
	// Requests counts requests received since the counter was created. It only grows, except that it
	// starts again from zero when the replica restarts (a new Epoch) or when the app was removed from
	// the routing table and added back; consumers treat a decrease as a reset, as Prometheus does.
	Requests uint64 `json:"r,omitempty"`
}

// Concurrency is InFlight + Held, the value the scaler sums across replicas.
func (a AppCount) Concurrency() int64 { return a.InFlight + a.Held }

// WakeEvent tells the scaler that an app without a ready endpoint received a request. PathWake
// streams one JSON object per line; a line with an empty Key is a heartbeat.
type WakeEvent struct {
	// Key is the HTTPScaledObject's "namespace/name".
	Key string `json:"key,omitempty"`
	// At is when the replica first saw the request that caused the event.
	At time.Time `json:"at,omitzero"`
}

// The wake stream's liveness contract.
const (
	// DefaultWakeHeartbeat is how often the server writes a heartbeat line on an idle wake stream
	// when HandlerOptions.WakeHeartbeat is zero.
	DefaultWakeHeartbeat = 5 * time.Second
	// WakeHeartbeatMisses is how many heartbeat intervals a client waits for a line before it treats
	// the stream as broken.
	WakeHeartbeatMisses = 3
	// HeaderWakeHeartbeat carries the server's heartbeat interval (a Go duration, e.g. "5s") on the
	// wake stream's response so that the client knows when to give up.
	HeaderWakeHeartbeat = "Httpscale-Wake-Heartbeat"
	// MaxWakeHeartbeat caps the heartbeat interval a client believes: a replica announcing an hour
	// and then falling silent must not keep a dead stream open for hours.
	MaxWakeHeartbeat = time.Minute
)

// MaxBodyBytes bounds a Status or Counts body the client reads. A full Counts snapshot of 100,000
// apps is under 10 MiB.
const MaxBodyBytes = 32 << 20

// ErrBodyTooLarge is wrapped by the error of a call whose response body exceeded MaxBodyBytes.
var ErrBodyTooLarge = errors.New("response body exceeds limit")

// Client talks to one interceptor replica's admin port. It is safe for concurrent use.
type Client struct {
	// HTTP is the client used for requests; callers set its transport and bound every call with ctx.
	// Its Timeout must be zero for Wake, whose response never ends; Wake bounds itself with the
	// heartbeat instead.
	HTTP *http.Client
	// MaxWakeHeartbeat caps the heartbeat interval announced by the replica; zero means
	// MaxWakeHeartbeat.
	MaxWakeHeartbeat time.Duration
	// MaxBody bounds a Status or Counts body; zero means MaxBodyBytes.
	MaxBody int64
}

// Status fetches the replica's Status from baseURL (http://host:port).
func (c Client) Status(ctx context.Context, baseURL string) (Status, error) {
	var s Status
	if err := c.getJSON(ctx, baseURL+PathStatus, &s); err != nil {
		return Status{}, err
	}
	return s, nil
}

func (c Client) getJSON(ctx context.Context, url string, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("building request for %s: %w", url, err)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: status %d: %s", url, resp.StatusCode, body)
	}
	// Read at most MaxBody: a replica that streams an endless or huge body must cost the caller
	// a bounded amount of memory, not all of it. The request's context bounds the time.
	limit := c.MaxBody
	if limit <= 0 {
		limit = MaxBodyBytes
	}
	body := &io.LimitedReader{R: resp.Body, N: limit + 1}
	if err := json.NewDecoder(body).Decode(into); err != nil {
		if body.N <= 0 {
			return fmt.Errorf("decoding %s: %w (%d bytes)", url, ErrBodyTooLarge, limit)
		}
		return fmt.Errorf("decoding %s (Content-Type %q): %w", url, resp.Header.Get("Content-Type"), err)
	}
	return nil
}
