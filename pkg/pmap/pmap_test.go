package pmap

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestEditSharesAndIsolates applies random changes through Builders and checks every version against
// a plain map, and that deriving a version leaves the one it came from unchanged.
func TestEditSharesAndIsolates(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	m := New[string, int](String)
	want := map[string]int{}
	type version struct {
		m    Map[string, int]
		want map[string]int
	}
	var versions []version
	for step := range 300 {
		b := m.Edit()
		for range r.IntN(20) {
			k := fmt.Sprintf("k%d", r.IntN(500))
			if r.IntN(3) == 0 {
				b.Delete(k)
				delete(want, k)
			} else {
				b.Set(k, step)
				want[k] = step
			}
		}
		m = b.Map()
		snap := map[string]int{}
		for k, v := range want {
			snap[k] = v
		}
		versions = append(versions, version{m, snap})
	}
	for i, v := range versions {
		if v.m.Len() != len(v.want) {
			t.Fatalf("version %d: Len %d, want %d", i, v.m.Len(), len(v.want))
		}
		n := 0
		for k, x := range v.m.All() {
			n++
			if w, ok := v.want[k]; !ok || w != x {
				t.Fatalf("version %d: %s = %d, want %d (%v)", i, k, x, w, ok)
			}
		}
		if n != len(v.want) {
			t.Fatalf("version %d: All yielded %d keys, want %d", i, n, len(v.want))
		}
		for k, w := range v.want {
			if x, ok := v.m.Get(k); !ok || x != w {
				t.Fatalf("version %d: Get(%s) = %d, %v; want %d", i, k, x, ok, w)
			}
		}
		if _, ok := v.m.Get("absent"); ok {
			t.Fatalf("version %d: Get of an absent key succeeded", i)
		}
	}
}

func TestPointerKeysAndZeroMap(t *testing.T) {
	var zero Map[*int, string]
	if _, ok := zero.Get(new(int)); ok || zero.Len() != 0 {
		t.Fatal("the zero Map is not empty")
	}
	keys := make([]*int, 1000)
	b := New[*int, string](Pointer[int]).Edit()
	for i := range keys {
		keys[i] = new(int)
		b.Set(keys[i], fmt.Sprint(i))
	}
	m := b.Map()
	for i, k := range keys {
		if v, ok := m.Get(k); !ok || v != fmt.Sprint(i) {
			t.Fatalf("Get(key %d) = %q, %v", i, v, ok)
		}
	}
	used := map[int]bool{}
	for _, k := range keys {
		used[m.part(k)] = true
	}
	if len(used) < parts/2 {
		t.Errorf("1,000 pointers fell into %d of %d parts", len(used), parts)
	}
}

// BenchmarkEditOne is one change to a map of n keys: what a routing-table version costs per map.
func BenchmarkEditOne(b *testing.B) {
	for _, n := range []int{10_000, 50_000} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			e := New[string, int](String).Edit()
			for i := range n {
				e.Set(fmt.Sprintf("ns-%d/app-%d", i%10, i), i)
			}
			m := e.Map()
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				e := m.Edit()
				e.Set(fmt.Sprintf("new-%d", i%100), i)
				m = e.Map()
			}
		})
	}
}
