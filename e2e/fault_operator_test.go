//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/routing"
)

// The elected operator is killed (SIGKILL: no lease released, no step finished) in the middle of a
// burst of 1,000 new HTTPScaledObjects. Whichever replica leads next (the other one once the lease
// expires, or the killed one restarted in place) must route every object and report it Ready, and
// leave nothing behind: every routing-table shard ConfigMap is one the head names, and every
// ScaledObject belongs to an object and every object has one.
var _ = Describe("Fault: the operator leader killed in the middle of a 1,000-object burst", Label("fault"), Ordered, func() {
	const burst = 1000
	sc := setUpScenario("opkill", func(ctx SpecContext, e *scenarioEnv) {
		// One Service for all: the objects differ by host and workload only. Each object scales a
		// Deployment of its own at zero (one that does not exist makes the object TargetNotFound).
		_, svc := f.SampleApp(e.ns, "shared", 0)
		Expect(f.Client.Create(ctx, svc)).To(Succeed())
		inParallel(burst, func(i int) {
			dep, _ := f.SampleApp(e.ns, burstName(i), 0)
			Expect(f.Client.Create(ctx, dep)).To(Succeed())
		})
	})

	It("routes every object and reports it Ready after the new leader takes over, with no orphans", func(ctx SpecContext) {
		// Should the spec fail before it deletes the burst, the namespace's deletion would leave KEDA
		// minutes of work on the 1,000 ScaledObjects while the specs that run next wait for it to
		// scale their apps from zero (seen: the API server outage and KEDA-away specs run right
		// after a failure here had their held requests time out, KEDA never reconciling their
		// ScaledObjects).
		deleting := false
		DeferCleanup(func(ctx SpecContext) {
			if !deleting {
				deleteBurst(ctx, sc.ns, burst)
			}
		})
		leader := operatorLeader(ctx)
		var created atomic.Int64
		killAt := int64(burst * 3 / 10)
		var killed time.Time
		var createdAtKill int64
		killDone := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(killDone)
			for created.Load() < killAt && ctx.Err() == nil {
				time.Sleep(5 * time.Millisecond)
			}
			createdAtKill = created.Load()
			By(fmt.Sprintf("killing the leader %s with SIGKILL after %d creates", leader.Name, createdAtKill))
			killed = time.Now()
			_, err := localcluster.SignalContainer(leader.ContainerIDs[0], syscall.SIGKILL)
			Expect(err).NotTo(HaveOccurred())
		}()

		start := time.Now()
		var failures []string
		var mu sync.Mutex
		inParallel(burst, func(i int) {
			if err := createBurstObject(ctx, sc.ns, sc.host, i); err != nil {
				mu.Lock()
				failures = append(failures, err.Error())
				mu.Unlock()
				return
			}
			created.Add(1)
		})
		lastCreate := time.Now()
		<-killDone
		Expect(failures).To(BeEmpty(), "creates refused (the webhook fails closed while no operator serves it: the client retries those)")

		By("every object routed by every interceptor and Ready")
		var notReady int
		Eventually(func(g Gomega) {
			var list httpscalev1alpha1.HTTPScaledObjectList
			g.Expect(f.Client.List(ctx, &list, client.InNamespace(sc.ns))).To(Succeed())
			g.Expect(list.Items).To(HaveLen(burst))
			notReady = 0
			var first string
			for i := range list.Items {
				h := &list.Items[i]
				if readyCondition(h) != "True" || h.Status.Routing == nil || h.Status.Routing.InterceptorsReady != h.Status.Routing.InterceptorsTotal ||
					h.Status.ObservedGeneration != h.Generation {
					if notReady++; first == "" {
						first = fmt.Sprintf("%s: %+v, routing %+v", h.Name, h.Status.Conditions, h.Status.Routing)
					}
				}
			}
			g.Expect(notReady).To(BeZero(), "objects not yet routed and Ready, the first: %s", first)
		}).WithContext(ctx).WithTimeout(10 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		allReady := time.Now()
		newLeader := operatorLeader(ctx)

		By("no orphaned shard ConfigMap or ScaledObject")
		Eventually(orphanShards).WithContext(ctx).WithTimeout(time.Minute).Should(BeEmpty(), "shard ConfigMaps the head does not name")
		var sos kedav1alpha1.ScaledObjectList
		Expect(f.Client.List(ctx, &sos, client.InNamespace(sc.ns))).To(Succeed())
		var names []string
		for _, so := range sos.Items {
			names = append(names, so.Name)
		}
		slices.Sort(names)
		want := make([]string, burst)
		for i := range want {
			want[i] = burstName(i)
		}
		slices.Sort(want)
		Expect(names).To(Equal(want), "one ScaledObject per object, none other")

		report("operator leader killed (SIGKILL) in a burst of 1,000", "killed %s after %d creates; the burst's creates took %s (%d/s); every object routed by every interceptor and Ready %s after the kill, %s after the last create; leader then %s; no orphaned shard ConfigMap or ScaledObject",
			leader.Name, createdAtKill, lastCreate.Sub(start).Round(time.Millisecond), int(float64(burst)/lastCreate.Sub(start).Seconds()),
			allReady.Sub(killed).Round(time.Millisecond), allReady.Sub(lastCreate).Round(time.Millisecond), newLeader.Name)

		By("deleting the burst: the objects leave the API once the table no longer routes them")
		deleting = true
		deleteBurst(ctx, sc.ns, burst)
	})
})

