package routing

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/textproto"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzMatch checks that Match never panics, agrees with the reference matcher, and that a route
// built from the fuzzed host, path and header matches a request for exactly those.
func FuzzMatch(f *testing.F) {
	f.Add("shop.example.com", "/api", "SHOP.example.com:8080", "/api/v1", "X-Beta", "1")
	f.Add("*.example.com", "/", "a.b.example.com.", "/apis", "x-tenant", "")
	f.Add("*", "", "[::1]:80", "", "", "")
	f.Add("*.b.example.com", "/docs/", "b.example.com", "//docs", "X", "v")
	base := []Entry{
		entry("base/exact", []string{"shop.example.com"}, paths("/api")),
		entry("base/wild", []string{"*.example.com"}, hdr("X-Beta=1")),
		entry("base/nested", []string{"*.b.example.com"}, paths("/a", "/b/c")),
		entry("base/star", []string{"*"}, paths("/static")),
		entry("base/kinds", []string{"shop.example.com", "*.b.example.com"}, withRoutes([]string{"/app", "/b"}, []string{"/app/health", "/b"},
			StaticRoute{PathPrefix: "/ping", Response: &Placeholder{StatusCode: 200}})),
	}
	baseTable := mustTable(f, base...)
	f.Fuzz(func(t *testing.T, routeHost, routePath, reqHost, reqPath, hdrName, hdrValue string) {
		header := http.Header{textproto.CanonicalMIMEHeaderKey(hdrName): {hdrValue}}
		baseTable.Match(reqHost, reqPath, header)

		var opts []func(*Entry)
		if routePath != "" {
			opts = append(opts, paths(routePath))
		}
		if hdrName != "" {
			opts = append(opts, func(e *Entry) { e.Headers = []HeaderMatch{{Name: hdrName, Value: ptr(hdrValue)}} })
		}
		e := entry("fuzz/route", []string{routeHost}, opts...)
		if e.Validate() != nil {
			return
		}
		both := mustTable(t, append(base, e)...)
		got := ""
		if m, ok := both.Match(reqHost, reqPath, header); ok {
			got = m.Key()
		}
		if want := referenceMatch(both, reqHost, reqPath, header); got != want {
			t.Fatalf("Match(%q, %q, %v) = %q, reference says %q", reqHost, reqPath, header, got, want)
		}

		self := mustTable(t, e)
		host := strings.ToLower(routeHost)
		switch {
		case host == "*":
			host = reqHost
		case strings.HasPrefix(host, "*."):
			host = "x" + host[1:]
		}
		for _, h := range []string{host, strings.ToUpper(host) + ".", host + ":8443"} {
			if m, ok := self.Match(h, routePath, header); !ok || m.Key() != e.Key() {
				t.Fatalf("route %q %q does not match request %q %q", routeHost, routePath, h, routePath)
			}
		}
	})
}

