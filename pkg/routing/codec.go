package routing

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
)

// Storage format (manifest format 2).
//
// A table is stored as shards of gzip-compressed JSON lines, one canonical Entry per line, sorted by
// key within each shard, plus a Manifest naming every shard with its SHA-256 and entry count.
//
// Sharding: an entry goes to bucket FNV-64a(key) mod N. N is a power of two that only grows: the
// writer doubles it when a bucket would hold more than its entry limit (DefaultMaxShardEntries) or
// compress to more than its byte limit, and keeps it otherwise, also across restarts (it reads N back
// from the manifest). An entry's bucket therefore depends only on its key and N: adding, changing or
// removing one entry re-encodes and rewrites one shard, and every shard changes only when N doubles.
// Empty buckets produce no shard; a shard's name is its bucket number in decimal.
//
// The table's version is derived from the manifest alone (N and every shard's name, SHA-256 and
// count, see manifestVersion), so a reader verifies it without hashing entries, and decodes only the
// shards whose SHA-256 it has not decoded before (see Reader).
//
// Format 1, written by earlier operators, had a version hashed over every entry and an N recomputed
// for every table; readers still decode it (in full). Readers that know only format 1 reject format 2
// with ErrCorrupt and keep the table they serve.
const (
	// DefaultMaxShardBytes keeps a shard's compressed data, ConfigMap metadata and the apiserver's
	// 1 MiB object limit apart with room to spare.
	DefaultMaxShardBytes = 900 << 10
	// DefaultMaxShardEntries bounds the entries of one shard, so that the shard a change rewrites, and
	// every reader decodes, stays small: about a millisecond of decoding.
	DefaultMaxShardEntries = 128
	// DefaultMaxEntryBytes is the per-object budget of an entry's stored form (EncodeEntry's line)
	// the operator enforces, and MaxEntryBytesLimit the most it may be set to: an entry of that size
	// fits a shard of DefaultMaxShardBytes four times over (gzip never grows data by more than a
	// few bytes per 32 KiB), so one object can neither fail a shard's encoding (ErrEntryTooLarge,
	// which would stop every table write) nor force the table into many more shards than its share.
	DefaultMaxEntryBytes = 128 << 10
	MaxEntryBytesLimit   = DefaultMaxShardBytes / 4

	manifestFormat   = 2
	manifestFormatV1 = 1
	// maxBuckets bounds the doubling; 65536 shards of even 1 KiB would be a table no cluster has.
	maxBuckets = 1 << 16
	// maxShardDecodedBytes bounds a shard's decompressed size, so a corrupt or hostile shard cannot
	// make Decode allocate without limit. Encode refuses to produce larger shards.
	maxShardDecodedBytes = 64 << 20
	// versionDomainV2 starts the hashed manifest of format 2.
	versionDomainV2 = "httpscale.dev/routing-table/v2\n"
)

var (
	// ErrIncomplete means a shard the manifest names is missing. The reader should keep its last good
	// table and retry; it usually means the writer is mid-update or a cache lags behind.
	ErrIncomplete = errors.New("routing table incomplete")
	// ErrCorrupt means the stored table is inconsistent: a hash, count or version does not match, data
	// does not decode, or an entry is invalid. The reader should keep its last good table.
	ErrCorrupt = errors.New("routing table corrupt")
	// ErrEntryTooLarge means one entry alone does not fit in a shard.
	ErrEntryTooLarge = errors.New("routing entry too large for a shard")
)

// Manifest describes a stored table. It is small and JSON-encodable (the head ConfigMap holds it).
type Manifest struct {
	// Format is the storage format version; Decode rejects any other than its own.
	Format int `json:"format"`
	// Version is the table's Version: in format 2, manifestVersion of the other fields.
	Version string `json:"version"`
	// Entries is the total number of entries over all shards.
	Entries int `json:"entries"`
	// Buckets is the number N of hash buckets; shards exist for non-empty buckets.
	Buckets int `json:"buckets"`
	// Shards lists every shard, in bucket order.
	Shards []ShardRef `json:"shards"`
}

// ShardRef names one shard in a Manifest.
type ShardRef struct {
	Name    string `json:"name"`
	SHA256  string `json:"sha256"` // lowercase hex of the shard's Data
	Entries int    `json:"entries"`
}

// Shard is one stored piece of a table.
type Shard struct {
	// Name is the bucket number in decimal ("0", "1", ...).
	Name string
	// Data is gzip-compressed JSON lines.
	Data    []byte
	SHA256  string
	Entries int
}

