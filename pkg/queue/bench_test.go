package queue

import (
	"strconv"
	"testing"
)

// BenchmarkRequestCounters is the counting a warm request does: received, in flight, done.
func BenchmarkRequestCounters(b *testing.B) {
	r := NewRegistry(nil)
	r.Sync([]string{"ns/app"})
	a := r.App("ns/app")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			a.Received()
			a.StartForward()()
		}
	})
}

// BenchmarkAppLookup is the per-request lookup of an app's counters among 50,000.
func BenchmarkAppLookup(b *testing.B) {
	r := NewRegistry(nil)
	keys := make([]string, 50000)
	for i := range keys {
		keys[i] = "ns/app-" + strconv.Itoa(i)
	}
	r.Sync(keys)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if r.App(keys[i%len(keys)]) == nil {
			b.Fatal("missing app")
		}
	}
}

// BenchmarkAddTable is the counters of a new routing table of 10,000 apps created at once (Add), as
// the proxy does. Creating them one by one with App copies the map each time: measured 47.7 s and
// 2.28 GB allocated per table on the build machine (see docs/benchmarks/memory.md).
func BenchmarkAddTable(b *testing.B) {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = "ns/app-" + strconv.Itoa(i)
	}
	b.ReportAllocs()
	for b.Loop() {
		NewRegistry(nil).Add(keys)
	}
}
