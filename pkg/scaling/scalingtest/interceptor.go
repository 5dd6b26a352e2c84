// Package scalingtest provides a fake interceptor replica for the scaler's tests: real pkg/admin
// handlers, on a loopback listener or reached in memory, fed by counters the test controls, that can
// hang or restart.
package scalingtest

import (
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
)

// Interceptor is one fake replica. Its methods are safe for concurrent use.
type Interceptor struct {
	// Server serves the admin handler on 127.0.0.1 (nil for a replica made by New).
	Server *httptest.Server

	counts  *Counts
	wake    *Wakes
	hang    atomic.Pointer[chan struct{}]
	handler http.Handler
}

// Options shape the fake replica's admin handler.
type Options struct {
	// WakeHeartbeat is the wake stream heartbeat; zero means admin.DefaultWakeHeartbeat.
	WakeHeartbeat time.Duration
}

// Start serves a fake replica until the returned Interceptor is closed.
func Start(opts Options) *Interceptor {
	ic := New(opts)
	ic.Server = httptest.NewServer(ic.handler)
	return ic
}

// New returns a fake replica that is not served: its Handler is, by whoever the test chooses (an
// in-memory transport, so that the scaler's tests can run in a synctest bubble). Server is nil.
func New(opts Options) *Interceptor {
	ic := &Interceptor{counts: NewCounts(), wake: NewWakes()}
	h := admin.NewHandler(admin.HandlerOptions{
		Counts: ic.counts, Wake: ic.wake, WakeHeartbeat: opts.WakeHeartbeat,
		Status: func() admin.Status { return admin.Status{} },
	})
	ic.handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == admin.PathCounts {
			if ch := ic.hang.Load(); ch != nil {
				select { // a hung replica: accept the connection, never answer
				case <-*ch:
				case <-r.Context().Done():
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
	return ic
}

// Handler is the replica's admin handler, with Hang applied.
func (ic *Interceptor) Handler() http.Handler { return ic.handler }

// URL is the admin base URL.
func (ic *Interceptor) URL() string { return ic.Server.URL }

// Port is the listener's port.
func (ic *Interceptor) Port() int {
	_, p, _ := net.SplitHostPort(ic.Server.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return n
}

// Counts are the replica's counters.
func (ic *Interceptor) Counts() *Counts { return ic.counts }

// Wake publishes a wake notice for app on every open wake stream.
func (ic *Interceptor) Wake(app string) { ic.WakeAt(app, time.Now()) }

// WakeAt publishes a wake notice for app stamped at, as one the replica raised at that moment.
func (ic *Interceptor) WakeAt(app string, at time.Time) {
	ic.wake.Publish(admin.WakeEvent{Key: app, At: at})
}

// WakeStreams counts the open wake streams.
func (ic *Interceptor) WakeStreams() int { return ic.wake.Len() }

// DropWakeStreams ends every open wake stream, as a broken connection would.
func (ic *Interceptor) DropWakeStreams() { ic.wake.CloseAll() }

// Hang makes /counts block until Unhang.
func (ic *Interceptor) Hang() {
	ch := make(chan struct{})
	ic.hang.Store(&ch)
}

// Unhang releases Hang.
func (ic *Interceptor) Unhang() {
	if ch := ic.hang.Swap(nil); ch != nil {
		close(*ch)
	}
}

// Restart gives the replica a new epoch with every counter at zero, as a restarted process has.
func (ic *Interceptor) Restart() { ic.counts.Restart() }

// Close ends the wake streams and stops the server.
func (ic *Interceptor) Close() {
	ic.Unhang()
	ic.wake.CloseAll()
	if ic.Server != nil {
		ic.Server.CloseClientConnections()
		ic.Server.Close()
	}
}

var epochs atomic.Uint64

// Counts is an admin.CountsSource with settable counters and real delta semantics.
type Counts struct {
	mu      sync.Mutex
	epoch   string
	seq     uint64
	apps    map[string]admin.AppCount
	changed map[string]uint64 // app -> seq of its last change
	removed uint64            // seq of the last removal: older cursors get a full snapshot
}

// NewCounts returns empty counters with a fresh epoch.
func NewCounts() *Counts {
	c := &Counts{}
	c.Restart()
	return c
}

// Restart starts a new epoch with no apps.
func (c *Counts) Restart() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch = "epoch-" + strconv.FormatUint(epochs.Add(1), 10)
	c.seq = 1
	c.apps = map[string]admin.AppCount{}
	c.changed = map[string]uint64{}
	c.removed = 0
}

// Set sets an app's in-flight and held gauges.
func (c *Counts) Set(app string, inFlight, held int64) {
	c.update(app, func(a *admin.AppCount) { a.InFlight, a.Held = inFlight, held })
}

// AddRequests adds n to the app's request counter.
func (c *Counts) AddRequests(app string, n uint64) {
	c.update(app, func(a *admin.AppCount) { a.Requests += n })
}

// Remove forgets the app, as when it leaves the routing table.
func (c *Counts) Remove(app string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.apps, app)
	delete(c.changed, app)
	c.seq++
	c.removed = c.seq
}

func (c *Counts) update(app string, f func(*admin.AppCount)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.apps[app]
	a.Key = app
	f(&a)
	c.seq++
	c.apps[app] = a
	c.changed[app] = c.seq
}

// Epoch implements admin.CountsSource.
func (c *Counts) Epoch() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.epoch
}

// CountsSince implements admin.CountsSource: a full snapshot for since 0 or a removal after since,
// otherwise the apps changed after since plus every app with requests in flight or held.
func (c *Counts) CountsSince(since uint64) admin.Counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := admin.Counts{Epoch: c.epoch, Seq: c.seq, Full: since == 0 || since < c.removed}
	for k, a := range c.apps {
		if out.Full || c.changed[k] > since || a.Concurrency() > 0 {
			out.Apps = append(out.Apps, a)
		}
	}
	slices.SortFunc(out.Apps, func(a, b admin.AppCount) int { return strings.Compare(a.Key, b.Key) })
	return out
}
