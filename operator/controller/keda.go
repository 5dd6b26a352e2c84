package controller

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
)

// KEDAMinVersion is the oldest KEDA release httpscale is tested with (docs/install.md#compatibility).
const KEDAMinVersion = "2.21.0"

// Reasons of ScaledObjectReady=False when KEDA is missing.
const reasonKEDANotInstalled = "KEDANotInstalled"

// KEDA tells whether the API server serves KEDA's ScaledObjects. Without them the operator still routes
// every HTTPScaledObject (the interceptors hold and forward requests; only scaling is missing), reports
// ScaledObjectReady=False with reason KEDANotInstalled on each object with a Warning event, and says so
// in one log line at start. A Runnable of the manager, it checks discovery every Interval until KEDA's
// CRDs appear, then calls OnInstalled (which starts the ScaledObject watches and reconciles every
// object), so installing KEDA later needs no restart.
type KEDA struct {
	Discovery discovery.DiscoveryInterface
	Interval  time.Duration
	// OnInstalled runs once, when the CRDs appear after the start; an error stops the manager.
	OnInstalled func(ctx context.Context) error
	Log         logr.Logger

	installed atomic.Bool
}

// Installed reports whether ScaledObjects are served. Safe for concurrent use.
func (k *KEDA) Installed() bool { return k.installed.Load() }

// Detect asks discovery once whether keda.sh/v1alpha1 serves scaledobjects and records the answer; a
// failed discovery call is an error (not "missing"), so a flaky API server never turns scaling off.
func (k *KEDA) Detect() (bool, error) {
	gv := kedav1alpha1.SchemeGroupVersion.String()
	list, err := k.Discovery.ServerResourcesForGroupVersion(gv)
	switch {
	case apierrors.IsNotFound(err):
		k.installed.Store(false)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("asking the API server for %s: %w", gv, err)
	}
	ok := slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "scaledobjects" })
	k.installed.Store(ok)
	return ok, nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: the watches it adds belong to the
// controllers, which run on the leader.
func (k *KEDA) NeedLeaderElection() bool { return true }

// Start implements manager.Runnable: it waits for KEDA's CRDs while they are missing.
func (k *KEDA) Start(ctx context.Context) error {
	if k.Installed() {
		<-ctx.Done()
		return nil
	}
	tick := time.NewTicker(k.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		ok, err := k.Detect()
		if err != nil {
			k.Log.V(1).Info("checking for KEDA's CRDs", "error", err.Error())
			continue
		}
		if !ok {
			continue
		}
		k.Log.Info("KEDA's CRDs are installed now; creating the ScaledObjects of every HTTPScaledObject")
		if err := k.OnInstalled(ctx); err != nil {
			return fmt.Errorf("watching KEDA ScaledObjects: %w", err)
		}
		<-ctx.Done()
		return nil
	}
}

// notInstalledMessage is the condition and event message while KEDA is missing.
func notInstalledMessage() string {
	return "KEDA is not installed (the API server serves no keda.sh/v1alpha1 ScaledObjects): this app is routed, " +
		"and requests to it are held and forwarded, but nothing scales it. Install KEDA " + KEDAMinVersion +
		" or newer; the operator then creates its ScaledObject within a minute, without a restart"
}
