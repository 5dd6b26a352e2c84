// Package pmap is an immutable map that a new version can be derived from at a cost proportional to
// the change, not to the map's size: the keys are spread over a fixed number of parts by a hash, and
// a derived map shares every part it did not change with the map it came from.
//
// It serves the interceptor's per-table-version state (routing indexes, per-app state, counters,
// tracked Services), where one changed app among tens of thousands must not copy every app's entry,
// while requests read the same state without locks.
//
// Why not a persistent-map library (a hash array mapped trie such as github.com/benbjohnson/immutable):
// a trie lookup walks several levels of nodes, and this map's reads sit on every request's route
// lookup. Here a read is one hash and one built-in map lookup, and the cost of a change (copying one
// part of about n/256 keys) is what the per-version path can afford; see BenchmarkTableChanged.
package pmap

import (
	"hash/maphash"
	"iter"
	"maps"
	"unsafe"
)

// parts is the fan-out. A change copies the 2 KiB part array and the parts it touches; with 50,000
// keys a part holds about 200.
const parts = 256

var seed = maphash.MakeSeed()

// String hashes a string key.
func String(s string) uint64 { return maphash.String(seed, s) }

// Pointer hashes a pointer key by its address (Go does not move heap objects).
func Pointer[T any](p *T) uint64 {
	return uint64(uintptr(unsafe.Pointer(p))>>3) * 0x9e3779b97f4a7c15
}

// Map is an immutable map from K to V. The zero Map is empty and needs its hash set by New before
// use. A Map is safe for concurrent reads; derive changed versions with Edit.
type Map[K comparable, V any] struct {
	hash func(K) uint64
	n    int
	p    *[parts]map[K]V // nil parts are empty
}

// New returns an empty Map whose keys are spread by hash.
func New[K comparable, V any](hash func(K) uint64) Map[K, V] {
	return Map[K, V]{hash: hash}
}

func (m Map[K, V]) part(k K) int { return int(m.hash(k) >> 56) }

// Get returns k's value. Cost: one hash and one map lookup; no allocation.
func (m Map[K, V]) Get(k K) (V, bool) {
	if m.p == nil {
		var zero V
		return zero, false
	}
	v, ok := m.p[m.part(k)][k]
	return v, ok
}

// Len returns the number of keys.
func (m Map[K, V]) Len() int { return m.n }

// All yields every key and value in no particular order.
func (m Map[K, V]) All() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if m.p == nil {
			return
		}
		for _, part := range m.p {
			for k, v := range part {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// Edit returns a Builder that derives a new Map from m; m itself never changes.
func (m Map[K, V]) Edit() *Builder[K, V] { return m.EditSized(0) }

// EditSized is Edit for a Builder that will hold about n keys: an empty part it creates is sized
// for its share of them, so a Map built in one pass holds no spare room and leaves no garbage of
// outgrown parts.
func (m Map[K, V]) EditSized(n int) *Builder[K, V] {
	b := &Builder[K, V]{m: Map[K, V]{hash: m.hash, n: m.n, p: new([parts]map[K]V)}}
	if n > 0 {
		// No slack: a map's table is a power of two in size, and room for a quarter more than the
		// average part would double most parts' tables at some sizes (measured: +12 MiB at 50,000).
		b.hint = n/parts + 1
	}
	if m.p != nil {
		*b.m.p = *m.p
	}
	return b
}

// Builder collects changes to a Map. Each part is copied on its first change; the others stay
// shared with the Map it was made from. Not safe for concurrent use.
type Builder[K comparable, V any] struct {
	m     Map[K, V]
	owned [parts / 64]uint64
	done  bool
	hint  int // size of a new part, 0: the map's default
}

func (b *Builder[K, V]) own(i int) map[K]V {
	if b.done {
		panic("pmap: Builder used after Map")
	}
	if b.owned[i/64]&(1<<(i%64)) == 0 {
		next := maps.Clone(b.m.p[i]) // copies the table's groups without hashing every key again
		if next == nil {
			next = make(map[K]V, b.hint)
		}
		b.m.p[i] = next
		b.owned[i/64] |= 1 << (i % 64)
	}
	return b.m.p[i]
}

// Get returns k's value as changed so far.
func (b *Builder[K, V]) Get(k K) (V, bool) { return b.m.Get(k) }

// Set sets k to v.
func (b *Builder[K, V]) Set(k K, v V) {
	part := b.own(b.m.part(k))
	if _, ok := part[k]; !ok {
		b.m.n++
	}
	part[k] = v
}

// Delete removes k.
func (b *Builder[K, V]) Delete(k K) {
	i := b.m.part(k)
	if _, ok := b.m.p[i][k]; !ok {
		return
	}
	delete(b.own(i), k)
	b.m.n--
}

// Len returns the number of keys so far.
func (b *Builder[K, V]) Len() int { return b.m.n }

// Map returns the new Map. The Builder must not be used afterwards.
func (b *Builder[K, V]) Map() Map[K, V] {
	b.done = true
	return b.m
}

// From returns a Map holding the n keys and values of src (built in one pass, no sharing).
func From[K comparable, V any](hash func(K) uint64, n int, src iter.Seq2[K, V]) Map[K, V] {
	b := New[K, V](hash).EditSized(n)
	for k, v := range src {
		b.Set(k, v)
	}
	return b.Map()
}
