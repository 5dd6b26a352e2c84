package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/httpscale/httpscale/pkg/appkey"
)

// Errors that end Client.Wake; the caller reconnects after any of them (with backoff) unless its own
// context ended.
var (
	// ErrHeartbeatMissed means no line (event or heartbeat) arrived for WakeHeartbeatMisses heartbeat
	// intervals: the replica hung or the connection died without a FIN.
	ErrHeartbeatMissed = errors.New("wake stream: heartbeat missed")
	// ErrStreamEnded means the replica closed the stream, usually because it is shutting down.
	ErrStreamEnded = errors.New("wake stream: ended by server")
)

// maxWakeLine bounds one line of the wake stream; an event is well under 1 KiB.
const maxWakeLine = 64 << 10

// Sanity limits of a Counts answer. A replica whose answer breaks one is misbehaving; trusting it
// would let it cancel other replicas' concurrency with a negative value, overflow a sum that every app
// or the whole fleet shares, or exhaust the consumer's memory.
const (
	// MaxAppConcurrency bounds InFlight and Held of one app on one replica.
	MaxAppConcurrency = 1 << 24
	// MaxAppRequests bounds Requests; it is where float64 stops counting exactly.
	MaxAppRequests = 1 << 53
	// MaxApps bounds the apps of one answer, several times the largest fleet the project is sized for.
	MaxApps = 1 << 18
)

// MaxAppKeyBytes is the longest "namespace/name" Kubernetes allows: a 63-byte namespace and a
// 253-byte name.
const MaxAppKeyBytes = 63 + 1 + 253

// CheckAppKey reports whether key can name an app: "namespace/name" and no longer than
// MaxAppKeyBytes. The error quotes at most the first 64 bytes of key.
func CheckAppKey(key string) error {
	if len(key) > MaxAppKeyBytes {
		return fmt.Errorf("%w %q...: %d bytes, more than %d", appkey.ErrMalformed, key[:64], len(key), MaxAppKeyBytes)
	}
	_, err := appkey.Parse(key)
	return err
}

// ErrInvalidCounts is wrapped by the error of a Counts answer that is not well formed or breaks a
// sanity limit.
var ErrInvalidCounts = errors.New("invalid counts")

// Validate reports the first way c is not a believable answer: no epoch, too many apps, a key that is
// not "namespace/name", apps out of order or listed twice, a negative or absurd counter. The whole answer is rejected rather than the
// offending app alone, because a replica that sends one impossible number is not to be believed about
// the others.
func (c Counts) Validate() error {
	if c.Epoch == "" {
		return fmt.Errorf("%w: no epoch", ErrInvalidCounts)
	}
	if len(c.Apps) > MaxApps {
		return fmt.Errorf("%w: %d apps, more than %d", ErrInvalidCounts, len(c.Apps), MaxApps)
	}
	for i, a := range c.Apps {
		if err := CheckAppKey(a.Key); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidCounts, err)
		}
		// Sorted and unique, as the contract says: a second entry for an app would count its
		// request increase twice.
		if i > 0 && c.Apps[i-1].Key >= a.Key {
			return fmt.Errorf("%w: app %s listed after %s: apps must be sorted by key, each once", ErrInvalidCounts, a.Key, c.Apps[i-1].Key)
		}
		if a.InFlight < 0 || a.InFlight > MaxAppConcurrency || a.Held < 0 || a.Held > MaxAppConcurrency {
			return fmt.Errorf("%w: app %s: in flight %d, held %d, want 0 to %d",
				ErrInvalidCounts, a.Key, a.InFlight, a.Held, MaxAppConcurrency)
		}
		if a.Requests > MaxAppRequests {
			return fmt.Errorf("%w: app %s: requests %d, more than %d", ErrInvalidCounts, a.Key, a.Requests, uint64(MaxAppRequests))
		}
	}
	return nil
}