func burstName(i int) string { return fmt.Sprintf("burst-%04d", i) }

// deleteBurst deletes the n objects of the burst in ns, waits until they have left the API (each
// once the routing table no longer routes it) and until KEDA has let go of their ScaledObjects.
func deleteBurst(ctx context.Context, ns string, n int) {
	GinkgoHelper()
	// One request per object: a delete-collection of 1,000 objects, each with a finalizer the
	// operator releases, outlasted the API server's 60 s request timeout.
	inParallel(n, func(i int) {
		obj := &httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: burstName(i)}}
		if err := f.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			Expect(err).NotTo(HaveOccurred())
		}
	})
	Eventually(func() (int, error) {
		var list httpscalev1alpha1.HTTPScaledObjectList
		err := f.Client.List(ctx, &list, client.InNamespace(ns))
		return len(list.Items), err
	}).WithContext(ctx).WithTimeout(5 * time.Minute).WithPolling(2 * time.Second).Should(BeZero())

	// KEDA tears down the 1,000 ScaledObjects (and their HPAs) at its own pace, minutes at this
	// size; the specs that run next need KEDA's attention for their own ScaledObjects (one of
	// them waited 60 s for KEDA to report a new ScaledObject inactive). It returns once KEDA has
	// let go of every one.
	By("KEDA done with the burst's ScaledObjects")
	Eventually(func() (int, error) {
		var list kedav1alpha1.ScaledObjectList
		err := f.Client.List(ctx, &list, client.InNamespace(ns))
		return len(list.Items), err
	}).WithContext(ctx).WithTimeout(10 * time.Minute).WithPolling(2 * time.Second).Should(BeZero())
}

// inParallel calls do(0) … do(n-1) from 16 goroutines and returns once all are done.
func inParallel(n int, do func(i int)) {
	work := make(chan int)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			defer GinkgoRecover()
			for i := range work {
				do(i)
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
}

// createBurstObject creates object i of the burst, retrying while the admission webhook cannot be
// reached (no operator replica serves it for a moment after the kill) as a client with retries does.
func createBurstObject(ctx context.Context, ns, host string, i int) error {
	hso := &httpscalev1alpha1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: burstName(i), Namespace: ns},
		Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
			Hosts: []httpscalev1alpha1.Host{httpscalev1alpha1.Host(burstName(i) + "." + host)},
			ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{
				APIVersion: "apps/v1", Kind: "Deployment", Name: burstName(i), Service: "shared", Port: ptr.To[int32](80),
			},
			Replicas: &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](0), Max: ptr.To[int32](1)},
		},
	}
	var err error
	for attempt := 0; attempt < 60; attempt++ {
		err = f.Client.Create(ctx, hso.DeepCopy())
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		if !apierrors.IsInternalError(err) && !strings.Contains(err.Error(), "webhook") {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
	return err
}

// operatorLeader returns the operator pod holding the default fleet's leader Lease.
func operatorLeader(ctx context.Context) localcluster.Pod {
	GinkgoHelper()
	var pod localcluster.Pod
	Eventually(func(g Gomega) {
		var lease coordinationv1.Lease
		g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: localcluster.Namespace, Name: "operator.httpscale.dev"}, &lease)).To(Succeed())
		holder, _, _ := strings.Cut(ptr.Deref(lease.Spec.HolderIdentity, ""), "_")
		pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=operator")
		g.Expect(err).NotTo(HaveOccurred())
		i := slices.IndexFunc(pods, func(p localcluster.Pod) bool { return p.Name == holder && p.Ready })
		g.Expect(i).To(BeNumerically(">=", 0), "a Ready operator pod holding the lease (holder %q)", holder)
		pod = pods[i]
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	return pod
}

// orphanShards lists the routing-table shard ConfigMaps the head does not name.
func orphanShards(ctx context.Context) ([]string, error) {
	var cms corev1.ConfigMapList
	if err := f.Client.List(ctx, &cms, client.InNamespace(localcluster.Namespace),
		client.MatchingLabels{routing.LabelTable: routing.DefaultBaseName}); err != nil {
		return nil, err
	}
	var head *corev1.ConfigMap
	for i := range cms.Items {
		if cms.Items[i].Name == routing.DefaultBaseName {
			head = &cms.Items[i]
		}
	}
	m, err := routing.ReadManifest(head)
	if err != nil {
		return nil, err
	}
	named := map[string]bool{routing.DefaultBaseName: true}
	for _, ref := range m.Shards {
		named[routing.ShardConfigMapName(routing.DefaultBaseName, ref)] = true
	}
	var orphans []string
	for _, cm := range cms.Items {
		if !named[cm.Name] {
			orphans = append(orphans, cm.Name)
		}
	}
	return orphans, nil
}