// Encode stores t in the current format (see the storage format above) with shards of at most
// maxShardBytes compressed bytes and DefaultMaxShardEntries entries, starting from one bucket, and
// returns the manifest describing them. The manifest's Version, not t's, is the version of the stored
// table (Decode returns a table carrying it). Encoding is deterministic: equal tables yield equal
// bytes with the same Go version. An entry that alone exceeds maxShardBytes is an error wrapping
// ErrEntryTooLarge. Cost: one JSON encoding and about one gzip pass over the table; not for the hot
// path. A writer that changes a table one entry at a time uses an Encoder instead. Safe for
// concurrent use.
func Encode(t *Table, maxShardBytes int) (Manifest, []Shard, error) {
	if t == nil {
		return Manifest{}, nil, errors.New("encoding routing table: nil table")
	}
	enc, err := NewEncoder(maxShardBytes, DefaultMaxShardEntries)
	if err != nil {
		return Manifest{}, nil, err
	}
	for _, e := range t.entries() {
		line, err := json.Marshal(e)
		if err != nil {
			return Manifest{}, nil, fmt.Errorf("encoding routing entry %s: %w", e.Key(), err)
		}
		enc.Put(e.Key(), line)
	}
	return enc.Encode()
}

// keyHash is FNV-1a (64 bit) of an entry key; it assigns the entry's bucket and must never change
// within a manifest format.
func keyHash(key string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return h
}

// compress gzips lines, giving up (ok=false) as soon as the output or the decompressed size exceeds
// its limit.
func (e *Encoder) compress(lines [][]byte) (data []byte, ok bool, err error) {
	raw := 0
	for _, l := range lines {
		raw += len(l) + 1
	}
	if raw > maxShardDecodedBytes {
		return nil, false, nil
	}
	var buf bytes.Buffer
	if e.zw == nil {
		if e.zw, err = gzip.NewWriterLevel(&buf, gzip.DefaultCompression); err != nil {
			return nil, false, err
		}
	} else {
		e.zw.Reset(&buf)
	}
	for _, l := range lines {
		e.zw.Write(l) // writes to a bytes.Buffer cannot fail
		e.zw.Write([]byte{'\n'})
		if buf.Len() > e.maxBytes {
			return nil, false, nil
		}
	}
	if err := e.zw.Close(); err != nil {
		return nil, false, err
	}
	if buf.Len() > e.maxBytes {
		return nil, false, nil
	}
	return buf.Bytes(), true, nil
}

// Decode rebuilds the table m describes from shards (shard name → Data). It verifies that every shard
// is present (else ErrIncomplete), that nothing else is, and that hashes, entry counts and the
// table's version match and every entry is valid (else ErrCorrupt). Decode never panics, whatever the
// input. Cost: about 2x NewTable on the same entries; not for the hot path; a reader that follows a
// table's versions uses a Reader, which decodes only the shards that changed. Safe for concurrent use.
func Decode(m Manifest, shards map[string][]byte) (*Table, error) {
	for name := range shards {
		if !slices.ContainsFunc(m.Shards, func(r ShardRef) bool { return r.Name == name }) {
			return nil, fmt.Errorf("%w: table %s: shard %q is not in the manifest", ErrCorrupt, m.Version, name)
		}
	}
	var r Reader
	return r.Decode(m, shards)
}

// decodeV1 decodes a format-1 table in full; m is validated.
func decodeV1(m Manifest, get func(name string) ([]byte, bool, error)) (*Table, error) {
	var lines []keyedLine
	for _, ref := range m.Shards {
		data, ok, err := get(ref.Name)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("%w: table %s: shard %s is missing", ErrIncomplete, m.Version, ref.Name)
		}
		if lines, err = decodeShard(lines, ref, data); err != nil {
			return nil, fmt.Errorf("%w: table %s: shard %s: %w", ErrCorrupt, m.Version, ref.Name, err)
		}
	}
	if len(lines) != m.Entries {
		return nil, fmt.Errorf("%w: table %s: %d entries, manifest says %d", ErrCorrupt, m.Version, len(lines), m.Entries)
	}
	slices.SortFunc(lines, func(a, b keyedLine) int { return compareEntryKeys(a.entry, b.entry) })
	raw := make([][]byte, len(lines))
	entries := make([]Entry, len(lines))
	for i := range lines {
		if i > 0 && compareEntryKeys(lines[i-1].entry, lines[i].entry) == 0 {
			return nil, fmt.Errorf("%w: table %s: %s appears more than once", ErrCorrupt, m.Version, lines[i].entry.Key())
		}
		raw[i] = lines[i].raw
		// The lines, not a re-encoding, are hashed: a reader that ignores fields added by a newer
		// writer still reports the version that writer published.
		c, err := lines[i].entry.canonical()
		if err != nil {
			return nil, fmt.Errorf("%w: table %s: %w", ErrCorrupt, m.Version, err)
		}
		entries[i] = c
	}
	if v := hashLines(raw); v != m.Version {
		return nil, fmt.Errorf("%w: table %s: entries hash to version %s", ErrCorrupt, m.Version, v)
	}
	ptrs := make([]*Entry, len(entries))
	for i := range entries {
		ptrs[i] = &entries[i]
	}
	return buildTable(m.Version, ptrs), nil
}

