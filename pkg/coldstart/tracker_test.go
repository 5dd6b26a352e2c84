package coldstart

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
)

type rig struct {
	t    *testing.T
	eps  *fakeEndpoints
	pods *fakePods
	net  *fakeNet
	tr   *Tracker
	reg  *prometheus.Registry
}

// newRig starts a Tracker (inside a synctest bubble) that stops at the end of the test.
func newRig(t *testing.T, change func(*Options)) *rig {
	t.Helper()
	r := &rig{t: t, eps: newFakeEndpoints(), pods: &fakePods{}, net: &fakeNet{}, reg: prometheus.NewRegistry()}
	o := Options{Endpoints: r.eps, Pods: r.pods, DialContext: r.net.dial, Registerer: r.reg, Log: logr.Discard(), Name: "interceptor-0", AppLabel: true}
	if change != nil {
		change(&o)
	}
	tr, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	r.tr = tr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = tr.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

func app(name string) App {
	return App{Key: "ns/" + name, Target: endpoints.ServiceKey{Namespace: "ns", Service: name, PortName: "http"}, Hold: 2 * time.Minute}
}

// after returns the steps of rec as offsets from Held, by name.
func after(rec admin.ColdStart) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, s := range rec.Steps {
		out[s.Name] = s.At.Sub(rec.Steps[0].At)
	}
	return out
}

func (r *rig) records() []admin.ColdStart { return r.tr.ColdStartsSince(0, "").ColdStarts }

// The whole story of a cold start of an app whose readiness probe runs every 10 s: the held request
// is forwarded 1 interval after the app listens, not at the kubelet's next probe, and every step is
// recorded.
func TestColdStartForwardsWhenTheAppAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		a := app("shop")
		held := time.Now()
		cs := r.tr.Begin(a, held)
		cs.WakeSent(held.Add(time.Millisecond), 1)
		waiter := make(chan *endpoints.Set, 1)
		go func() {
			s, _ := r.eps.WaitReady(t.Context(), a.Target)
			waiter <- s
		}()

		time.Sleep(800 * time.Millisecond) // KEDA, the scheduler, the sandbox
		pod := appPod("ns", "shop-1", "198.18.0.7", time.Now())
		r.pods.add(pod)
		ep := endpointOf(pod)
		r.eps.list(a.Target, nil, ep) // listed, not ready
		time.Sleep(1500 * time.Millisecond)
		listening := time.Now()
		r.net.set("198.18.0.7:8000", "up")
		s := <-waiter
		answered := time.Since(listening)
		if answered > Defaults.Interval || !s.Probed || s.Endpoints[0].Addr() != ep.Addr() {
			t.Fatalf("held request released %v after the app listened with %+v; want the probed endpoint within one interval (%v)", answered, s, Defaults.Interval)
		}
		cs.Forwarded(ep.Addr(), time.Now())
		synctest.Wait()
		if len(r.records()) != 0 {
			t.Fatal("the cold start ended before the kubelet's readiness was seen")
		}

		time.Sleep(10*time.Second - time.Since(held)) // the kubelet's next probe
		r.eps.list(a.Target, []endpoints.Endpoint{ep})
		synctest.Wait()
		recs := r.records()
		if len(recs) != 1 {
			t.Fatalf("got %d records, want 1", len(recs))
		}
		rec := recs[0]
		if rec.App != "ns/shop" || rec.Pod != "shop-1" || rec.Outcome != admin.OutcomeForwarded || rec.Interceptor != "interceptor-0" ||
			rec.Probe != "httpGet :8000/ready (the pod's readiness probe)" {
			t.Errorf("record = %+v", rec)
		}
		got := after(rec)
		for name, want := range map[string]time.Duration{
			admin.StepHeld: 0, admin.StepWakeSent: time.Millisecond, admin.StepEndpointListed: 800 * time.Millisecond,
			admin.StepEndpointReady: 10 * time.Second,
		} {
			if got[name] != want {
				t.Errorf("%s after %v, want %v", name, got[name], want)
			}
		}
		if d := got[admin.StepAppAnswered] - 2300*time.Millisecond; d < 0 || d > Defaults.Interval {
			t.Errorf("AppAnswered after %v, want within one interval of 2.3s", got[admin.StepAppAnswered])
		}
		if got[admin.StepForwarded] != got[admin.StepAppAnswered] {
			t.Errorf("Forwarded after %v, want when the app answered (%v)", got[admin.StepForwarded], got[admin.StepAppAnswered])
		}
		for _, name := range []string{admin.StepPodCreated, admin.StepPodScheduled, admin.StepContainersStarted} {
			i := slices.IndexFunc(rec.Steps, func(s admin.ColdStartStep) bool { return s.Name == name })
			if i < 0 || !rec.Steps[i].Coarse {
				t.Errorf("step %s missing or not marked coarse: %+v", name, rec.Steps)
			}
		}
		if !slices.IsSortedFunc(rec.Steps[1:], func(a, b admin.ColdStartStep) int { return a.At.Compare(b.At) }) {
			t.Errorf("steps not in time order: %+v", rec.Steps)
		}
		// Probes went to the pod's own address and readiness path only, every interval.
		for _, d := range r.net.dialled() {
			if d != "198.18.0.7:8000" {
				t.Fatalf("probe dialled %s", d)
			}
		}
		if n := len(r.net.dialled()); n < 25 || n > 32 {
			t.Errorf("%d probes in the 1.5 s the app took to listen, want about 30 (every 50 ms)", n)
		}
		if n := testutil.CollectAndCount(r.reg, MetricStepSeconds); n != 8 {
			t.Errorf("%d step series, want 8", n)
		}
		if r.tr.Active("ns/shop") != nil {
			t.Error("the cold start is still active")
		}
	})
}

func TestSuccessThresholdIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		a := app("shop")
		r.tr.Begin(a, time.Now())
		pod := appPod("ns", "shop-1", "198.18.0.7", time.Now())
		pod.Spec.Containers[0].ReadinessProbe.SuccessThreshold = 3
		r.pods.add(pod)
		r.net.set("198.18.0.7:8000", "up")
		start := time.Now()
		r.eps.list(a.Target, nil, endpointOf(pod))
		s, _ := r.eps.WaitReady(t.Context(), a.Target)
		if took := time.Since(start); s == nil || took < 2*Defaults.Interval {
			t.Fatalf("served after %v: %+v; want three passes in a row, 100 ms at least", took, s)
		}
	})
}

func TestNotProbed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*corev1.Pod, *endpoints.Endpoint, *App)
		reason string
	}{
		{
			// A hostile EndpointSlice: the address is not the pod's.
			name:   "an address that is not the named pod's",
			change: func(p *corev1.Pod, e *endpoints.Endpoint, _ *App) { e.IP = "10.96.0.1" },
			reason: "address 10.96.0.1 is not an IP of pod shop-1",
		},
		{
			name:   "another pod under the same name",
			change: func(p *corev1.Pod, e *endpoints.Endpoint, _ *App) { e.PodUID = "stale" },
			reason: "names pod shop-1 with UID stale",
		},
		{
			name:   "no pod named",
			change: func(p *corev1.Pod, e *endpoints.Endpoint, _ *App) { e.Pod, e.PodUID = "", "" },
			reason: "names no pod",
		},
		{
			name: "an exec readiness probe",
			change: func(p *corev1.Pod, _ *endpoints.Endpoint, _ *App) {
				p.Spec.Containers[0].ReadinessProbe.HTTPGet = nil
				p.Spec.Containers[0].ReadinessProbe.Exec = &corev1.ExecAction{Command: []string{"true"}}
			},
			reason: "container app: an exec readiness probe",
		},
		{
			name:   "an app forwarded through its Service's address",
			change: func(_ *corev1.Pod, _ *endpoints.Endpoint, a *App) { a.NoProbe = "forwarding.viaService" },
			reason: "not probed: forwarding.viaService",
		},
		{
			name:   "probing turned off",
			change: func(_ *corev1.Pod, _ *endpoints.Endpoint, a *App) { a.Probe = &routing.Probe{Off: true} },
			reason: "spec.coldStart.probe.disabled",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, nil)
				a := app("shop")
				pod := appPod("ns", "shop-1", "198.18.0.7", time.Now())
				ep := endpointOf(pod)
				tc.change(pod, &ep, &a)
				r.pods.add(pod)
				r.net.set("198.18.0.7:8000", "up")
				r.net.set("10.96.0.1:8000", "up")
				cs := r.tr.Begin(a, time.Now())
				r.eps.list(a.Target, nil, ep)
				time.Sleep(5 * time.Second)
				if d := r.net.dialled(); len(d) > 0 || len(r.eps.accepted()) > 0 {
					t.Fatalf("probed %v, answered %v; want nothing", d, r.eps.accepted())
				}
				// The kubelet's readiness still forwards it.
				ep.IP, ep.PodUID = "198.18.0.7", pod.UID
				r.eps.list(a.Target, []endpoints.Endpoint{ep})
				cs.Forwarded(ep.Addr(), time.Now())
				synctest.Wait()
				recs := r.records()
				if len(recs) != 1 || !strings.Contains(recs[0].Probe, tc.reason) || recs[0].Outcome != admin.OutcomeForwarded {
					t.Fatalf("records = %+v, want one forwarded, probe saying %q", recs, tc.reason)
				}
			})
		})
	}
}

