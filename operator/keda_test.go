package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// TestRoutesWithoutKEDA runs the operator binary on an API server that has httpscale's CRD and not
// KEDA's, as on a cluster where KEDA was forgotten: the app is routed all the same (its entry is in the
// routing table interceptors read), its status says why nothing scales it (ScaledObjectReady=False,
// reason KEDANotInstalled) with a Warning event, and the operator's log says it once. Installing KEDA's
// CRDs afterwards makes the running operator create the ScaledObject, with no restart.
func TestRoutesWithoutKEDA(t *testing.T) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     []string{filepath.Join(testenv.RepoRoot(), "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		CRDInstallOptions:     envtest.CRDInstallOptions{MaxTime: 2 * time.Minute},
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1.AddToScheme, kedav1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	const installNS, ns = "httpscale-system", "shop"
	objects := append([]client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNS}}}, testenv.AppObjects(ns)...)
	hso := &v1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: ns},
		Spec: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{"shop.example.com"},
			ScaleTargetRef: v1.ScaleTargetRef{Name: "app", Service: "app", Port: new(int32(80))},
		},
	}
	for _, o := range append(objects, hso) {
		if err := k8s.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}

	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	op := startOperatorBinary(t, "--kubeconfig="+kubeconfig, "--leader-elect=false", "--namespace="+installNS,
		"--webhook-bind-address=0", "--metrics-bind-address=0", "--health-probe-bind-address="+testenv.FreeAddr(t),
		"--keda-check-interval=500ms")

	condition := func(typ string) *metav1.Condition {
		var got v1.HTTPScaledObject
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(hso), &got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, typ)
	}
	testenv.Eventually(t, time.Minute, "ScaledObjectReady=False with reason KEDANotInstalled", func() bool {
		c := condition(v1.ConditionScaledObjectReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == "KEDANotInstalled"
	})
	if c := condition(v1.ConditionScaledObjectReady); !strings.Contains(c.Message, "this app is routed") || !strings.Contains(c.Message, "2.21") {
		t.Errorf("condition message %q: want it to say the app is routed and which KEDA to install", c.Message)
	}
	if c := condition(v1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "KEDANotInstalled" {
		t.Errorf("Ready = %+v, want False with reason KEDANotInstalled", c)
	}

	// Routing goes on: the table interceptors read routes the host to the app's Service.
	testenv.Eventually(t, time.Minute, "the routing table routes shop.example.com", func() bool {
		table, err := testenv.StoredTable(ctx, k8s, installNS, routing.DefaultBaseName)
		if err != nil {
			return false
		}
		e, ok := table.Match("shop.example.com", "/", nil)
		return ok && e.Namespace == ns && e.Service == "app"
	})

	// One Warning event on the object, one log line from the operator.
	testenv.Eventually(t, 30*time.Second, "a Warning event on the HTTPScaledObject naming KEDA", func() bool {
		var evs corev1.EventList
		if err := k8s.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == "app" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "KEDA is not installed") {
				return true
			}
		}
		return false
	})
	if n := strings.Count(op.stderr.String(), "KEDA is not installed"); n != 1 {
		t.Errorf("the operator logged %d lines saying KEDA is not installed, want 1:\n%s", n, op.stderr.String())
	}

	// KEDA arrives: the running operator watches ScaledObjects and creates this app's.
	keda, err := testenv.KEDACRDDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{keda}, MaxTime: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "the ScaledObject is created and ScaledObjectReady=True", func() bool {
		c := condition(v1.ConditionScaledObjectReady)
		return c != nil && c.Status == metav1.ConditionTrue &&
			k8s.Get(ctx, client.ObjectKeyFromObject(hso), &kedav1alpha1.ScaledObject{}) == nil
	})
	// The watch is live: a ScaledObject changed by hand is put back.
	so := &kedav1alpha1.ScaledObject{}
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(hso), so); err != nil {
		t.Fatal(err)
	}
	so.Spec.MaxReplicaCount = new(int32(7))
	if err := k8s.Update(ctx, so); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the operator restores the ScaledObject's maxReplicaCount", func() bool {
		err := k8s.Get(context.WithoutCancel(ctx), client.ObjectKeyFromObject(hso), so)
		return err == nil && so.Spec.MaxReplicaCount != nil && *so.Spec.MaxReplicaCount == 100
	})
	if !strings.Contains(op.stderr.String(), "KEDA's CRDs are installed now") {
		t.Errorf("the operator did not log that KEDA appeared:\n%s", op.stderr.String())
	}
}
