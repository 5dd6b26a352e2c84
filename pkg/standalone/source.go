package standalone

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/routing"
)

// DefaultInterval is how often a Source re-reads its file.
const DefaultInterval = time.Second

// Source serves the routing table and endpoints of one standalone file and reloads them when the
// file changes. A file that cannot be read or parsed never replaces the last good one: the error is
// logged (once per distinct error) and the last good table and endpoints stay in use.
//
// It is a controller-runtime Runnable. Table is one atomic load, safe for concurrent use, and meant
// for the request path (it implements the proxy's TableSource).
type Source struct {
	path     string
	interval time.Duration
	log      logr.Logger
	eps      *Endpoints

	table atomic.Pointer[routing.Table]
	err   atomic.Pointer[error] // the last reload's error; nil when it succeeded

	// mu serialises reloads and change callbacks with their registration.
	mu        sync.Mutex
	callbacks []func(*routing.Table)
	last      []byte // the file's content at the last reload attempt
	lastErr   error  // why last could not be parsed; nil when it is served
}

// NewSource reads and parses path and returns a Source serving it, or the error that names what to
// fix in the file. interval <= 0 means DefaultInterval.
func NewSource(path string, interval time.Duration, log logr.Logger) (*Source, error) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	s := &Source{path: path, interval: interval, log: log, eps: NewEndpoints()}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading standalone file: %w", err)
	}
	snap, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("standalone file %s: %w", path, err)
	}
	s.last = data
	s.publish(snap)
	return s, nil
}

// Table returns the routing table served. Cost: one atomic load.
func (s *Source) Table() *routing.Table { return s.table.Load() }

// Endpoints returns the endpoint source of the file's apps.
func (s *Source) Endpoints() *Endpoints { return s.eps }

// Err returns the error of the last reload, nil when it succeeded (the file is served as it is).
func (s *Source) Err() error {
	if p := s.err.Load(); p != nil {
		return *p
	}
	return nil
}

// OnChange registers fn to be called with every new table before it is served, and at once with the
// current one. Calls are serialised. fn must be quick and must not call OnChange.
func (s *Source) OnChange(fn func(*routing.Table)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.callbacks = append(s.callbacks, fn)
	fn(s.table.Load())
}

// NeedLeaderElection reports false.
func (s *Source) NeedLeaderElection() bool { return false }

// Start re-reads the file every interval until ctx ends; it returns nil then.
func (s *Source) Start(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Reload()
		}
	}
}

// Reload reads the file and serves it when it changed and is valid. It reports whether a new table
// or new endpoints are served.
func (s *Source) Reload() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := os.ReadFile(s.path)
	if err != nil {
		s.setErr(fmt.Errorf("reading standalone file: %w", err))
		return false
	}
	if bytes.Equal(data, s.last) {
		s.setErr(s.lastErr) // a read error is over; the content's own verdict stands
		return false
	}
	s.last = data
	snap, err := Parse(data)
	if err != nil {
		s.lastErr = fmt.Errorf("standalone file %s: %w", s.path, err)
		s.setErr(s.lastErr)
		return false
	}
	s.lastErr = nil
	s.setErr(nil)
	old := s.table.Load()
	s.publish(snap)
	s.log.Info("standalone file reloaded", "path", s.path, "version", snap.Table.Version(), "apps", snap.Table.Len(),
		"previousVersion", old.Version(), "servicesWithEndpoints", len(snap.Endpoints))
	return true
}

// publish serves snap: endpoints first, so that a new app's requests find them, then the callbacks,
// then the table. Callers hold mu (or own s exclusively).
func (s *Source) publish(snap *Snapshot) {
	s.eps.Set(snap.Endpoints)
	if old := s.table.Load(); old == nil || old.Version() != snap.Table.Version() {
		for _, fn := range s.callbacks {
			fn(snap.Table)
		}
		s.table.Store(snap.Table)
	}
}

// setErr records the outcome of a reload; a new error is logged once, a recovery at info level.
func (s *Source) setErr(err error) {
	prev := s.Err()
	if err == nil {
		s.err.Store(nil)
		if prev != nil {
			s.log.Info("standalone file readable again; serving it", "path", s.path, "version", s.table.Load().Version())
		}
		return
	}
	s.err.Store(&err)
	if prev != nil && prev.Error() == err.Error() {
		return
	}
	s.log.Error(err, "standalone file not loaded; keeping the last good table and endpoints",
		"path", s.path, "servedVersion", s.table.Load().Version())
}