// Counts fetches the counts that changed on the replica at baseURL since sequence since, which must
// come from an earlier answer of the same replica with the given epoch. Pass since 0 (or an epoch the
// replica no longer has) to get a full snapshot; the answer's Full field says which one arrived.
// It blocks for one HTTP round trip, bounded by ctx.
func (c Client) Counts(ctx context.Context, baseURL string, since uint64, epoch string) (Counts, error) {
	q := url.Values{}
	q.Set("since", strconv.FormatUint(since, 10))
	q.Set("epoch", epoch)
	var out Counts
	if err := c.getJSON(ctx, baseURL+PathCounts+"?"+q.Encode(), &out); err != nil {
		return Counts{}, err
	}
	if err := out.Validate(); err != nil {
		return Counts{}, fmt.Errorf("counts from %s: %w", baseURL, err)
	}
	if !out.Full && (since == 0 || out.Epoch != epoch) {
		// A delta against a base we do not have would silently corrupt the caller's sums.
		return Counts{}, fmt.Errorf("counts from %s: delta answer for since=%d epoch %q, replica epoch %q",
			baseURL, since, epoch, out.Epoch)
	}
	return out, nil
}

// Wake subscribes to the replica's wake stream at baseURL and calls fn for every event, in order, on
// the calling goroutine. It blocks until ctx ends or the stream breaks and always returns a non-nil
// error: ctx's error when ctx ended, ErrStreamEnded when the replica closed the stream,
// ErrHeartbeatMissed when nothing arrived for WakeHeartbeatMisses intervals of the heartbeat the
// replica announced (HeaderWakeHeartbeat, at most c.MaxWakeHeartbeat; DefaultWakeHeartbeat before
// the response headers arrive), or the transport's error. Reconnecting, with backoff, is the
// caller's job.
//
// fn should return quickly; while it runs the heartbeat watchdog is paused, and the replica coalesces
// events for the same app behind a slow reader.
func (c Client) Wake(ctx context.Context, baseURL string, fn func(WakeEvent)) error {
	u := baseURL + PathWake
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadline := WakeHeartbeatMisses * DefaultWakeHeartbeat
	watchdog := time.AfterFunc(deadline, func() { cancel(ErrHeartbeatMissed) })
	defer watchdog.Stop()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("building request for %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/x-ndjson")
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return wakeErr(parent, ctx, u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("GET %s: status %d: %s", u, resp.StatusCode, body)
	}
	if hb, err := time.ParseDuration(resp.Header.Get(HeaderWakeHeartbeat)); err == nil && hb > 0 {
		limit := c.MaxWakeHeartbeat
		if limit <= 0 {
			limit = MaxWakeHeartbeat
		}
		deadline = WakeHeartbeatMisses * min(hb, limit)
	}
	watchdog.Reset(deadline)

	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 512), maxWakeLine)
	for sc.Scan() {
		watchdog.Stop()
		line := sc.Bytes()
		if len(line) > 0 {
			var ev WakeEvent
			if err := json.Unmarshal(line, &ev); err != nil {
				return fmt.Errorf("decoding wake event from %s: %w", u, err)
			}
			if ev.Key != "" { // an empty key is a heartbeat
				fn(ev)
			}
		}
		watchdog.Reset(deadline)
	}
	if err := sc.Err(); err != nil {
		return wakeErr(parent, ctx, u, err)
	}
	if ctx.Err() != nil {
		return wakeErr(parent, ctx, u, ctx.Err())
	}
	return fmt.Errorf("GET %s: %w", u, ErrStreamEnded)
}

// wakeErr attributes a failed read: the caller's context, the watchdog, or the transport.
func wakeErr(parent, ctx context.Context, u string, err error) error {
	if parent.Err() != nil {
		return fmt.Errorf("wake stream %s: %w", u, parent.Err())
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrHeartbeatMissed) {
		return fmt.Errorf("GET %s: %w", u, cause)
	}
	return fmt.Errorf("reading wake stream %s: %w", u, err)
}
