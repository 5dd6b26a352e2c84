package tablewatch

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestStalenessVerdicts walks the staleness state machine through what a replica meets, with the
// clock passed in.
func TestStalenessVerdicts(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := &staleness{bound: 10 * time.Second}
	step := func(name string, v verdict, stale, changed bool) {
		t.Helper()
		if v.stale != stale || v.changed != changed {
			t.Fatalf("%s: stale %v changed %v, want %v %v (%+v)", name, v.stale, v.changed, stale, changed, v)
		}
	}
	step("first head", s.headDelivered("100", at(0)), false, false)
	step("API server agrees", s.probed("100", nil, at(time.Second)), false, false)
	step("no head at all", s.probed("", nil, at(2*time.Second)), false, false)

	// A newer head the watch does not deliver: stale once the bound has passed, not before.
	v := s.probed("105", nil, at(3*time.Second))
	step("newer head seen", v, false, false)
	if v.behind != 0 {
		t.Errorf("behind %v at first sight, want 0", v.behind)
	}
	step("still newer, within the bound", s.probed("105", nil, at(12*time.Second)), false, false)
	v = s.probed("107", nil, at(13*time.Second)) // an even newer one: the table has been behind since 3s
	step("bound passed", v, true, true)
	if v.behind != 10*time.Second {
		t.Errorf("behind %v, want 10s", v.behind)
	}
	if err := s.err(at(14 * time.Second)); err == nil || !strings.Contains(err.Error(), "newer head (resourceVersion 107) for 11s") {
		t.Errorf("err = %v", err)
	}

	// The API server cannot be reached: nothing confirmed, readiness no longer fails for it.
	v = s.probed("", errors.New("connection refused"), at(15*time.Second))
	step("probe fails", v, false, true)
	if !v.unconfirmed {
		t.Error("a failed probe while behind is not reported as unconfirmed")
	}
	step("probe answers again", s.probed("107", nil, at(16*time.Second)), true, true)

	// The watch delivers a head, but an older one than the API server's: still stale.
	step("older head delivered", s.headDelivered("106", at(17*time.Second)), true, false)
	// The watch catches up: ready at once, without waiting for a probe.
	step("watch catches up", s.headDelivered("107", at(18*time.Second)), false, true)
	if err := s.err(at(18 * time.Second)); err != nil {
		t.Errorf("after catching up: %v", err)
	}
	// A later newer head starts a new count.
	step("next change", s.probed("110", nil, at(19*time.Second)), false, false)
	step("not yet", s.probed("110", nil, at(28*time.Second)), false, false)
	step("again stale", s.probed("110", nil, at(29*time.Second)), true, true)
	// The head deleted (the fleet uninstalled): nothing newer exists.
	step("head gone", s.probed("", nil, at(30*time.Second)), false, true)
}

func TestProbeInterval(t *testing.T) {
	for bound, want := range map[time.Duration]time.Duration{
		2 * time.Second: time.Second, 8 * time.Second: 2 * time.Second, 30 * time.Second: 7500 * time.Millisecond, time.Hour: 30 * time.Second,
	} {
		if got := ProbeInterval(bound); got != want {
			t.Errorf("ProbeInterval(%v) = %v, want %v", bound, got, want)
		}
	}
}

// TestProbeClientUsesAFreshConnectionEachTime: a probe must not ride on a connection that may have
// gone silent, so every probe is a new HTTP/1.1 connection, closed after its answer.
func TestProbeClientUsesAFreshConnectionEachTime(t *testing.T) {
	var conns atomic.Int32
	var protos sync.Map
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"head","resourceVersion":"7"}}`)
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	cs, err := ProbeClient(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		cm, err := cs.CoreV1().ConfigMaps("ns").Get(context.Background(), "head", metav1.GetOptions{})
		if err != nil || cm.ResourceVersion != "7" {
			t.Fatalf("probe: %v %v", cm, err)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("3 probes used %d connections, want 3", n)
	}
	protos.Range(func(k, _ any) bool {
		if k != "HTTP/1.1" {
			t.Errorf("a probe spoke %s, want HTTP/1.1 (HTTP/2 would share one connection)", k)
		}
		return true
	})
}
