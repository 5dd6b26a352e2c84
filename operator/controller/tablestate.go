package controller

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/httpscale/httpscale/pkg/routing"
)

// candidate is one valid object's bid for the routing table.
type candidate struct {
	entry   routing.Entry // canonical once prepared
	created time.Time
	uid     types.UID // of the object, to tell a stale decision from a recreated object
	line    []byte    // the stored form of entry (routing.EncodeEntry)
	routes  []string  // routing.RouteKeys of entry
	// serve asks for a Serve port (serveports.go); out is the line published with port outPort.
	serve   bool
	out     []byte
	outPort int32
}

// prepare canonicalises c's entry and computes its stored form and route keys; an entry whose stored
// form exceeds maxLine bytes is an error wrapping routing.ErrEntryTooLarge. It is called outside the
// writer's lock, by the goroutine that decided the candidate.
func (c *candidate) prepare(maxLine int) error {
	canon, line, err := routing.EncodeEntry(c.entry)
	if err != nil {
		return err
	}
	if len(line) > maxLine {
		return fmt.Errorf("%w: %s is %d bytes, over the per-object budget of %d", routing.ErrEntryTooLarge, canon.Key(), len(line), maxLine)
	}
	c.entry, c.line, c.routes = canon, line, routing.RouteKeys(&canon)
	return nil
}

// maxEntryBytes is the writer's per-entry budget.
func (w *TableWriter) maxEntryBytes() int {
	if w.MaxEntryBytes > 0 {
		return min(w.MaxEntryBytes, routing.MaxEntryBytesLimit)
	}
	return routing.DefaultMaxEntryBytes
}

func sameCandidate(a, b *candidate) bool {
	return a.created.Equal(b.created) && a.serve == b.serve && bytes.Equal(a.line, b.line)
}

// published returns c's stored form with port as its Serve port.
func (c *candidate) published(port int32) []byte {
	if port == c.entry.ServePort {
		return c.line
	}
	if c.out == nil || c.outPort != port {
		e := c.entry.Clone()
		e.ServePort = port
		_, line, err := routing.EncodeEntry(e)
		if err != nil {
			return c.line // the port is in range and the rest was valid: cannot happen
		}
		c.out, c.outPort = line, port
	}
	return c.out
}

// before is the precedence of contested routes: the oldest object wins, then namespace/name.
func before(a, b *candidate) int {
	if c := a.created.Compare(b.created); c != 0 {
		return c
	}
	return cmp.Compare(a.entry.Key(), b.entry.Key())
}

// tableState decides the routing table one change at a time. It keeps every candidate, an index of
// the routes they claim, the losers of contested routes and the encoded shards (routing.Encoder), so
// that a change costs work in proportion to the entries it can affect — the candidates sharing a
// route with it, transitively — and the one shard it lands in, not the whole table.
//
// Not safe for concurrent use; the TableWriter guards it with its mutex.
type tableState struct {
	desired   map[string]*candidate
	routes    map[string][]string // route key → keys of the candidates claiming it
	losers    map[string]routing.Conflict
	published map[string]int64 // key → generation of the entry in the encoder
	dirty     map[string]struct{}
	enc       *routing.Encoder
	ports     *portAllocator // Serve ports of the published candidates that ask for one
	// portless holds the published candidates that ask for a Serve port and got none (the range
	// was exhausted): they get one as soon as one is free.
	portless map[string]struct{}
}

func newTableState(maxShardBytes, maxShardEntries int) (*tableState, error) {
	enc, err := routing.NewEncoder(maxShardBytes, maxShardEntries)
	if err != nil {
		return nil, err
	}
	return &tableState{desired: map[string]*candidate{}, routes: map[string][]string{}, losers: map[string]routing.Conflict{},
		published: map[string]int64{}, dirty: map[string]struct{}{}, enc: enc, ports: newPortAllocator(0, 0)}, nil
}