// A pod that accepts connections and never answers costs at most PerApp probes at a time, each cut
// off at the timeout, and is asked less and less often.
func TestHangingPodIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		a := app("slow")
		cs := r.tr.Begin(a, time.Now())
		var eps []endpoints.Endpoint
		for i := range 4 {
			pod := appPod("ns", "slow-"+string(rune('a'+i)), "198.18.1."+string(rune('1'+i)), time.Now())
			r.pods.add(pod)
			r.net.set(pod.Status.PodIP+":8000", "hang")
			eps = append(eps, endpointOf(pod))
		}
		r.eps.list(a.Target, nil, eps...)
		for range 20 {
			time.Sleep(500 * time.Millisecond)
			if n := testutil.ToFloat64(r.tr.metrics.probes.WithLabelValues("timeout")); n > 0 {
				break
			}
		}
		peak := 0.0
		for range 100 {
			time.Sleep(100 * time.Millisecond)
			peak = max(peak, r.tr.metrics.slots())
		}
		if peak > float64(Defaults.PerApp) {
			t.Errorf("%v probes of one app in flight, want at most %d", peak, Defaults.PerApp)
		}
		// 4 pods, 2 at a time, each probe 1 s, then once a second at most: ~10 s of probes in ~12 s.
		if n := len(r.net.dialled()); n > 30 {
			t.Errorf("%d probes of hanging pods in 12 s, want them bounded (under 30)", n)
		}
		cs.Released(false)
		time.Sleep(Defaults.Linger + time.Second)
		synctest.Wait()
		if recs := r.records(); len(recs) != 1 || recs[0].Outcome != admin.OutcomeAbandoned {
			t.Fatalf("records = %+v, want one abandoned", recs)
		}
	})
}

// Many apps whose pods hang cannot keep another app's probe from running: slots are taken in turn.
func TestManyAppsProbingAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, func(o *Options) { o.MaxProbes = 4 })
		for i := range 50 {
			a := app("hostile-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
			r.tr.Begin(a, time.Now())
			pod := appPod("ns", a.Target.Service+"-1", "198.18.2."+string(rune('0'+i%10))+string(rune('0'+i/10)), time.Now())
			r.pods.add(pod)
			r.net.set(pod.Status.PodIP+":8000", "hang")
			r.eps.list(a.Target, nil, endpointOf(pod))
		}
		time.Sleep(3 * time.Second) // every slot taken by hanging probes, the rest queued
		if got := r.tr.metrics.slots(); got != 4 {
			t.Fatalf("%v slots in use, want all 4", got)
		}
		good := app("good")
		r.tr.Begin(good, time.Now())
		pod := appPod("ns", "good-1", "198.18.3.1", time.Now())
		r.pods.add(pod)
		r.net.set("198.18.3.1:8000", "up")
		start := time.Now()
		r.eps.list(good.Target, nil, endpointOf(pod))
		s, _ := r.eps.WaitReady(t.Context(), good.Target)
		// 50 apps queued ahead at most once each: 50 probes of 1 s over 4 slots.
		if took := time.Since(start); s == nil || took > 14*time.Second {
			t.Fatalf("the good app waited %v for a probe slot; want at most its turn (~13 s)", took)
		}
	})
}

