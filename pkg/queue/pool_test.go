package queue

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
)

// poolApps returns n apps of one registry.
func poolApps(n int) []*App {
	r := NewRegistry(nil)
	out := make([]*App, n)
	for i := range out {
		out[i] = r.App("ns/app-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	return out
}

// holder is a test's record of one admitted request.
type holder struct {
	h       *Hold
	app     int
	evicted bool
}

type poolRun struct {
	t    *testing.T
	p    *Pool
	apps []*App
	held []*holder
}

func newPoolRun(t *testing.T, l PoolLimits, apps int) *poolRun {
	return &poolRun{t: t, p: NewPool(l), apps: poolApps(apps)}
}

// admit asks for one request of app i costing cost; it reports whether it was admitted.
func (r *poolRun) admit(i int, cost int64) bool {
	r.t.Helper()
	hd := &holder{app: i}
	h, err := r.p.Admit(r.apps[i], cost, func() { hd.evicted = true })
	if err != nil {
		if !errors.Is(err, ErrPoolFull) {
			r.t.Fatalf("Admit: %v, want nil or ErrPoolFull", err)
		}
		return false
	}
	hd.h = h
	r.held = append(r.held, hd)
	return true
}

// live returns how many requests each app holds that were neither evicted nor released.
func (r *poolRun) live() []int {
	out := make([]int, len(r.apps))
	for _, hd := range r.held {
		if !hd.evicted && hd.h != nil {
			out[hd.app]++
		}
	}
	return out
}

func (r *poolRun) checkUsage() {
	r.t.Helper()
	var count, bytes int64
	for i, a := range r.apps {
		c, b := r.p.AppUsage(a)
		if want := int64(r.live()[i]); c != want {
			r.t.Fatalf("app %d: pool counts %d held, the test %d", i, c, want)
		}
		count += c
		bytes += b
	}
	pc, pb := r.p.Usage()
	if pc != count || pb != bytes {
		r.t.Fatalf("pool usage %d requests %d bytes, the apps' sum %d, %d", pc, pb, count, bytes)
	}
	l := r.p.Limits()
	if (l.MaxRequests > 0 && pc > l.MaxRequests) || (l.MaxBytes > 0 && pb > l.MaxBytes) {
		r.t.Fatalf("pool over its limits: %d requests %d bytes, limits %+v", pc, pb, l)
	}
}

func TestPoolBoundsRequestsAndBytes(t *testing.T) {
	r := newPoolRun(t, PoolLimits{MaxRequests: 10}, 1)
	for i := range 10 {
		if !r.admit(0, 1) {
			t.Fatalf("request %d refused below the bound", i)
		}
	}
	if r.admit(0, 1) {
		t.Fatal("11th request admitted past MaxRequests 10")
	}
	r.checkUsage()

	r = newPoolRun(t, PoolLimits{MaxBytes: 1000}, 1)
	for range 3 {
		if !r.admit(0, 300) {
			t.Fatal("request refused below the byte bound")
		}
	}
	if r.admit(0, 101) {
		t.Fatal("request admitted past MaxBytes")
	}
	if !r.admit(0, 100) {
		t.Fatal("request that exactly fits refused")
	}
	r.checkUsage()
	if got := r.p.Refused(); got != 1 {
		t.Errorf("Refused() = %d, want 1", got)
	}
}

func TestPoolReleaseFreesRoom(t *testing.T) {
	r := newPoolRun(t, PoolLimits{MaxRequests: 2, MaxBytes: 100}, 1)
	r.admit(0, 50)
	r.admit(0, 50)
	if r.admit(0, 1) {
		t.Fatal("admitted past the bound")
	}
	r.held[0].h.Release()
	r.held[0].h.Release() // twice is harmless
	r.held[0].h = nil
	if !r.admit(0, 50) {
		t.Fatal("refused after a release")
	}
	r.checkUsage()
}

func TestPoolRequestLargerThanTheBoundIsRefused(t *testing.T) {
	r := newPoolRun(t, PoolLimits{MaxBytes: 100}, 2)
	if r.admit(0, 101) {
		t.Fatal("a request costing more than MaxBytes alone was admitted")
	}
	r.admit(1, 100)
	if r.admit(0, 101) {
		t.Fatal("a request costing more than MaxBytes evicted its way in")
	}
	if r.held[0].evicted {
		t.Fatal("an oversized request evicted another app's hold")
	}
}

// A flood for one app takes the free pool; the next app gets its fair share back request by
// request, taken from the flood's newest holds, and never more than its share.
func TestPoolFloodGivesWayToAnotherApp(t *testing.T) {
	r := newPoolRun(t, PoolLimits{MaxRequests: 100}, 2)
	for range 300 {
		r.admit(0, 1)
	}
	if got := r.live()[0]; got != 100 {
		t.Fatalf("flood holds %d, want the whole pool (100)", got)
	}
	for i := range 50 {
		if !r.admit(1, 1) {
			t.Fatalf("app b's request %d refused while the flood held more than its share", i)
		}
	}
	if r.admit(1, 1) {
		t.Fatal("app b admitted past its fair share (50 of 100 with two apps)")
	}
	if r.admit(0, 1) {
		t.Fatal("the flood got room back at its fair share")
	}
	if got := r.live(); got[0] != 50 || got[1] != 50 {
		t.Fatalf("held %v, want [50 50]", got)
	}
	// The flood lost its newest holds, kept its oldest.
	for i, hd := range r.held[:100] {
		if want := i >= 50; hd.evicted != want {
			t.Fatalf("flood hold %d evicted=%v, want %v (newest first)", i, hd.evicted, want)
		}
	}
	if got := r.p.Evicted(); got != 50 {
		t.Errorf("Evicted() = %d, want 50", got)
	}
	r.checkUsage()
}

// With three apps each ends with a third; an app that holds little is never refused while another
// holds more than its share.
func TestPoolThreeApps(t *testing.T) {
	r := newPoolRun(t, PoolLimits{MaxRequests: 90}, 3)
	for range 200 {
		r.admit(0, 1)
	}
	for range 200 {
		r.admit(1, 1)
	}
	if got := r.live(); got[0] != 45 || got[1] != 45 {
		t.Fatalf("held %v, want 45 and 45", got)
	}
	for i := range 30 {
		if !r.admit(2, 1) {
			t.Fatalf("app c's request %d refused below its share", i)
		}
	}
	if got := r.live(); got[0] != 30 || got[1] != 30 || got[2] != 30 {
		t.Fatalf("held %v, want 30 each", got)
	}
	r.checkUsage()
}

// Shares compare the larger of an app's fractions: an app of few huge requests is at its fair
// share of bytes long before it is at its share of requests.
func TestPoolDominantShare(t *testing.T) {
	r := newPoolRun(t, PoolLimits{MaxRequests: 100, MaxBytes: 100 << 10}, 2)
	// App a: 10 requests of 10 KiB fill the bytes.
	for range 10 {
		if !r.admit(0, 10<<10) {
			t.Fatal("big request refused below the bound")
		}
	}
	if r.admit(0, 10<<10) {
		t.Fatal("admitted past MaxBytes")
	}
	// App b: small requests take bytes from a until a is down to half the bytes.
	admitted := 0
	for range 100 {
		if r.admit(1, 1<<10) {
			admitted++
		}
	}
	got := r.live()
	if got[0] != 5 {
		t.Fatalf("app a holds %d big requests, want 5 (half the bytes)", got[0])
	}
	if admitted != 50 {
		t.Fatalf("app b admitted %d small requests, want 50 (its half of the bytes)", admitted)
	}
	r.checkUsage()
}

// Thousands of apps with one request each: the first fill the pool, the others are refused without
// evicting anyone (each holder is exactly at its share).
func TestPoolManyApps(t *testing.T) {
	r := newPoolRun(t, PoolLimits{MaxRequests: 100}, 1000)
	for i := range 1000 {
		r.admit(i, 1)
	}
	if got := r.p.Evicted(); got != 0 {
		t.Fatalf("%d evictions among apps holding one request each", got)
	}
	if c, _ := r.p.Usage(); c != 100 {
		t.Fatalf("held %d, want 100", c)
	}
	r.checkUsage()
}

// Random admissions and releases keep the pool's books and bounds, and an app below its fair share
// is never refused while another app is above its own.
func TestPoolRandomInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := newPoolRun(t, PoolLimits{MaxRequests: 64, MaxBytes: 64 << 10}, 6)
	for step := range 20000 {
		if rng.IntN(3) == 0 && len(r.held) > 0 {
			k := rng.IntN(len(r.held))
			if hd := r.held[k]; hd.h != nil {
				hd.h.Release()
				r.held = append(r.held[:k], r.held[k+1:]...)
			}
			continue
		}
		app := rng.IntN(len(r.apps))
		cost := int64(1+rng.IntN(4)) << 10
		c, b := r.p.AppUsage(r.apps[app])
		n := 0
		aboveExists := false
		for _, a := range r.apps {
			if ac, _ := r.p.AppUsage(a); ac > 0 || a == r.apps[app] {
				n++
			}
		}
		fair := 1 / float64(n)
		for _, a := range r.apps {
			if a == r.apps[app] {
				continue
			}
			ac, ab := r.p.AppUsage(a)
			if max(float64(ac)/64, float64(ab)/(64<<10)) > fair+float64(4<<10)/(64<<10) {
				aboveExists = true // above its share by more than any one request's cost
			}
		}
		below := max(float64(c+1)/64, float64(b+cost)/(64<<10)) <= fair
		if !r.admit(app, cost) && below && aboveExists {
			t.Fatalf("step %d: app %d below its fair share refused while another app was far above its own", step, app)
		}
		r.checkUsage()
	}
}

func TestPoolConcurrent(t *testing.T) {
	p := NewPool(PoolLimits{MaxRequests: 50, MaxBytes: 50 << 10})
	apps := poolApps(8)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				h, err := p.Admit(apps[(g+i)%len(apps)], int64(1+i%3)<<10, nil)
				if err == nil && i%2 == 0 {
					h.Release()
				}
				if c, b := p.Usage(); c > 50 || b > 50<<10 {
					t.Errorf("pool over its bound: %d requests, %d bytes", c, b)
					return
				}
			}
		})
	}
	wg.Wait()
}

