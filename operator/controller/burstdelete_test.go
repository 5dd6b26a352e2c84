package controller_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/sets"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

var _ = Describe("Objects deleted during a burst", func() {
	// In a burst the routing controller is busy with every new object's finalizer patch. An object
	// deleted before its patch, or routed and then deleted, must never be gone from the API while
	// the stored table still routes it, and must leave the table in the end.
	It("leave the API only after they left the routing table", func() {
		const n = 200
		ns := ginkgoenv.NewNamespace(context.Background(), k8s, "app-")
		deleteObjectsAfterSpec(ns)
		createService(ns, "burst")
		createDeployment(ns, "burst")
		name := func(i int) string { return fmt.Sprintf("app-%05d", i) }
		key := func(i int) string { return ns + "/" + name(i) }
		obj := func(i int) *v1.HTTPScaledObject {
			h := hso(ns, name(i), name(i)+"."+ns+".example.com") // hosts no other spec claims
			h.Spec.ScaleTargetRef.Name, h.Spec.ScaleTargetRef.Service = "burst", "burst"
			return h
		}
		// Every 10th object is deleted right after its create (mostly before it is routed); every
		// 10th+5 once the table routes it (with its finalizer on).
		early, late, kept := sets.New[string](), sets.New[string](), sets.New[string]()
		for i := range n {
			switch i % 10 {
			case 0:
				early.Insert(key(i))
			case 5:
				late.Insert(key(i))
			default:
				kept.Insert(key(i))
			}
		}

		var violations []string
		var mu sync.Mutex
		lateDeleted := sets.New[string]()
		// check reads the objects first, then the table: an object missing from the first read had
		// its finalizer removed before the table was read, so that table must not route it.
		// Only objects whose create had returned before the list count: one created between the list
		// and the table read (and routed at once by an idle writer) is absent from the list without
		// having left the API.
		created := sets.New[string]()
		check := func() (routed, existing sets.Set[string]) {
			mu.Lock()
			createdBefore := created.Clone()
			mu.Unlock()
			var list v1.HTTPScaledObjectList
			Expect(k8s.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			existing = sets.New[string]()
			for i := range list.Items {
				existing.Insert(ns + "/" + list.Items[i].Name)
			}
			routed = sets.New[string]()
			t, err := readTable(ctx)
			if errors.Is(err, routing.ErrIncomplete) {
				return routed, existing // no table written yet (the spec ran first)
			}
			Expect(err).NotTo(HaveOccurred())
			for k := range early.Union(late).Union(kept) {
				if _, ok := t.Lookup(k); ok {
					routed.Insert(k)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for k := range early.Union(lateDeleted) {
				if createdBefore.Has(k) && !existing.Has(k) && routed.Has(k) {
					violations = append(violations, k)
				}
			}
			return routed, existing
		}

		stop := make(chan struct{})
		checked := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(checked)
			for {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
					check()
				}
			}
		}()
		work := make(chan int)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				defer GinkgoRecover()
				for i := range work {
					h := obj(i)
					Expect(k8s.Create(ctx, h)).To(Succeed())
					mu.Lock()
					created.Insert(key(i))
					mu.Unlock()
					if early.Has(key(i)) {
						Expect(client.IgnoreNotFound(k8s.Delete(ctx, h))).To(Succeed())
					}
				}
			})
		}
		for i := range n {
			work <- i
		}
		close(work)
		wg.Wait()
		close(stop)
		<-checked

		Eventually(func(g Gomega) {
			routed, existing := check()
			for k := range late {
				if routed.Has(k) && !lateDeleted.Has(k) {
					var i int
					_, err := fmt.Sscanf(k, ns+"/app-%05d", &i)
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(client.IgnoreNotFound(k8s.Delete(ctx, obj(i)))).To(Succeed())
					mu.Lock()
					lateDeleted.Insert(k)
					mu.Unlock()
				}
			}
			g.Expect(lateDeleted.Len()).To(Equal(late.Len()), "late deletions")
			g.Expect(routed.Intersection(kept).Len()).To(Equal(kept.Len()), "kept objects routed")
			g.Expect(routed.Difference(kept).UnsortedList()).To(BeEmpty(), "deleted objects still routed")
			g.Expect(existing.Difference(kept).UnsortedList()).To(BeEmpty(), "deleted objects still in the API")
		}).WithTimeout(2 * time.Minute).WithPolling(20 * time.Millisecond).Should(Succeed())
		mu.Lock()
		defer mu.Unlock()
		Expect(violations).To(BeEmpty(), "objects gone from the API while the stored table still routed them")
	})
})