func TestConfirmWithdrawsAnAnswerTheKubeletNeverConfirms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		a := app("shop")
		cs := r.tr.Begin(a, time.Now())
		pod := appPod("ns", "shop-1", "198.18.0.7", time.Now())
		r.pods.add(pod)
		r.net.set("198.18.0.7:8000", "up")
		ep := endpointOf(pod)
		r.eps.list(a.Target, nil, ep)
		s, _ := r.eps.WaitReady(t.Context(), a.Target)
		cs.Forwarded(s.Endpoints[0].Addr(), time.Now())
		time.Sleep(Defaults.Confirm - time.Second)
		if r.eps.Ready(a.Target) == nil {
			t.Fatal("answered endpoint withdrawn early")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if s := r.eps.Ready(a.Target); s != nil {
			t.Fatalf("Ready = %+v after Confirm without the kubelet's readiness, want none", s)
		}
		if recs := r.records(); len(recs) != 1 || after(recs[0])[admin.StepEndpointReady] != 0 {
			t.Fatalf("records = %+v", recs)
		}
	})
}

func TestWithoutAProberOnlyTheInterceptorsStepsAreRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, func(o *Options) { o.Endpoints = nil })
		a := app("shop")
		cs := r.tr.Begin(a, time.Now())
		cs.WakeSent(time.Now(), 0) // nobody listened: not a step
		time.Sleep(time.Second)
		cs2 := r.tr.Begin(a, time.Now())
		if cs2 != cs {
			t.Fatal("a second held request started another cold start")
		}
		cs.Forwarded("127.0.0.1:9000", time.Now())
		cs2.Released(true)
		recs := r.records()
		if len(recs) != 1 {
			t.Fatalf("records = %+v", recs)
		}
		if got := after(recs[0]); len(got) != 2 || got[admin.StepForwarded] != time.Second {
			t.Errorf("steps = %v, want Held and Forwarded after 1s", got)
		}
		// The admin view: since the last sequence, nothing new; another epoch gets everything.
		all := r.tr.ColdStartsSince(0, "")
		if again := r.tr.ColdStartsSince(all.Seq, all.Epoch); len(again.ColdStarts) != 0 {
			t.Errorf("since the last seq: %+v", again)
		}
		if other := r.tr.ColdStartsSince(all.Seq, "other"); len(other.ColdStarts) != 1 {
			t.Errorf("another epoch: %+v", other)
		}
	})
}

// An EndpointSlice that keeps naming new starting pods costs a bounded number of pod reads.
func TestPodReadsAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		a := app("churn")
		r.tr.Begin(a, time.Now())
		for i := range 200 {
			r.eps.list(a.Target, nil, endpoints.Endpoint{IP: "198.18.4.1", Port: 8000, Pod: fmt.Sprintf("churn-%d", i), PodUID: "u"})
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		r.pods.mu.Lock()
		reads := r.pods.reads
		r.pods.mu.Unlock()
		if reads != maxReads*Defaults.MaxEndpoints {
			t.Errorf("%d pod reads for 200 pods named one after another, want %d", reads, maxReads*Defaults.MaxEndpoints)
		}
	})
}

// A pod that keeps failing its probe is asked less and less often: every interval for 5 s, then every
// twentieth of the time beyond, at most once a second.
func TestFailingPodIsProbedLessOften(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		a := app("never")
		r.tr.Begin(a, time.Now())
		pod := appPod("ns", "never-1", "198.18.5.1", time.Now())
		r.pods.add(pod)
		r.net.status = http.StatusServiceUnavailable
		r.net.set("198.18.5.1:8000", "up")
		r.eps.list(a.Target, nil, endpointOf(pod))
		count := func() int { return len(r.net.dialled()) }
		time.Sleep(5 * time.Second)
		first := count()
		time.Sleep(20 * time.Second)
		next := count() - first
		time.Sleep(35 * time.Second)
		last := count() - first - next
		// 0-5 s every 50 ms: 100. 5-25 s: 20 in the first second, then 20/(t-5) a second: ~80.
		// 25-60 s once a second: 35.
		if first < 95 || first > 105 || next < 70 || next > 90 || last < 32 || last > 38 {
			t.Errorf("probes: %d in the first 5 s, %d in the next 20, %d in the next 35; want ~100, ~80, 35", first, next, last)
		}
	})
}

