package routing

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

func encodeT(t *testing.T, tbl *Table, max int) (Manifest, []Shard) {
	t.Helper()
	m, shards, err := Encode(tbl, max)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return m, shards
}

func shardMap(shards []Shard) map[string][]byte {
	out := map[string][]byte{}
	for _, s := range shards {
		out[s.Name] = s.Data
	}
	return out
}

func TestCodecRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		entries []Entry
		max     int
	}{
		{name: "empty", max: DefaultMaxShardBytes},
		{name: "every field", entries: []Entry{fullEntry("shop/front"), entry("a/b", []string{"*"})}, max: DefaultMaxShardBytes},
		{name: "extreme values", entries: []Entry{entry("x/y", []string{"a.b"}, func(e *Entry) {
			e.Generation = 1<<63 - 1
			e.Timeouts = Timeouts{Readiness: 1<<63 - 1, Request: 1, ResponseHeader: time.Hour + time.Nanosecond}
			e.ColdStart.QueueLimit = 1<<31 - 1
			e.ZoneAware = ptr(true)
		})}, max: DefaultMaxShardBytes},
		{name: "many shards", entries: syntheticEntries(3000), max: 8 << 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := mustTable(t, tc.entries...)
			m, shards := encodeT(t, tbl, tc.max)
			// The manifest travels as JSON in the head ConfigMap.
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var m2 Manifest
			if err := json.Unmarshal(b, &m2); err != nil {
				t.Fatal(err)
			}
			got, err := Decode(m2, shardMap(shards))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if d := diff(tbl.Entries(), got.Entries()); d != "" {
				t.Errorf("entries changed in the round trip (-want +got):\n%s", d)
			}
			// A stored table carries the version of its manifest.
			if got.Version() != m.Version {
				t.Errorf("versions: manifest %s, decoded %s", m.Version, got.Version())
			}
			if m.Entries != len(tc.entries) || got.Len() != len(tc.entries) {
				t.Errorf("manifest has %d entries, decoded table %d, want %d", m.Entries, got.Len(), len(tc.entries))
			}
		})
	}
}

func TestCanonicalEntry(t *testing.T) {
	in := entry("a/b", []string{"B.example.com", "a.example.com", "b.example.com"}, paths("/x/", "/a", "/x", "/"),
		hdr("x-b=2"), hdr("X-A"), func(e *Entry) { e.ColdStart.Placeholder = &Placeholder{Headers: map[string]string{}} })
	want := entry("a/b", []string{"a.example.com", "b.example.com"}, paths("/", "/a", "/x"), hdr("X-A"), hdr("X-B=2"),
		func(e *Entry) { e.Protocol = ProtocolHTTP; e.ColdStart.Placeholder = &Placeholder{} })
	tbl := mustTable(t, in)
	if d := diff([]Entry{want}, tbl.Entries()); d != "" {
		t.Errorf("canonical entry (-want +got):\n%s", d)
	}
	// The table is a snapshot: changing the input or a returned copy does not change it.
	in.Hosts[0] = "changed.example.com"
	tbl.Entries()[0].Hosts[0] = "changed.example.com"
	if _, ok := tbl.Match("changed.example.com", "/", nil); ok {
		t.Errorf("table changed with its input")
	}
	if d := diff([]Entry{want}, tbl.Entries()); d != "" {
		t.Errorf("table changed after construction (-want +got):\n%s", d)
	}
}

func TestVersionStability(t *testing.T) {
	entries := syntheticEntries(200)
	base := mustTable(t, entries...).Version()
	r := rand.New(rand.NewPCG(3, 4))
	shuffled := slices.Clone(entries)
	r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	shuffled[0].Hosts = append([]string{strings.ToUpper(shuffled[0].Hosts[0])}, shuffled[0].Hosts...)
	if v := mustTable(t, shuffled...).Version(); v != base {
		t.Errorf("reordered input: version %s, want %s", v, base)
	}
	changed := slices.Clone(entries)
	changed[17].Generation++
	if v := mustTable(t, changed...).Version(); v == base {
		t.Errorf("changed generation kept version %s", v)
	}
	if v := mustTable(t, entries[1:]...).Version(); v == base {
		t.Errorf("removed entry kept version %s", v)
	}
	if len(base) != 16 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Errorf("version %q is not 16 hex characters", base)
	}
}