// FuzzCodecRoundTrip checks Encode → Decode returns the entries and version that went in.
func FuzzCodecRoundTrip(f *testing.F) {
	f.Add("ns", "app", "shop.example.com", "/api", "X-Tenant", "acme", "body", int64(3), int32(80), int64(time.Second), uint8(3), uint16(100))
	f.Add("a", "b.c", "*", "", "", "", "", int64(0), int32(65535), int64(1<<62), uint8(40), uint16(0))
	f.Add("team-1", "x", "*.a.b", "/é", "Content-Type", "text/html; q=\t1", "<&>\u2028", int64(1), int32(1), int64(1), uint8(0), uint16(3000))
	f.Fuzz(func(t *testing.T, ns, name, host, path, hdrName, hdrValue, body string, gen int64, port int32, timeout int64, copies uint8, max uint16) {
		var entries []Entry
		for i := range 1 + int(copies%50) {
			e := entry(ns+"/"+name+strings.Repeat("x", i), []string{host}, func(e *Entry) {
				e.Generation, e.Port = gen, port
				if path != "" {
					e.PathPrefixes = []string{path, "/fixed"}
				}
				if hdrName != "" {
					e.Headers = []HeaderMatch{{Name: hdrName, Value: ptr(hdrValue)}, {Name: "X-Present"}}
				}
				e.Timeouts = Timeouts{Readiness: time.Duration(timeout), Request: time.Duration(timeout / 3)}
				if body != "" || i%2 == 1 {
					e.ColdStart.Placeholder = &Placeholder{StatusCode: 503, Body: body, Headers: map[string]string{"X-Why": hdrValue}}
				}
				if i%3 == 0 {
					e.ColdStart.Fallback = &Backend{Service: "fb", Port: port, Protocol: ProtocolH2C}
					e.ZoneAware = ptr(i%2 == 0)
				}
			})
			entries = append(entries, e)
		}
		tbl, err := NewTable(entries)
		if err != nil {
			if !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("NewTable error does not wrap ErrInvalidEntry: %v", err)
			}
			return
		}
		m, shards, err := Encode(tbl, 512+int(max))
		if errors.Is(err, ErrEntryTooLarge) {
			return
		}
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		for _, s := range shards {
			if len(s.Data) > 512+int(max) {
				t.Fatalf("shard %s is %d bytes, limit %d", s.Name, len(s.Data), 512+int(max))
			}
		}
		got, err := Decode(m, shardMap(shards))
		if err != nil {
			t.Fatalf("Decode: %v", err)
		}
		if d := diff(tbl.Entries(), got.Entries()); d != "" {
			t.Fatalf("round trip changed entries (-want +got):\n%s", d)
		}
		if got.Version() != m.Version {
			t.Fatalf("version %s, want %s", got.Version(), m.Version)
		}
	})
}

// FuzzDecode feeds arbitrary manifests and shard bytes to Decode and FromConfigMaps, which must
// return an error or a usable table, never panic.
func FuzzDecode(f *testing.F) {
	tbl := mustTable(f, fullEntry("shop/front"), entry("a/b", []string{"*"}))
	m, shards, err := Encode(tbl, DefaultMaxShardBytes)
	if err != nil {
		f.Fatal(err)
	}
	mj, _ := json.Marshal(m)
	f.Add(mj, shards[0].Data, []byte{})
	lines, _ := json.Marshal(tbl.entries()[0])
	f.Add([]byte(`{"format":1}`), []byte("not gzip"), append(lines, '\n'))
	f.Add([]byte(`{"format":1,"entries":-1,"shards":[{"name":"0","sha256":"00","entries":1e9}]}`), []byte{0x1f, 0x8b}, []byte("{}\n{}\n"))
	f.Fuzz(func(t *testing.T, manifestJSON, shard, text []byte) {
		var m Manifest
		_ = json.Unmarshal(manifestJSON, &m)
		if tbl, err := Decode(m, map[string][]byte{"0": shard}); err == nil {
			tbl.Match("a.example.com", "/", nil)
		}
		head := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Data: map[string]string{ManifestKey: string(manifestJSON)}}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "t-x-0"}, BinaryData: map[string][]byte{EntriesKey: shard}}
		_, _ = FromConfigMaps(head, []*corev1.ConfigMap{cm})

		// Make hashes, counts and version agree, so the text reaches the JSON and entry checks.
		data := gz(string(text))
		sum := sha256.Sum256(data)
		n := bytes.Count(text, []byte{'\n'})
		raw := bytes.Split(text, []byte{'\n'})
		m = Manifest{Format: manifestFormat, Entries: n, Version: hashLines(raw[:n]), Buckets: 1}
		if n > 0 {
			m.Shards = []ShardRef{{Name: "0", SHA256: hex.EncodeToString(sum[:]), Entries: n}}
		}
		got, err := Decode(m, map[string][]byte{"0": data})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrIncomplete) {
				t.Fatalf("Decode error is neither ErrCorrupt nor ErrIncomplete: %v", err)
			}
			return
		}
		got.Match("a.example.com", "/x", http.Header{"X-Tenant": {"acme"}})
		if got.Len() != n || got.Version() != m.Version {
			t.Fatalf("decoded %d entries version %s, manifest says %d %s", got.Len(), got.Version(), n, m.Version)
		}
	})
}
