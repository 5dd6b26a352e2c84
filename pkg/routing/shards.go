package routing

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"io"
	"slices"
	"strconv"
	"strings"
)

// EncodeEntry validates and canonicalises e and returns the canonical entry and its stored form: the
// JSON line an Encoder takes. Invalid entries are an error wrapping ErrInvalidEntry. Safe for
// concurrent use.
func EncodeEntry(e Entry) (Entry, []byte, error) {
	c, err := e.canonical()
	if err != nil {
		return Entry{}, nil, err
	}
	line, err := json.Marshal(&c)
	if err != nil {
		return Entry{}, nil, fmt.Errorf("encoding routing entry %s: %w", c.Key(), err)
	}
	return c, line, nil
}

// EncodedSize returns the length of e's stored form (EncodeEntry's line); for an entry EncodeEntry
// rejects, the length of its JSON encoding as given. Not for the hot path.
func EncodedSize(e Entry) int {
	if _, line, err := EncodeEntry(e); err == nil {
		return len(line)
	}
	b, _ := json.Marshal(&e)
	return len(b)
}

// Encoder keeps a stored table's shards between versions, so that a change re-encodes only the
// buckets it touches (see the storage format). It is the writer's side of Reader.
//
// An Encoder is not safe for concurrent use.
type Encoder struct {
	maxBytes, maxEntries int
	buckets              int
	members              []map[string][]byte // per bucket: key → line
	shards               []*Shard            // per bucket; nil when empty
	dirty                map[int]struct{}
	zw                   *gzip.Writer
}

// NewEncoder returns an empty Encoder of one bucket that keeps shards within maxShardBytes
// compressed bytes and maxShardEntries entries.
func NewEncoder(maxShardBytes, maxShardEntries int) (*Encoder, error) {
	if maxShardBytes <= 0 || maxShardEntries <= 0 {
		return nil, fmt.Errorf("routing table encoder: shard limits %d bytes, %d entries must be positive", maxShardBytes, maxShardEntries)
	}
	return &Encoder{maxBytes: maxShardBytes, maxEntries: maxShardEntries, buckets: 1,
		members: []map[string][]byte{{}}, shards: []*Shard{nil}, dirty: map[int]struct{}{}}, nil
}

// Buckets returns the current number of buckets N.
func (e *Encoder) Buckets() int { return e.buckets }

// Len returns the number of entries.
func (e *Encoder) Len() int {
	n := 0
	for _, m := range e.members {
		n += len(m)
	}
	return n
}

// Grow raises the number of buckets to at least n (rounded up to a power of two, at most 65536); a
// writer that restarts calls it with the Buckets of the table in the cluster so that its first write
// does not reshuffle the shards. It never lowers N.
func (e *Encoder) Grow(n int) {
	for e.buckets < min(n, maxBuckets) {
		e.double()
	}
}

// Put sets key's line (from EncodeEntry); a nil line removes key. The bucket it lands in is re-encoded
// by the next Encode if its content changed.
func (e *Encoder) Put(key string, line []byte) {
	b := e.bucket(key)
	old, had := e.members[b][key]
	switch {
	case line == nil && !had:
		return
	case line == nil:
		delete(e.members[b], key)
	case had && bytes.Equal(old, line):
		return
	default:
		e.members[b][key] = line
	}
	e.dirty[b] = struct{}{}
}

// Dirty reports whether Encode would re-encode any bucket.
func (e *Encoder) Dirty() bool { return len(e.dirty) > 0 }

func (e *Encoder) bucket(key string) int { return int(keyHash(key) & uint64(e.buckets-1)) }

func (e *Encoder) double() {
	e.buckets *= 2
	members := make([]map[string][]byte, e.buckets)
	for i := range members {
		members[i] = map[string][]byte{}
	}
	for _, m := range e.members {
		for k, l := range m {
			members[keyHash(k)&uint64(e.buckets-1)][k] = l
		}
	}
	e.members = members
	e.shards = make([]*Shard, e.buckets)
	for b := range e.buckets {
		e.dirty[b] = struct{}{}
	}
}

