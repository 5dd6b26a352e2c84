package tablewatch

import (
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"

	"github.com/httpscale/httpscale/pkg/routing"
)

func testTable(t *testing.T, tag string) (*routing.Table, *corev1.ConfigMap, []*corev1.ConfigMap) {
	t.Helper()
	tbl, err := routing.NewTable([]routing.Entry{{
		Namespace: "apps", Name: "app", Hosts: []string{tag + ".example.com"}, Service: "svc", Port: 80,
	}})
	if err != nil {
		t.Fatal(err)
	}
	m, shards, err := routing.Encode(tbl, routing.DefaultMaxShardBytes)
	if err != nil {
		t.Fatal(err)
	}
	head, cms := routing.ToConfigMaps("ns", routing.DefaultBaseName, m, shards)
	// The stored table carries the version of its manifest.
	if tbl, err = routing.FromConfigMaps(head, cms); err != nil {
		t.Fatal(err)
	}
	return tbl, head, append(cms, head)
}

func newTestWatcher(t *testing.T) *Watcher {
	t.Helper()
	w, err := NewForClient(nil, Options{Namespace: "ns", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestLoadNeverGoesBackToAnOlderHead(t *testing.T) {
	w := newTestWatcher(t)
	a, headA, cmsA := testTable(t, "a")
	b, headB, cmsB := testTable(t, "b")
	headA.ResourceVersion, headB.ResourceVersion = "9", "10"

	// A direct read saw b; the informer's cache, a moment behind, still holds a.
	w.load("read", headB, cmsB, logr.Discard())
	w.load("watch", headA, cmsA, logr.Discard())
	if got := w.Version(); got != b.Version() {
		t.Fatalf("version after a lagging cache = %s, want %s (b)", got, b.Version())
	}
	// A newer head with a's content is a real change back.
	headA.ResourceVersion = "11"
	w.load("watch", headA, cmsA, logr.Discard())
	if got := w.Version(); got != a.Version() {
		t.Fatalf("version = %s, want %s (a)", got, a.Version())
	}
}

func TestLoadKeepsTheLastGoodTable(t *testing.T) {
	w := newTestWatcher(t)
	a, headA, cmsA := testTable(t, "a")
	headA.ResourceVersion = "5"
	w.load("read", headA, cmsA, logr.Discard())
	served := w.Table()

	for i, tc := range []struct {
		name  string
		head  func() *corev1.ConfigMap
		other []*corev1.ConfigMap
	}{
		{"no head", func() *corev1.ConfigMap { return nil }, cmsA},
		{"manifest not JSON", func() *corev1.ConfigMap {
			h := headA.DeepCopy()
			h.Data[routing.ManifestKey] = "{"
			return h
		}, cmsA},
		// The head of another table whose shards the cache does not hold (yet). (A head naming the
		// table served needs no shard: nothing is decoded again.)
		{"shards missing", func() *corev1.ConfigMap { _, h, _ := testTable(t, "b"); return h }, cmsA},
	} {
		h := tc.head()
		if h != nil {
			h.ResourceVersion = fmt.Sprint(6 + i)
		}
		w.load("watch", h, tc.other, logr.Discard())
		if w.Table() != served {
			t.Errorf("%s: the served table changed", tc.name)
		}
		if st := w.Status(); st.LastError == nil || st.Version != a.Version() {
			t.Errorf("%s: status = %+v, want the last error and version %s", tc.name, st, a.Version())
		}
		if err := w.Ready(); err != nil {
			t.Errorf("%s: Ready = %v, want nil (a good table is served)", tc.name, err)
		}
	}
}

// A fresh install has no table until the operator writes one: that is logged once at info level,
// counts no load error, and Ready says what is awaited.
func TestLoadBeforeTheFirstTableIsNotAnError(t *testing.T) {
	w := newTestWatcher(t)
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, prefix+" "+args) }, funcr.Options{})
	for range 3 {
		w.load("read", nil, nil, log)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], `"msg"="waiting for the operator to write the first routing table"`) {
		t.Errorf("log lines = %q, want one info line saying it waits for the operator", lines)
	}
	if got := testutil.ToFloat64(w.metrics.loadErrors.WithLabelValues(reasonIncomplete)); got != 0 {
		t.Errorf("%s{reason=incomplete} = %v, want 0", MetricLoadErrors, got)
	}
	if got := testutil.ToFloat64(w.metrics.failing); got != 0 {
		t.Errorf("%s = %v, want 0", MetricFailing, got)
	}
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "the operator has not written a routing table yet: no ConfigMap ns/httpscale-routing-table") {
		t.Errorf("Ready = %v, want it to say the operator has not written a table", err)
	}

	// Once a table was served, a missing head is a real problem again.
	_, head, cms := testTable(t, "a")
	w.load("read", head, cms, log)
	w.load("watch", nil, cms, logr.Discard())
	if got := testutil.ToFloat64(w.metrics.loadErrors.WithLabelValues(reasonIncomplete)); got != 1 {
		t.Errorf("%s{reason=incomplete} after the head vanished = %v, want 1", MetricLoadErrors, got)
	}
}