// A cold start whose held requests all went away while the app's slices list nothing waits for its
// linger on a timer, not on a goroutine of its own: a burst of requests to 200 apps that stay at
// zero leaves no goroutine per app behind its requests (each cost an 8 KiB stack for the whole
// linger, and its g for the life of the process). Each is still recorded at the end of its linger,
// with the steps the app's listing shows by then; a request held meanwhile follows the app again.
func TestLingeringColdStartsCostNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRig(t, nil)
		const n = 200
		held := time.Now()
		for i := range n {
			cs := r.tr.Begin(app(fmt.Sprintf("idle-%d", i)), held)
			cs.WakeSent(held, 1)
		}
		synctest.Wait()
		if got := runLoops(); got != n {
			t.Fatalf("%d run loops while %d apps have a held request, want one run loop each", got, n)
		}
		time.Sleep(200 * time.Millisecond) // the readiness timeout
		for i := range n {
			r.tr.Active(fmt.Sprintf("ns/idle-%d", i)).Released(true)
		}
		synctest.Wait()
		if got := runLoops(); got != 0 {
			t.Errorf("%d run loops left for %d lingering cold starts, want none", got, n)
		}
		if recs := r.records(); len(recs) != 0 {
			t.Fatalf("%d cold starts recorded before their linger passed", len(recs))
		}

		// App 0's pod is listed while it lingers; app 1 gets a request again and is followed.
		pod := appPod("ns", "idle-0-1", "198.18.3.1", time.Now())
		r.pods.add(pod)
		r.eps.list(app("idle-0").Target, nil, endpointOf(pod))
		again := r.tr.Begin(app("idle-1"), time.Now())
		pod1 := appPod("ns", "idle-1-1", "198.18.3.2", time.Now())
		r.pods.add(pod1)
		r.net.set("198.18.3.2:8000", "up")
		r.eps.list(app("idle-1").Target, nil, endpointOf(pod1))
		time.Sleep(time.Second)
		if ready := r.eps.Ready(app("idle-1").Target); ready == nil || ready.Endpoints[0].Addr() != "198.18.3.2:8000" {
			t.Fatalf("the app held again was not probed: ready %+v", ready)
		}
		again.Forwarded("198.18.3.2:8000", time.Now())

		time.Sleep(Defaults.Linger)
		synctest.Wait()
		if recs := r.records(); len(recs) != n-1 {
			t.Fatalf("%d records after the linger, want %d (all but the app forwarded to)", len(recs), n-1)
		}
		r.eps.list(app("idle-1").Target, []endpoints.Endpoint{endpointOf(pod1)}) // the kubelet confirms
		synctest.Wait()
		recs := r.records()
		if len(recs) != n {
			t.Fatalf("%d records after the linger, want %d", len(recs), n)
		}
		for _, rec := range recs {
			steps := after(rec)
			switch rec.App {
			case "ns/idle-0":
				if rec.Outcome != admin.OutcomeTimedOut || steps[admin.StepEndpointListed] != 200*time.Millisecond {
					t.Errorf("record of the app listed while it lingered: %+v, want timed out with EndpointListed after 200ms", rec)
				}
			case "ns/idle-1":
				if rec.Outcome != admin.OutcomeForwarded || rec.Pod != "idle-1-1" {
					t.Errorf("record of the app held again: %+v, want forwarded to idle-1-1", rec)
				}
			default:
				if rec.Outcome != admin.OutcomeTimedOut || len(rec.Steps) != 2 || steps[admin.StepWakeSent] != 0 {
					t.Errorf("record %+v, want timed out with Held and WakeSent", rec)
				}
			}
		}
		if got := runLoops(); got != 0 {
			t.Errorf("%d run loops left after every cold start ended", got)
		}
		r.eps.mu.Lock()
		defer r.eps.mu.Unlock()
		for i := range n {
			if k := app(fmt.Sprintf("idle-%d", i)).Target; r.eps.unfollowed[k] != 1 {
				t.Fatalf("%s unfollowed %d times once its cold start ended, want once", k, r.eps.unfollowed[k])
			}
		}
	})
}

// runLoops counts the goroutines in a cold start's run loop.
func runLoops() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "coldstart.(*ColdStart).run(")
		}
		buf = make([]byte, 2*len(buf))
	}
}