type keyedLine struct {
	entry Entry
	raw   []byte
}

func (m *Manifest) validate() error {
	if m.Format != manifestFormat && m.Format != manifestFormatV1 {
		return fmt.Errorf("%w: manifest format %d, want %d or %d", ErrCorrupt, m.Format, manifestFormat, manifestFormatV1)
	}
	if m.Format == manifestFormat {
		if m.Buckets < 1 || m.Buckets > maxBuckets || m.Buckets&(m.Buckets-1) != 0 {
			return fmt.Errorf("%w: table %s: %d buckets is not a power of two up to %d", ErrCorrupt, m.Version, m.Buckets, maxBuckets)
		}
		if v := manifestVersion(m.Buckets, m.Shards); v != m.Version {
			return fmt.Errorf("%w: table %s: manifest hashes to version %s", ErrCorrupt, m.Version, v)
		}
	}
	total, prevBucket := 0, 0
	for i, ref := range m.Shards {
		if !isBucketName(ref.Name) {
			return fmt.Errorf("%w: table %s: shard name %q is not a bucket number", ErrCorrupt, m.Version, ref.Name)
		}
		b, _ := strconv.Atoi(ref.Name)
		if m.Format == manifestFormat && (b >= m.Buckets || i > 0 && b <= prevBucket) {
			return fmt.Errorf("%w: table %s: shard %s out of order or beyond %d buckets", ErrCorrupt, m.Version, ref.Name, m.Buckets)
		}
		prevBucket = b
		// Format 2's ascending buckets repeat none; format 1 is checked pairwise (few shards).
		if m.Format != manifestFormat && slices.ContainsFunc(m.Shards[:i], func(r ShardRef) bool { return r.Name == ref.Name }) {
			return fmt.Errorf("%w: table %s: shard %s listed twice", ErrCorrupt, m.Version, ref.Name)
		}
		if sum, err := hex.DecodeString(ref.SHA256); err != nil || len(sum) != sha256.Size || hex.EncodeToString(sum) != ref.SHA256 {
			return fmt.Errorf("%w: table %s: shard %s: malformed sha256 %q", ErrCorrupt, m.Version, ref.Name, ref.SHA256)
		}
		if ref.Entries < 1 || ref.Entries > m.Entries-total {
			return fmt.Errorf("%w: table %s: shard %s: entry count %d does not add up to %d", ErrCorrupt, m.Version, ref.Name, ref.Entries, m.Entries)
		}
		total += ref.Entries
	}
	if total != m.Entries {
		return fmt.Errorf("%w: table %s: shards hold %d entries, manifest says %d", ErrCorrupt, m.Version, total, m.Entries)
	}
	return nil
}

// isBucketName accepts the decimal numbers Encode uses as shard names: "0" to "65535", no leading
// zeros, so that a name can be used in a ConfigMap name as is.
func isBucketName(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n < maxBuckets && strconv.Itoa(n) == s
}

// decodeShard verifies and decompresses one shard and appends its lines to dst.
func decodeShard(dst []keyedLine, ref ShardRef, data []byte) ([]keyedLine, error) {
	lines, err := shardLines(ref, data)
	if err != nil {
		return dst, err
	}
	for n, line := range lines {
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return dst, fmt.Errorf("line %d: %w", n+1, err)
		}
		dst = append(dst, keyedLine{entry: e, raw: line})
	}
	return dst, nil
}

// shardLines verifies and decompresses one shard and returns its lines, as many as ref says.
func shardLines(ref ShardRef, data []byte) ([][]byte, error) {
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("sha256 %x, manifest says %s", sum, ref.SHA256)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("decompressing: %w", err)
	}
	text, err := io.ReadAll(io.LimitReader(zr, maxShardDecodedBytes+1))
	if err != nil {
		return nil, fmt.Errorf("decompressing: %w", err)
	}
	if len(text) > maxShardDecodedBytes {
		return nil, fmt.Errorf("decompresses to more than %d bytes", maxShardDecodedBytes)
	}
	lines := make([][]byte, 0, ref.Entries)
	for len(text) > 0 {
		i := bytes.IndexByte(text, '\n')
		if i < 0 {
			return nil, fmt.Errorf("line %d is not terminated", len(lines)+1)
		}
		lines = append(lines, text[:i:i])
		text = text[i+1:]
		if len(lines) > ref.Entries {
			break
		}
	}
	if len(lines) != ref.Entries {
		return nil, fmt.Errorf("%d entries, manifest says %d", len(lines), ref.Entries)
	}
	return lines, nil
}
