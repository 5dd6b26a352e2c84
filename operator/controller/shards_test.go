package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/tablewatch"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

// shardEntries is the shard size the spec forces, so that a few dozen objects span many shards.
const shardEntries = 4

var _ = Describe("A routing table of several shards", func() {
	var readers []*tablewatch.Watcher

	BeforeEach(func() {
		op.stop()
		DeferCleanup(func() { op = startOperator(defaultOptions()) })
		o := defaultOptions()
		o.MaxShardEntries = shardEntries
		op = startOperator(o)
		DeferCleanup(func() { op.stop() })

		// Two readers as interceptors run them: one that follows every version, one that starts late.
		readers = []*tablewatch.Watcher{startReader()}
		DeferCleanup(func() { readers = nil })
	})

	It("rewrites one shard per object change, and every reader serves the table a fresh read gives", func() {
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		createService(ns, "app")
		createDeployment(ns, "app")
		deleteObjectsAfterSpec(ns)
		objs := map[string]*v1.HTTPScaledObject{}
		newObj := func(name string) *v1.HTTPScaledObject {
			h := hso(ns, name, name+".shards.example.com")
			h.Spec.ScaleTargetRef.Name, h.Spec.ScaleTargetRef.Service = "app", "app"
			return h
		}
		for i := range 40 {
			h := newObj(fmt.Sprintf("app-%02d", i))
			Expect(k8s.Create(ctx, h)).To(Succeed())
			objs[h.Name] = h
		}
		// The first table of small shards rewrites every entry, other specs' objects included: give it
		// the time a loaded CI machine needs.
		Eventually(tableMismatch(ns, objs)).WithTimeout(2 * time.Minute).Should(BeEmpty())
		readers = append(readers, startReader())
		expectReadersConsistent(readers)
		m := manifest()
		Expect(len(m.Shards)).To(BeNumerically(">=", 8), "the spec wants a table of many shards")

		// One change each: a new object (in a bucket with room, so that the bucket count stays), a
		// spec change, a deletion.
		steps := []struct {
			name   string
			act    func()
			exists func() bool
		}{
			{"create", func() {
				h := newObj(nameWithRoom(m, ns))
				Expect(k8s.Create(ctx, h)).To(Succeed())
				objs[h.Name] = h
			}, nil},
			{"update", func() {
				update(objs["app-07"], func(h *v1.HTTPScaledObject) { h.Spec.Hosts = []v1.Host{"moved.shards.example.com"} })
			}, nil},
			{"delete", func() {
				Expect(k8s.Delete(ctx, objs["app-11"])).To(Succeed())
				delete(objs, "app-11")
			}, nil},
		}
		for _, step := range steps {
			By(step.name)
			before, beforeVersion := shardVersions(), manifest().Version
			step.act()
			Eventually(func() string { return manifest().Version }).ShouldNot(Equal(beforeVersion))
			Eventually(tableMismatch(ns, objs)).Should(BeEmpty())
			after, m2 := shardVersions(), manifest()
			written, removed := 0, 0
			for name, rv := range after {
				if before[name] != rv {
					written++
				}
			}
			for name := range before {
				if _, ok := after[name]; !ok {
					removed++
				}
			}
			Expect(m2.Buckets).To(Equal(m.Buckets), "the bucket count must not change here")
			Expect(written).To(BeNumerically("<=", 1), "%s: shard ConfigMaps created or changed", step.name)
			Expect(removed).To(BeNumerically("<=", 1), "%s: shard ConfigMaps removed", step.name)
			Expect(written+removed).To(BeNumerically(">=", 1), "%s: the change must reach the table", step.name)
			expectReadersConsistent(readers)
		}

		By("growing past the shard size, which doubles the buckets and moves entries between shards")
		for i := 40; i < 40+len(m.Shards)*shardEntries; i++ {
			h := newObj(fmt.Sprintf("app-%02d", i))
			Expect(k8s.Create(ctx, h)).To(Succeed())
			objs[h.Name] = h
		}
		Eventually(tableMismatch(ns, objs)).WithTimeout(2 * time.Minute).Should(BeEmpty())
		Expect(manifest().Buckets).To(BeNumerically(">", m.Buckets))
		for _, ref := range manifest().Shards {
			Expect(ref.Entries).To(BeNumerically("<=", shardEntries))
		}
		expectReadersConsistent(readers)
	})
})

// deleteObjectsAfterSpec deletes the HTTPScaledObjects of ns when the spec ends and waits until they
// are gone, so that specs that make many leave none behind for later ones (a new leader reconciles,
// and a new table writer rewrites, every existing object).
//
// The objects are deleted one request each (16 at a time), not with one delete-collection request:
// the API server ends a request after 60s, and on a loaded machine marking 200 objects with
// finalizers deleted in one request took longer ("stream error: INTERNAL_ERROR").
func deleteObjectsAfterSpec(ns string) {
	DeferCleanup(func() {
		var list v1.HTTPScaledObjectList
		Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
		work := make(chan *v1.HTTPScaledObject)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				defer GinkgoRecover()
				for h := range work {
					Expect(client.IgnoreNotFound(k8s.Delete(ctx, h))).To(Succeed())
				}
			})
		}
		for i := range list.Items {
			work <- &list.Items[i]
		}
		close(work)
		wg.Wait()
		Eventually(func() int {
			var list v1.HTTPScaledObjectList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			return len(list.Items)
		}).WithTimeout(2 * time.Minute).Should(BeZero())
	})
}

