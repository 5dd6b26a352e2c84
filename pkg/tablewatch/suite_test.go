package tablewatch_test

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

func TestTableWatch(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "tablewatch suite")
}

var (
	restCfg *rest.Config
	cs      kubernetes.Interface
)

var suite = ginkgoenv.ForSuite(func(cfg *rest.Config) {
	restCfg = cfg
	var err error
	cs, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
})

// table builds a table of n apps whose hosts carry tag, so tables with different tags differ.
func table(tag string, n int) *routing.Table {
	entries := make([]routing.Entry, n)
	for i := range entries {
		entries[i] = routing.Entry{
			Namespace: "apps", Name: fmt.Sprintf("app-%d", i),
			Hosts:   []string{fmt.Sprintf("app-%d.%s.example.com", i, tag)},
			Service: fmt.Sprintf("svc-%d", i), Port: 80,
		}
	}
	t, err := routing.NewTable(entries)
	Expect(err).NotTo(HaveOccurred())
	// Return the table as a reader sees it once encode stored it: with the version of its manifest.
	m, s, err := routing.Encode(t, 250)
	Expect(err).NotTo(HaveOccurred())
	data := map[string][]byte{}
	for _, sh := range s {
		data[sh.Name] = sh.Data
	}
	stored, err := routing.Decode(m, data)
	Expect(err).NotTo(HaveOccurred())
	return stored
}

// encode lays t out as ConfigMaps with shards small enough that a table of a few dozen apps needs
// several of them.
func encode(ns, base string, t *routing.Table) (head *corev1.ConfigMap, shards []*corev1.ConfigMap) {
	m, s, err := routing.Encode(t, 250)
	Expect(err).NotTo(HaveOccurred())
	head, shards = routing.ToConfigMaps(ns, base, m, s)
	return head, shards
}

// writeShards creates shard ConfigMaps (AlreadyExists is fine: the name fixes the content).
func writeShards(ctx context.Context, shards []*corev1.ConfigMap) {
	for _, cm := range shards {
		_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	}
}

// writeHead creates or replaces the head ConfigMap.
func writeHead(ctx context.Context, head *corev1.ConfigMap) {
	cur, err := cs.CoreV1().ConfigMaps(head.Namespace).Get(ctx, head.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cs.CoreV1().ConfigMaps(head.Namespace).Create(ctx, head, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		return
	}
	Expect(err).NotTo(HaveOccurred())
	head = head.DeepCopy()
	head.ResourceVersion = cur.ResourceVersion
	_, err = cs.CoreV1().ConfigMaps(head.Namespace).Update(ctx, head, metav1.UpdateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

// writeTable stores t the way the operator does: shards, then head, then deletes stale shards.
func writeTable(ctx context.Context, ns, base string, t *routing.Table) {
	head, shards := encode(ns, base, t)
	Expect(len(shards)).To(BeNumerically(">", 1), "the test wants a table of several shards")
	writeShards(ctx, shards)
	writeHead(ctx, head)
	keep := map[string]bool{head.Name: true}
	for _, s := range shards {
		keep[s.Name] = true
	}
	list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: routing.LabelTable + "=" + base})
	Expect(err).NotTo(HaveOccurred())
	for _, cm := range list.Items {
		if !keep[cm.Name] {
			Expect(cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{})).To(Succeed())
		}
	}
}

// metricValue returns the value of the sample of name whose labels include labels, or -1 when there
// is none.
func metricValue(reg *prometheus.Registry, name string, labels map[string]string) float64 {
	families, err := reg.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, labels) {
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				}
			}
		}
	}
	return -1
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			found++
		}
	}
	return found == len(want)
}