// Encode re-encodes the buckets changed since the last Encode and returns the manifest and every
// shard of the table, the unchanged ones as returned before (equal names and SHA-256: a writer need not
// write them again). A bucket over either limit doubles N first, which re-encodes every bucket. An
// entry that alone exceeds the byte limit is an error wrapping ErrEntryTooLarge; the Encoder then
// keeps its entries and returns the same error until that entry is removed.
func (e *Encoder) Encode() (Manifest, []Shard, error) {
	for len(e.dirty) > 0 {
		grow := false
		for _, b := range sortedBuckets(e.dirty) {
			members := e.members[b]
			if len(members) == 0 {
				e.shards[b] = nil
				delete(e.dirty, b)
				continue
			}
			if len(members) > e.maxEntries {
				grow = true
				break
			}
			keys := make([]string, 0, len(members))
			for k := range members {
				keys = append(keys, k)
			}
			slices.SortFunc(keys, compareKeyStrings)
			lines := make([][]byte, len(keys))
			for i, k := range keys {
				lines[i] = members[k]
			}
			data, ok, err := e.compress(lines)
			if err != nil {
				return Manifest{}, nil, fmt.Errorf("encoding routing-table shard %d: %w", b, err)
			}
			if !ok {
				if len(keys) == 1 {
					return Manifest{}, nil, fmt.Errorf("encoding routing table: %w: %s needs more than %d bytes", ErrEntryTooLarge, keys[0], e.maxBytes)
				}
				grow = true
				break
			}
			sum := sha256.Sum256(data)
			e.shards[b] = &Shard{Name: strconv.Itoa(b), Data: data, SHA256: hex.EncodeToString(sum[:]), Entries: len(keys)}
			delete(e.dirty, b)
		}
		if grow {
			if e.buckets >= maxBuckets {
				return Manifest{}, nil, fmt.Errorf("encoding routing table: does not fit %d shards of %d bytes", maxBuckets, e.maxBytes)
			}
			e.double()
		}
	}
	m := Manifest{Format: manifestFormat, Buckets: e.buckets, Shards: []ShardRef{}}
	var shards []Shard
	for _, s := range e.shards {
		if s == nil {
			continue
		}
		shards = append(shards, *s)
		m.Shards = append(m.Shards, ShardRef{Name: s.Name, SHA256: s.SHA256, Entries: s.Entries})
		m.Entries += s.Entries
	}
	m.Version = manifestVersion(m.Buckets, m.Shards)
	return m, shards, nil
}