// set records key's prepared candidate, or its absence (nil). It reports whether anything changed.
func (s *tableState) set(key string, c *candidate) bool {
	old := s.desired[key]
	switch {
	case old == nil && c == nil:
		return false
	case old != nil && c != nil && sameCandidate(old, c):
		return false
	}
	if old != nil {
		for _, rk := range old.routes {
			keys := slices.DeleteFunc(s.routes[rk], func(k string) bool { return k == key })
			if len(keys) == 0 {
				delete(s.routes, rk)
			} else {
				s.routes[rk] = keys
			}
			s.markAll(keys) // they may win what key held
		}
		delete(s.desired, key)
	}
	if c != nil {
		for _, rk := range c.routes {
			s.markAll(s.routes[rk])
			s.routes[rk] = append(s.routes[rk], key)
		}
		if c.entry.ServePort > 0 {
			// Only a stored table's entry comes with a port (the routing controller never sets one):
			// the app keeps it until it is decided again.
			c.serve = true
			s.ports.hint(key, c.entry.ServePort)
		}
		s.desired[key] = c
	}
	s.dirty[key] = struct{}{}
	return true
}

func (s *tableState) markAll(keys []string) {
	for _, k := range keys {
		s.dirty[k] = struct{}{}
	}
}

// decide settles every key marked since the last call: it re-runs the conflict decision over the
// candidates connected to them by shared routes (which is where a change can move a win or a loss)
// and puts the winners' lines into the encoder and takes everything else out. It returns the keys
// whose published entry or conflict may have changed.
func (s *tableState) decide() []string {
	if len(s.dirty) == 0 {
		return nil
	}
	// The connected candidates: a loss depends only on candidates reachable over shared routes.
	seen := map[string]struct{}{}
	queue := make([]string, 0, len(s.dirty))
	for k := range s.dirty {
		seen[k] = struct{}{}
		queue = append(queue, k)
	}
	clear(s.dirty)
	for i := 0; i < len(queue); i++ {
		c := s.desired[queue[i]]
		if c == nil {
			continue
		}
		for _, rk := range c.routes {
			for _, k := range s.routes[rk] {
				if _, ok := seen[k]; !ok {
					seen[k] = struct{}{}
					queue = append(queue, k)
				}
			}
		}
	}
	var group []*candidate
	for _, k := range queue {
		delete(s.losers, k)
		if c := s.desired[k]; c != nil {
			group = append(group, c)
		}
	}
	if len(group) > 1 {
		slices.SortFunc(group, before)
		entries := make([]routing.Entry, len(group))
		for i, c := range group {
			entries[i] = c.entry
		}
		for _, cf := range routing.Conflicts(entries) {
			s.losers[cf.Loser] = cf
		}
	}
	for _, k := range queue {
		c := s.desired[k]
		delete(s.portless, k)
		if _, lost := s.losers[k]; c == nil || lost {
			s.enc.Put(k, nil)
			delete(s.published, k)
			s.ports.release(k) // no redirect while the app does not own its routes
			continue
		}
		s.publish(k, c)
	}
	// Ports freed by this decision go to the apps that waited for one.
	for k := range s.portless {
		if c := s.desired[k]; c != nil && s.ports.free() {
			delete(s.portless, k)
			s.publish(k, c)
			queue = append(queue, k)
		}
	}
	slices.Sort(queue)
	return slices.Compact(queue)
}

// publish puts candidate c of key into the encoder, with its Serve port when it asks for one.
func (s *tableState) publish(k string, c *candidate) {
	var port int32
	if c.serve {
		if port = s.ports.assign(k); port == 0 {
			if s.portless == nil {
				s.portless = map[string]struct{}{}
			}
			s.portless[k] = struct{}{}
		}
	} else {
		s.ports.release(k)
	}
	s.enc.Put(k, c.published(port))
	s.published[k] = c.entry.Generation
}