// appsIn returns apps of the given "namespace/name" keys, in order.
func appsIn(keys ...string) []*App {
	r := NewRegistry(nil)
	out := make([]*App, len(keys))
	for i, k := range keys {
		out[i] = r.App(k)
	}
	return out
}

// A tenant cannot widen its share by spreading its flood over many apps: namespaces share the pool
// first, and a second tenant's single app gets half of it back.
func TestPoolNamespacesShareFirst(t *testing.T) {
	keys := []string{"victim/shop"}
	for i := range 10 {
		keys = append(keys, "flood/app-"+string(rune('a'+i)))
	}
	r := &poolRun{t: t, p: NewPool(PoolLimits{MaxRequests: 100}), apps: appsIn(keys...)}
	for range 30 {
		for i := 1; i <= 10; i++ {
			r.admit(i, 1)
		}
	}
	if c, _ := r.p.NamespaceUsage("flood"); c != 100 {
		t.Fatalf("the flood's namespace holds %d, want the whole free pool", c)
	}
	for i := range 50 {
		if !r.admit(0, 1) {
			t.Fatalf("the victim's request %d refused while the flood's namespace held more than half", i)
		}
	}
	if r.admit(0, 1) {
		t.Fatal("the victim's app went past its namespace's half")
	}
	if c, _ := r.p.NamespaceUsage("flood"); c != 50 {
		t.Errorf("the flood's namespace holds %d, want 50", c)
	}
	// The flood's apps, spread evenly, each kept about a tenth of their half.
	for i := 1; i <= 10; i++ {
		if c, _ := r.p.AppUsage(r.apps[i]); c < 4 || c > 6 {
			t.Errorf("flood app %d holds %d, want about 5 (evictions from the heaviest app first)", i, c)
		}
	}
	// At its share, the flood's namespace cannot take the victim's room back, whichever of its apps
	// asks (it may only rebalance among its own apps).
	for range 20 {
		r.admit(1+len(r.held)%10, 1)
	}
	if c, _ := r.p.NamespaceUsage("victim"); c != 50 {
		t.Errorf("the victim's namespace holds %d after the flood asked again, want its 50", c)
	}
	r.checkUsage()
}

// Within one namespace at its share, an app below its part of the namespace's room takes it from
// the namespace's heaviest app; another namespace's holds are not touched.
func TestPoolRebalancesInsideANamespace(t *testing.T) {
	r := &poolRun{t: t, p: NewPool(PoolLimits{MaxRequests: 40}), apps: appsIn("a/big", "a/small", "b/one")}
	for range 30 {
		r.admit(0, 1)
	}
	for range 20 {
		r.admit(2, 1)
	}
	if ca, _ := r.p.NamespaceUsage("a"); ca != 20 {
		t.Fatalf("namespace a holds %d, want its half (20)", ca)
	}
	for i := range 10 {
		if !r.admit(1, 1) {
			t.Fatalf("a/small's request %d refused below its part of a's half", i)
		}
	}
	if r.admit(1, 1) {
		t.Error("a/small went past half of its namespace's room")
	}
	if c, _ := r.p.AppUsage(r.apps[0]); c != 10 {
		t.Errorf("a/big holds %d, want 10", c)
	}
	if c, _ := r.p.NamespaceUsage("b"); c != 20 {
		t.Errorf("namespace b holds %d, want its 20 untouched", c)
	}
	r.checkUsage()
}