func TestEncodeShards(t *testing.T) {
	const max = 8 << 10
	entries := syntheticEntries(3000)
	tbl := mustTable(t, entries...)
	m, shards := encodeT(t, tbl, max)
	if len(shards) < 4 {
		t.Fatalf("%d shards for 3000 entries at %d bytes, want several", len(shards), max)
	}
	if m.Buckets&(m.Buckets-1) != 0 || m.Buckets < len(shards) {
		t.Errorf("buckets %d is not a power of two covering %d shards", m.Buckets, len(shards))
	}
	total := 0
	for i, s := range shards {
		if len(s.Data) > max {
			t.Errorf("shard %s is %d bytes, limit %d", s.Name, len(s.Data), max)
		}
		if sum := sha256.Sum256(s.Data); hex.EncodeToString(sum[:]) != s.SHA256 || m.Shards[i].SHA256 != s.SHA256 {
			t.Errorf("shard %s: hash does not match its data or the manifest", s.Name)
		}
		total += s.Entries
	}
	if total != len(entries) {
		t.Errorf("shards hold %d entries, want %d", total, len(entries))
	}
	// The smallest power of two: with half as many buckets one would hold too much.
	if m.Buckets > 1 {
		e, err := NewEncoder(max, DefaultMaxShardEntries)
		if err != nil {
			t.Fatal(err)
		}
		e.Grow(m.Buckets / 2)
		overflow := false
		for _, x := range tbl.entries() {
			line, _ := json.Marshal(x)
			e.Put(x.Key(), line)
		}
		for _, members := range e.members {
			var lines [][]byte
			for _, l := range members {
				lines = append(lines, l)
			}
			if _, ok, _ := e.compress(lines); !ok || len(lines) > DefaultMaxShardEntries {
				overflow = true
			}
		}
		if !overflow {
			t.Errorf("%d buckets would also fit; Encode chose %d", m.Buckets/2, m.Buckets)
		}
	}
	for _, s := range shards {
		if s.Entries > DefaultMaxShardEntries {
			t.Errorf("shard %s holds %d entries, limit %d", s.Name, s.Entries, DefaultMaxShardEntries)
		}
	}
	m2, shards2 := encodeT(t, tbl, max)
	if d := diff(m, m2); d != "" || !slices.EqualFunc(shards, shards2, func(a, b Shard) bool { return bytes.Equal(a.Data, b.Data) }) {
		t.Errorf("encoding is not deterministic:\n%s", d)
	}
}

// TestEncodeOneChangeOneShard checks the point of hash sharding: editing, adding or removing one app
// rewrites one shard.
func TestEncodeOneChangeOneShard(t *testing.T) {
	const max = 8 << 10
	entries := syntheticEntries(3000)
	m, _ := encodeT(t, mustTable(t, entries...), max)
	edit := slices.Clone(entries)
	edit[1234] = fullEntry(edit[1234].Key())
	add := append(slices.Clone(entries), entry("new/app", []string{"new.example.com"}))
	remove := append(slices.Clone(entries[:10]), entries[11:]...)
	for name, changed := range map[string][]Entry{"edit": edit, "add": add, "remove": remove} {
		t.Run(name, func(t *testing.T) {
			m2, _ := encodeT(t, mustTable(t, changed...), max)
			if m2.Buckets != m.Buckets {
				t.Fatalf("bucket count changed from %d to %d", m.Buckets, m2.Buckets)
			}
			old := map[string]string{}
			for _, r := range m.Shards {
				old[r.Name] = r.SHA256
			}
			var differ []string
			for _, r := range m2.Shards {
				if old[r.Name] != r.SHA256 {
					differ = append(differ, r.Name)
				}
			}
			if len(differ) != 1 || len(m2.Shards) != len(m.Shards) {
				t.Errorf("shards that changed: %v of %d (was %d shards), want exactly one", differ, len(m2.Shards), len(m.Shards))
			}
		})
	}
}

func TestEncodeErrors(t *testing.T) {
	big := entry("big/app", []string{"big.example.com"}, func(e *Entry) {
		r := rand.New(rand.NewPCG(5, 6))
		b := make([]byte, 8<<10)
		for i := range b {
			b[i] = 'a' + byte(r.IntN(26))
		}
		e.ColdStart.Placeholder = &Placeholder{Body: string(b)}
	})
	tbl := mustTable(t, big, entry("small/app", []string{"small.example.com"}))
	if _, _, err := Encode(tbl, 4<<10); !errors.Is(err, ErrEntryTooLarge) || !strings.Contains(err.Error(), "big/app") {
		t.Errorf("Encode of an oversized entry: %v, want ErrEntryTooLarge naming big/app", err)
	}
	if _, _, err := Encode(tbl, 0); err == nil {
		t.Errorf("Encode with max 0 succeeded")
	}
	if _, _, err := Encode(nil, 1000); err == nil {
		t.Errorf("Encode of a nil table succeeded")
	}
}

