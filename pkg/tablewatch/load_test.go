package tablewatch

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
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
		{"shards missing", func() *corev1.ConfigMap { return headA.DeepCopy() }, nil},
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