// startReader runs an interceptor's table watcher against the suite's API server.
func startReader() *tablewatch.Watcher {
	GinkgoHelper()
	w, err := tablewatch.NewForClient(kubernetes.NewForConfigOrDie(restCfg), tablewatch.Options{
		Namespace: installNS, Base: tableName, Registerer: prometheus.NewRegistry(),
	})
	Expect(err).NotTo(HaveOccurred())
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Start(rctx) }()
	DeferCleanup(func() { cancel(); Expect(<-done).To(Succeed()) })
	return w
}

// expectReadersConsistent waits until every reader serves the stored table and checks that each
// holds exactly the entries, and routes every host, as a fresh decode of the ConfigMaps does.
func expectReadersConsistent(readers []*tablewatch.Watcher) {
	GinkgoHelper()
	fresh, err := readTable(ctx)
	Expect(err).NotTo(HaveOccurred())
	for i, r := range readers {
		Eventually(r.Version).Should(Equal(fresh.Version()), "reader %d", i)
		got := r.Table()
		Expect(got.Entries()).To(Equal(fresh.Entries()), "reader %d entries", i)
		for e := range fresh.All() {
			for _, host := range e.Hosts {
				if strings.HasPrefix(host, "*") {
					host = "any" + strings.TrimPrefix(host, "*") // a name the wildcard (or "*") matches
				}
				for _, path := range append([]string{"/"}, e.PathPrefixes...) {
					want, wantOK := fresh.Match(host, path, nil)
					have, ok := got.Match(host, path, nil)
					Expect(ok).To(Equal(wantOK), "reader %d routes %s%s", i, host, path)
					if ok {
						Expect(have.Key()).To(Equal(want.Key()), "reader %d routes %s%s", i, host, path)
					}
				}
			}
		}
	}
}

// tableMismatch describes how the stored table differs from objs among the entries of namespace ns
// (each at its current generation's hosts), or returns "" when it holds exactly those.
func tableMismatch(ns string, objs map[string]*v1.HTTPScaledObject) func() string {
	return func() string {
		t, err := readTable(ctx)
		if err != nil {
			return fmt.Sprintf("reading the table: %v", err)
		}
		var problems []string
		seen := 0
		for e := range t.All() {
			if e.Namespace != ns {
				continue
			}
			h, ok := objs[e.Name]
			if !ok {
				problems = append(problems, "unexpected entry "+e.Name)
				continue
			}
			seen++
			cur := &v1.HTTPScaledObject{}
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(h), cur); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", e.Name, err))
			} else if e.Generation != cur.Generation {
				problems = append(problems, fmt.Sprintf("%s at generation %d, object at %d", e.Name, e.Generation, cur.Generation))
			}
		}
		if seen != len(objs) {
			problems = append(problems, fmt.Sprintf("%d of %d objects in the table (%d entries in all)", seen, len(objs), t.Len()))
		}
		return strings.Join(problems, "; ")
	}
}

func manifest() routing.Manifest {
	GinkgoHelper()
	head := &corev1.ConfigMap{}
	Expect(k8s.Get(ctx, client.ObjectKey{Namespace: installNS, Name: tableName}, head)).To(Succeed())
	var m routing.Manifest
	Expect(json.Unmarshal([]byte(head.Data[routing.ManifestKey]), &m)).To(Succeed())
	return m
}

// shardVersions maps every shard ConfigMap's name to its resourceVersion.
func shardVersions() map[string]string {
	GinkgoHelper()
	var list corev1.ConfigMapList
	Expect(k8s.List(ctx, &list, client.InNamespace(installNS), client.MatchingLabels{routing.LabelTable: tableName})).To(Succeed())
	out := map[string]string{}
	for _, cm := range list.Items {
		if cm.Name != tableName {
			out[cm.Name] = cm.ResourceVersion
		}
	}
	return out
}

// nameWithRoom returns an object name whose bucket (FNV-1a of "namespace/name", the storage format's
// assignment) holds fewer than shardEntries entries in m.
func nameWithRoom(m routing.Manifest, ns string) string {
	GinkgoHelper()
	held := map[string]int{}
	for _, ref := range m.Shards {
		held[ref.Name] = ref.Entries
	}
	for i := range 1000 {
		name := fmt.Sprintf("new-%d", i)
		h := fnv.New64a()
		h.Write([]byte(ns + "/" + name))
		if held[fmt.Sprint(h.Sum64()&uint64(m.Buckets-1))] < shardEntries {
			return name
		}
	}
	Fail("no name with room")
	return ""
}
