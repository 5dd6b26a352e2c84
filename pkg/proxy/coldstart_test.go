package proxy_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/coldstart"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// A held request's cold start is recorded by the proxy (held, wake sent, forwarded) and each step is
// an event of the request's span at the step's time; a held request that times out ends the cold
// start as timed out. On both paths: on the event loops the wait runs off the loop and reports back,
// the forward is the loop's.
func TestColdStartStepsOfAHeldRequest(t *testing.T) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) { coldStartStepsOfAHeldRequest(t, fast) })
	}
}

func coldStartStepsOfAHeldRequest(t *testing.T, fast bool) {
	col, traced := tracedProxy(t, "grpc", nil)
	var tracker *coldstart.Tracker
	slow := entry("slow", "slow.example.com", "slow")
	slow.Timeouts.Readiness = 300 * time.Millisecond
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app"), slow},
		func(o *proxy.Options, s *proxy.Server) {
			traced(o, s)
			s.FastHTTP1 = fast
			var err error
			tracker, err = coldstart.New(coldstart.Options{Endpoints: o.Endpoints, Name: "interceptor-0", Log: testr.New(t)})
			if err != nil {
				t.Fatal(err)
			}
			o.ColdStarts = tracker
		})
	_, cancel := h.reg.Subscribe(8) // a scaler's wake stream: the wake is sent to someone
	defer cancel()
	_, be := backendFunc(t, traceBackend)
	traceID, _, tp := callerContext(t, "01")
	done := make(chan *http.Response, 1)
	go func() {
		resp, _, _ := sendTraced(t, h.client, h.url, "app.example.com", "/x", http.Header{"Traceparent": {tp}})
		done <- resp
	}()
	testenv.Eventually(t, 10*time.Second, "the request to be held", func() bool { _, held, _ := h.count("ns/app"); return held == 1 })
	time.Sleep(50 * time.Millisecond)
	h.src.Set(key("app"), be)
	<-done

	recs := tracker.ColdStartsSince(0, "").ColdStarts
	if len(recs) != 1 {
		t.Fatalf("records = %+v, want one", recs)
	}
	rec := recs[0]
	if rec.App != "ns/app" || rec.Outcome != admin.OutcomeForwarded || len(rec.Steps) != 3 ||
		rec.Steps[1].Name != admin.StepWakeSent || rec.Steps[2].Name != admin.StepForwarded {
		t.Fatalf("record = %+v, want Held, WakeSent, Forwarded", rec)
	}
	if d := rec.Step(admin.StepForwarded).Sub(rec.Steps[0].At); d < 50*time.Millisecond || d > 10*time.Second {
		t.Errorf("forwarded %v after held, want the ~50 ms it was held", d)
	}

	s := spanOf(t, col, traceID)
	var names []string
	for _, e := range s.GetEvents() {
		names = append(names, e.GetName())
	}
	want := []string{"cold_start.Held", "cold_start.WakeSent", "cold_start.Forwarded", proxy.EventForward}
	if len(names) != len(want) {
		t.Fatalf("span events %v, want %v", names, want)
	}
	for i, n := range want {
		if names[i] != n {
			t.Fatalf("span events %v, want %v", names, want)
		}
	}
	for i, step := range rec.Steps {
		if got := time.Unix(0, int64(s.GetEvents()[i].GetTimeUnixNano())); !got.Equal(step.At) {
			t.Errorf("event %s at %v, want the step's %v", names[i], got, step.At)
		}
	}

	// A request held past its readiness timeout ends its cold start as timed out.
	if code, _, _ := h.mustGet("slow.example.com", "/"); code != http.StatusGatewayTimeout {
		t.Fatalf("status %d, want 504", code)
	}
	last := tracker.ColdStartsSince(0, "").ColdStarts
	if got := last[len(last)-1]; got.App != "ns/slow" || got.Outcome != admin.OutcomeTimedOut {
		t.Errorf("record = %+v, want ns/slow timed out", got)
	}
}
