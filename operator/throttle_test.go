package main

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// The operator binary, run with --kubeconfig as the local cluster and out-of-cluster users run it,
// routes a burst of objects without client-side throttling. Before its status shows the routing-table
// version, every object takes at least two writes to the HTTPScaledObject API by the operator (the
// finalizer patch, then the status patch carrying the version), and both go through the same REST
// client, whose rate limiter client-go keeps per client: 2*burstSize = 200 requests. client-go's
// defaults (5 requests/s after a burst of 10) need at least (200-10)/5 = 38 s for them, so the 30 s
// bound fails if the operator's client is throttled that way again; unthrottled it took 9.5-13 s on
// the 2 shared cores at a load average of 50. Run with HTTPSCALE_KUBE_API_QPS=5
// HTTPSCALE_KUBE_API_BURST=10 to see it fail.
const (
	burstSize  = 100
	routeBound = 30 * time.Second
)

func TestBurstIsRoutedWithoutClientThrottling(t *testing.T) {
	env, adminCfg := testenv.StartT(t)
	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	k8s, err := client.New(adminCfg, client.Options{Scheme: scheme}) // envtest's client: 1000 requests/s
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "burst"
	objs := append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "httpscale-system"}}}, testenv.AppObjects(ns)...)
	for _, obj := range objs {
		if err := k8s.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	// The built binary in its own process, as the local cluster runs it (a second run in this test
	// process would register the controller's name twice).
	// No --kube-api-qps/--kube-api-burst: the binary's defaults (or HTTPSCALE_KUBE_API_* if set).
	op := startOperatorBinary(t, "--kubeconfig="+kubeconfig, "--leader-elect=false", "--namespace=httpscale-system",
		"--webhook-bind-address=0", "--metrics-bind-address=0", "--health-probe-bind-address="+testenv.FreeAddr(t),
		"--zap-log-level=error")

	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, burstSize)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				h := &v1.HTTPScaledObject{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%03d", i), Namespace: ns},
					Spec: v1.HTTPScaledObjectSpec{
						Hosts:          []v1.Host{v1.Host(fmt.Sprintf("app-%03d.example.com", i))},
						ScaleTargetRef: v1.ScaleTargetRef{Name: "app", Service: "app", Port: ptr.To[int32](80)},
					},
				}
				if err := k8s.Create(ctx, h); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range burstSize {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating HTTPScaledObject: %v", err)
	}

	routed := 0
	for time.Since(start) < routeBound {
		select {
		case err := <-op.done:
			op.done <- err // for the cleanup
			t.Fatalf("operator stopped: %v\n%s", err, op.stderr.String())
		case <-time.After(200 * time.Millisecond):
		}
		var list v1.HTTPScaledObjectList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		routed = 0
		for _, h := range list.Items {
			if h.Status.Routing != nil && h.Status.Routing.TableVersion != "" {
				routed++
			}
		}
		if routed == burstSize {
			t.Logf("%d HTTPScaledObjects routed %s after the first was created", burstSize, time.Since(start).Round(time.Millisecond))
			return
		}
	}
	t.Fatalf("%d of %d HTTPScaledObjects show a routing-table version after %s; a throttled API client needs at least 38 s",
		routed, burstSize, routeBound)
}
