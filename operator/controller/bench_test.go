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

// BenchmarkBuildEncode50k measures what the writer does per table version with 50,000 apps: decide
// the table (conflicts, canonical form, version hash), encode it into compressed shards and lay them
// out as ConfigMaps. It reports the encoded size, the number of shards and the largest shard.
func BenchmarkBuildEncode50k(b *testing.B) {
	cands := benchCandidates(b, 50_000)
	var bytes, largest, shards int
	b.ReportAllocs()
	for b.Loop() {
		table, _, invalid, err := buildTable(cands)
		if err != nil || len(invalid) > 0 {
			b.Fatalf("buildTable: %v %v", err, invalid)
		}
		manifest, ss, err := routing.Encode(table, routing.DefaultMaxShardBytes)
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
		if table.Len() != 50_000 {
			b.Fatalf("table has %d entries", table.Len())
		}
	}
	b.ReportMetric(float64(bytes), "encoded-bytes")
	b.ReportMetric(float64(shards), "shards")
	b.ReportMetric(float64(largest), "largest-shard-bytes")
}

// BenchmarkBuild50k is the decision alone (no encoding), for comparison.
func BenchmarkBuild50k(b *testing.B) {
	cands := benchCandidates(b, 50_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := buildTable(cands); err != nil {
			b.Fatal(err)
		}
	}
}
