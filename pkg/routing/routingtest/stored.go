// Package routingtest helps tests and benchmarks follow a routing table the way an interceptor does.
package routingtest

import "github.com/httpscale/httpscale/pkg/routing"

// Stored is a routing table as the operator stores it and an interceptor reads it: entries go into
// a routing.Encoder, and each version is decoded by one routing.Reader, so every table is derived
// from the one before (routing.Table.Diff) as in the interceptor's table watch.
type Stored struct {
	enc *routing.Encoder
	r   routing.Reader
}

// New returns an empty Stored table whose shards hold at most maxShardEntries entries (small values
// spread a few entries over many shards).
func New(maxShardEntries int) (*Stored, error) {
	enc, err := routing.NewEncoder(routing.DefaultMaxShardBytes, maxShardEntries)
	if err != nil {
		return nil, err
	}
	return &Stored{enc: enc}, nil
}

// Put adds or replaces e.
func (s *Stored) Put(e routing.Entry) error {
	_, line, err := routing.EncodeEntry(e)
	if err != nil {
		return err
	}
	s.enc.Put(e.Key(), line)
	return nil
}

// Grow spreads the entries over at least n buckets (see routing.Encoder.Grow).
func (s *Stored) Grow(n int) { s.enc.Grow(n) }

// Remove removes the entry with key "namespace/name".
func (s *Stored) Remove(key string) { s.enc.Put(key, nil) }

// Encode is the writer's side of a new version: the manifest and every shard's data by name.
func (s *Stored) Encode() (routing.Manifest, map[string][]byte, error) {
	m, shards, err := s.enc.Encode()
	if err != nil {
		return routing.Manifest{}, nil, err
	}
	data := make(map[string][]byte, len(shards))
	for _, sh := range shards {
		data[sh.Name] = sh.Data
	}
	return m, data, nil
}

// Decode is the reader's side: the table of a version Encode returned.
func (s *Stored) Decode(m routing.Manifest, data map[string][]byte) (*routing.Table, error) {
	return s.r.Decode(m, data)
}

// Next encodes the changes since the last version and returns the table the reader derives.
func (s *Stored) Next() (*routing.Table, error) {
	m, data, err := s.Encode()
	if err != nil {
		return nil, err
	}
	return s.Decode(m, data)
}
