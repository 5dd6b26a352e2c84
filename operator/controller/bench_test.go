package controller

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
)

// benchCandidates returns n candidates built the way the reconciler builds them, from objects shaped
// like a multi-tenant cluster's: one or two hosts each, some with path prefixes, header matches,
// timeouts and cold-start settings.
func benchCandidates(b *testing.B, n int) []candidate {
	b.Helper()
	out := make([]candidate, n)
	for i := range n {
		ns := fmt.Sprintf("team-%04d", i/25)
		name := fmt.Sprintf("app-%06d", i)
		h := &v1.HTTPScaledObject{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: int64(1 + i%9)},
			Spec: v1.HTTPScaledObjectSpec{
				Hosts:          []v1.Host{v1.Host(name + "." + ns + ".apps.example.com")},
				ScaleTargetRef: v1.ScaleTargetRef{Name: name, Service: name, Port: ptr.To[int32](80)},
			},
		}
		if i%4 == 0 {
			h.Spec.Hosts = append(h.Spec.Hosts, v1.Host("*."+name+".example.net"))
		}
		if i%10 == 1 {
			h.Spec.PathPrefixes = []v1.PathPrefix{v1.PathPrefix("/api/" + name), "/v2/" + v1.PathPrefix(name)}
		}
		if i%7 == 0 {
			h.Spec.Headers = []v1.HeaderMatch{{Name: "X-Canary", Value: ptr.To("true")}}
		}
		if i%3 == 0 {
			h.Spec.Timeouts = &v1.Timeouts{Readiness: ptr.To(v1.Duration("90s"))}
		}
		if i%50 == 0 {
			h.Spec.ColdStart = &v1.ColdStart{QueueLimit: ptr.To[int32](200), Placeholder: &v1.Placeholder{
				StatusCode: 503, Headers: map[string]string{"Retry-After": "10"}, Body: "<html><body>" + name + " is starting</body></html>"}}
		}
		target := routing.Backend{Service: name, Port: 80, PortName: "http", TargetPort: 8080, Protocol: routing.ProtocolHTTP}
		out[i] = candidate{entry: buildEntry(h, target, nil), created: time.Unix(int64(1_700_000_000+i), 0)}
	}
	return out
}

// fill returns a table state holding cands, decided and encoded.
func fill(b *testing.B, cands []candidate) *tableState {
	b.Helper()
	s, err := newTableState(routing.DefaultMaxShardBytes, routing.DefaultMaxShardEntries)
	if err != nil {
		b.Fatal(err)
	}
	for i := range cands {
		c := cands[i]
		if err := c.prepare(routing.DefaultMaxEntryBytes); err != nil {
			b.Fatal(err)
		}
		s.set(c.entry.Key(), &c)
	}
	s.decide()
	if _, _, err := s.enc.Encode(); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkBuildEncode50k measures deciding and encoding a whole table of 50,000 apps from scratch
// (what the writer does once, at start-up): conflicts, canonical form, compressed shards, ConfigMaps.
// It reports the encoded size, the number of shards and the largest shard.
func BenchmarkBuildEncode50k(b *testing.B) {
	cands := benchCandidates(b, 50_000)
	var bytes, largest, shards int
	b.ReportAllocs()
	for b.Loop() {
		s := fill(b, cands)
		manifest, ss, err := s.enc.Encode()
		if err != nil {
			b.Fatal(err)
		}
		head, cms := routing.ToConfigMaps("httpscale-system", routing.DefaultBaseName, manifest, ss)
		bytes, largest, shards = len(head.Data[routing.ManifestKey]), 0, len(cms)
		for _, cm := range cms {
			n := len(cm.BinaryData[routing.EntriesKey])
			bytes += n
			largest = max(largest, n)
		}
		if manifest.Entries != 50_000 {
			b.Fatalf("table has %d entries", manifest.Entries)
		}
	}
	b.ReportMetric(float64(bytes), "encoded-bytes")
	b.ReportMetric(float64(shards), "shards")
	b.ReportMetric(float64(largest), "largest-shard-bytes")
}

// BenchmarkOneChange measures what the writer does per table version when one new object arrives
// among N: prepare its entry, decide what it can affect, re-encode the shard it lands in, lay the
// table out as ConfigMaps. It reports the shards re-encoded per change.
func BenchmarkOneChange(b *testing.B) {
	for _, n := range []int{10_000, 50_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			cands := benchCandidates(b, n+10_000)
			s := fill(b, cands[:n])
			prev, _, _ := s.enc.Encode()
			i, changed := n, 0
			b.ReportAllocs()
			for b.Loop() {
				c := cands[i%len(cands)]
				i++
				if err := c.prepare(routing.DefaultMaxEntryBytes); err != nil {
					b.Fatal(err)
				}
				s.set(c.entry.Key(), &c)
				s.decide()
				m, shards, err := s.enc.Encode()
				if err != nil {
					b.Fatal(err)
				}
				routing.ToConfigMaps("httpscale-system", routing.DefaultBaseName, m, shards)
				old := map[string]string{}
				for _, r := range prev.Shards {
					old[r.Name] = r.SHA256
				}
				for _, r := range m.Shards {
					if old[r.Name] != r.SHA256 {
						changed++
					}
				}
				prev = m
			}
			b.ReportMetric(float64(changed)/float64(b.N), "shards/change")
		})
	}
}