// resign recomputes a shard's hash and the version in the manifest so that only deeper checks can
// catch a change.
func resign(m *Manifest, name string, data []byte) {
	for i := range m.Shards {
		if m.Shards[i].Name == name {
			sum := sha256.Sum256(data)
			m.Shards[i].SHA256 = hex.EncodeToString(sum[:])
		}
	}
	m.Version = manifestVersion(m.Buckets, m.Shards)
}

func gunzip(t *testing.T, data []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if _, err := text.ReadFrom(zr); err != nil {
		t.Fatal(err)
	}
	return text.String()
}

func gz(s string) []byte {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return b.Bytes()
}

func TestDecodeErrors(t *testing.T) {
	tbl := mustTable(t, syntheticEntries(400)...)
	m, shards := encodeT(t, tbl, 4<<10)
	if len(shards) < 3 {
		t.Fatalf("want at least 3 shards, got %d", len(shards))
	}
	first, second := shards[0].Name, shards[1].Name
	tests := []struct {
		name   string
		mutate func(m *Manifest, s map[string][]byte)
		want   error
	}{
		{name: "missing shard", want: ErrIncomplete, mutate: func(m *Manifest, s map[string][]byte) { delete(s, second) }},
		{name: "no shards at all", want: ErrIncomplete, mutate: func(m *Manifest, s map[string][]byte) { clear(s) }},
		{name: "extra shard", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { s["9999"] = s[first] }},
		{name: "tampered shard", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			s[first] = slices.Clone(s[first])
			s[first][len(s[first])/2] ^= 1
		}},
		{name: "shards swapped", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { s[first], s[second] = s[second], s[first] }},
		{name: "version mismatch", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { m.Version = "0123456789abcdef" }},
		{name: "total count mismatch", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { m.Entries++ }},
		{name: "shard count mismatch", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { m.Shards[0].Entries--; m.Shards[1].Entries++ }},
		{name: "unknown format", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { m.Format = 3 }},
		{name: "malformed hash", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { m.Shards[0].SHA256 = strings.ToUpper(m.Shards[0].SHA256) }},
		{name: "bad shard name", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { m.Shards[0].Name = "../x" }},
		{name: "shard listed twice", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) { m.Shards[1].Name = first }},
		{name: "not gzip", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			s[first] = []byte("plain text")
			resign(m, first, s[first])
		}},
		{name: "not json", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			s[first] = gz(strings.Repeat("{not json}\n", m.Shards[0].Entries))
			resign(m, first, s[first])
		}},
		{name: "unterminated line", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			s[first] = gz(`{"ns":"a"}`)
			resign(m, first, s[first])
		}},
		{name: "entry changed without a new version", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			// Valid, unique entries with matching counts and hashes: only the version check can notice.
			lines := strings.SplitAfter(gunzip(t, s[first]), "\n")
			var e Entry
			if err := json.Unmarshal([]byte(lines[0]), &e); err != nil {
				t.Fatal(err)
			}
			e.Generation += 100
			b, _ := json.Marshal(e)
			lines[0] = string(b) + "\n"
			s[first] = gz(strings.Join(lines, ""))
			v := m.Version
			resign(m, first, s[first])
			m.Version = v
		}},
		{name: "entries in the wrong bucket", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			s[first], s[second] = s[second], s[first]
			m.Shards[0].Entries, m.Shards[1].Entries = m.Shards[1].Entries, m.Shards[0].Entries
			resign(m, first, s[first])
			resign(m, second, s[second])
		}},
		{name: "entries out of order", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			lines := strings.SplitAfter(gunzip(t, s[first]), "\n")
			lines = lines[:len(lines)-1] // the empty string after the last newline
			slices.Reverse(lines)
			s[first] = gz(strings.Join(lines, ""))
			resign(m, first, s[first])
		}},
		{name: "bucket count not a power of two", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			m.Buckets = 3
			m.Version = manifestVersion(m.Buckets, m.Shards)
		}},
		{name: "invalid entry", want: ErrCorrupt, mutate: func(m *Manifest, s map[string][]byte) {
			var b strings.Builder
			for i := range m.Shards[0].Entries {
				fmt.Fprintf(&b, `{"ns":"a","n":"b%d","h":["*"],"svc":"svc","port":0}`+"\n", i)
			}
			s[first] = gz(b.String())
			resign(m, first, s[first])
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m2 := m
			m2.Shards = slices.Clone(m.Shards)
			s := shardMap(shards)
			tc.mutate(&m2, s)
			got, err := Decode(m2, s)
			if !errors.Is(err, tc.want) || got != nil {
				t.Errorf("Decode = %v, %v; want an error wrapping %v", got, err, tc.want)
			}
		})
	}
	if _, err := Decode(m, shardMap(shards)); err != nil {
		t.Fatalf("unmodified input does not decode: %v", err)
	}
}