func sortedBuckets(set map[int]struct{}) []int {
	out := make([]int, 0, len(set))
	for b := range set {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}

// compareKeyStrings orders "namespace/name" keys as compareKeys orders entries: namespaces hold no
// "/", so comparing namespaces first equals comparing the namespace parts.
func compareKeyStrings(a, b string) int {
	an, ar, _ := strings.Cut(a, "/")
	bn, br, _ := strings.Cut(b, "/")
	if c := strings.Compare(an, bn); c != 0 {
		return c
	}
	return strings.Compare(ar, br)
}

// manifestVersion is the version of a format-2 table: the first 16 hex characters of the SHA-256 of
// the bucket count and every shard's name, SHA-256 and entry count. The shards' SHA-256 cover their
// entries, so equal versions mean equal tables; equal tables encoded by the same build get equal
// versions.
func manifestVersion(buckets int, refs []ShardRef) string {
	h := sha256.New()
	io.WriteString(h, versionDomainV2)
	io.WriteString(h, strconv.Itoa(buckets)+"\n")
	for _, r := range refs {
		io.WriteString(h, r.Name+" "+r.SHA256+" "+strconv.Itoa(r.Entries)+"\n")
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Reader decodes the successive versions of one stored table, decoding only the shards it has not
// decoded before and deriving each Table from the previous one (see Table.withChanges): a version that
// changed one shard costs that shard's decoding and the few hosts it touches, not a whole-table
// rebuild. Format-1 tables are decoded in full.
//
// A failed read leaves the Reader as it was. A Reader is not safe for concurrent use; the Tables it
// returns are.
type Reader struct {
	table   *Table
	buckets int // of table, 0 when it was not read from format 2
	shards  map[string]readShard
}

type readShard struct {
	sha     string
	entries []*Entry
	// sums are the hashes of entries' stored lines (lineSum): a shard decoded again keeps the
	// *Entry of every line that did not change, so that a version's Diff is the entries that did.
	sums []uint64
}

// lineSeed keys lineSum; it is random per process, so stored lines cannot be made to collide.
var lineSeed = maphash.MakeSeed()

func lineSum(line []byte) uint64 { return maphash.Bytes(lineSeed, line) }

// Decode returns the table m describes, taking changed shards from shards (shard name → Data); see
// Reader.Read.
func (r *Reader) Decode(m Manifest, shards map[string][]byte) (*Table, error) {
	return r.Read(m, func(name string) ([]byte, bool, error) {
		d, ok := shards[name]
		return d, ok, nil
	})
}

// Read returns the table m describes. get returns a shard's data by name (false when it is missing,
// ErrIncomplete); it is called only for shards whose SHA-256 differs from those of the table last
// returned. Errors are as for Decode.
func (r *Reader) Read(m Manifest, get func(name string) ([]byte, bool, error)) (*Table, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	if m.Format == manifestFormatV1 {
		t, err := decodeV1(m, get)
		if err != nil {
			return nil, err
		}
		r.table, r.buckets, r.shards = t, 0, nil
		return t, nil
	}
	if r.table != nil && r.buckets == m.Buckets && r.table.version == m.Version {
		return r.table, nil
	}
	reuse := r.table != nil && r.buckets == m.Buckets
	next := make(map[string]readShard, len(m.Shards))
	var added, removed []*Entry
	for _, ref := range m.Shards {
		old, had := r.shards[ref.Name]
		had = had && reuse
		if had && old.sha == ref.SHA256 {
			next[ref.Name] = old
			continue
		}
		data, ok, err := get(ref.Name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: table %s: shard %s is missing", ErrIncomplete, m.Version, ref.Name)
		}
		var prev *readShard
		if had {
			prev = &old
		}
		rs, err := decodeShardV2(ref, data, m.Buckets, prev)
		if err != nil {
			return nil, fmt.Errorf("%w: table %s: shard %s: %w", ErrCorrupt, m.Version, ref.Name, err)
		}
		next[ref.Name] = rs
		if !had {
			added = append(added, rs.entries...)
			continue
		}
		kept := make(map[*Entry]struct{}, len(rs.entries))
		for _, e := range rs.entries {
			kept[e] = struct{}{}
		}
		for _, e := range old.entries {
			if _, ok := kept[e]; !ok {
				removed = append(removed, e)
			} else {
				delete(kept, e)
			}
		}
		for _, e := range rs.entries {
			if _, fresh := kept[e]; fresh {
				added = append(added, e)
			}
		}
	}
	if reuse {
		for name, old := range r.shards {
			if _, ok := next[name]; !ok {
				removed = append(removed, old.entries...)
			}
		}
	}
	slices.SortFunc(added, compareKeys)
	slices.SortFunc(removed, compareKeys)
	var t *Table
	if reuse && 4*(len(added)+len(removed)) < r.table.Len() {
		t = r.table.withChanges(m.Version, removed, added)
	} else {
		all := make([]*Entry, 0, m.Entries)
		for _, ref := range m.Shards {
			all = append(all, next[ref.Name].entries...)
		}
		slices.SortFunc(all, compareKeys)
		t = buildTable(m.Version, all)
	}
	r.table, r.buckets, r.shards = t, m.Buckets, next
	return t, nil
}

// decodeShardV2 verifies and decodes one format-2 shard: its SHA-256 and count, every entry valid,
// in its bucket, keys strictly ascending. A line equal to one of prev (the same shard as read
// before, nil when none) is not decoded again: its *Entry is reused.
func decodeShardV2(ref ShardRef, data []byte, buckets int, prev *readShard) (readShard, error) {
	lines, err := shardLines(ref, data)
	if err != nil {
		return readShard{}, err
	}
	var known map[uint64]*Entry
	if prev != nil {
		known = make(map[uint64]*Entry, len(prev.entries))
		for i, e := range prev.entries {
			known[prev.sums[i]] = e
		}
	}
	bucket, _ := strconv.Atoi(ref.Name) // validated
	rs := readShard{sha: ref.SHA256, entries: make([]*Entry, len(lines)), sums: make([]uint64, len(lines))}
	for i, line := range lines {
		sum := lineSum(line)
		e := known[sum]
		if e == nil {
			var raw Entry
			if err := json.Unmarshal(line, &raw); err != nil {
				return readShard{}, fmt.Errorf("line %d: %w", i+1, err)
			}
			c, err := raw.canonical()
			if err != nil {
				return readShard{}, err
			}
			if b := int(keyHash(c.Key()) & uint64(buckets-1)); b != bucket {
				return readShard{}, fmt.Errorf("%s belongs in bucket %d", c.Key(), b)
			}
			// One allocation per entry: entries decoded together must not share an array, or
			// the one entry of a shard still in use keeps every replaced one alive with it.
			e = &c
		}
		if i > 0 && compareKeys(rs.entries[i-1], e) >= 0 {
			return readShard{}, fmt.Errorf("%s is out of order or repeated", e.Key())
		}
		rs.entries[i], rs.sums[i] = e, sum
	}
	return rs, nil
}

// Table returns the table last returned by Read, or nil.
func (r *Reader) Table() *Table { return r.table }
