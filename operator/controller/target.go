package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
)

// TargetChecker verifies that a scale target exists and has a /scale subresource, for any kind.
// A positive result is remembered per object generation for TTL so that status-only reconciles
// (propagation changes across thousands of objects) cost no API calls; Forget drops it when a watch
// says the target changed. Negative results are not remembered: an object waiting for its target is
// checked again on every reconcile, so the target is noticed as soon as it appears.
type TargetChecker struct {
	Client    client.Client // SubResource("scale") reads go to the API server
	Mapper    meta.RESTMapper
	Discovery discovery.DiscoveryInterface
	TTL       time.Duration
	Now       func() time.Time
	// Watched are the kinds whose metadata the manager's cache watches; their existence is read from
	// the cache instead of the API server.
	Watched map[schema.GroupVersionKind]bool

	mu      sync.Mutex
	results map[string]checkResult
	// scalable caches discovery per group-version for TTL: a burst of thousands of new objects
	// costs one discovery call per kind, not one per object.
	scalable map[string]discovered
}

type discovered struct {
	at        time.Time
	resources map[string]bool // resource names that have a /scale subresource
}

// hasScale reports whether resource in gv has a /scale subresource, per the API server's discovery.
func (c *TargetChecker) hasScale(gv schema.GroupVersion, resource string) (bool, error) {
	now := c.Now()
	c.mu.Lock()
	d, ok := c.scalable[gv.String()]
	c.mu.Unlock()
	if !ok || now.Sub(d.at) >= c.TTL || !d.resources[resource] {
		list, err := c.Discovery.ServerResourcesForGroupVersion(gv.String())
		if err != nil {
			return false, fmt.Errorf("discovering %s: %w", gv, err)
		}
		d = discovered{at: now, resources: map[string]bool{}}
		for _, r := range list.APIResources {
			if name, ok := strings.CutSuffix(r.Name, "/scale"); ok {
				d.resources[name] = true
			}
		}
		c.mu.Lock()
		if c.scalable == nil {
			c.scalable = map[string]discovered{}
		}
		c.scalable[gv.String()] = d
		c.mu.Unlock()
	}
	return d.resources[resource], nil
}

type checkResult struct {
	generation int64
	at         time.Time
}

// Check returns nil when hso's scale target can be scaled, an *invalidError when the user must fix
// something, or another error for transient failures.
func (c *TargetChecker) Check(ctx context.Context, hso *v1.HTTPScaledObject) error {
	key := appkey.New(hso.Namespace, hso.Name).String()
	now := c.Now()
	c.mu.Lock()
	if r, ok := c.results[key]; ok && r.generation == hso.Generation && now.Sub(r.at) < c.TTL {
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()

	err := c.check(ctx, hso)
	if err == nil {
		c.mu.Lock()
		if c.results == nil {
			c.results = map[string]checkResult{}
		}
		c.results[key] = checkResult{generation: hso.Generation, at: now}
		c.mu.Unlock()
	}
	return err
}

// Forget drops the remembered result for key ("namespace/name").
func (c *TargetChecker) Forget(key string) {
	c.mu.Lock()
	delete(c.results, key)
	c.mu.Unlock()
}

func (c *TargetChecker) check(ctx context.Context, hso *v1.HTTPScaledObject) error {
	ref := hso.Spec.ScaleTargetRef
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return invalid("InvalidTargetAPIVersion", "scaleTargetRef.apiVersion %q: %v", ref.APIVersion, err)
	}
	mapping, err := c.Mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: ref.Kind}, gv.Version)
	if meta.IsNoMatchError(err) {
		return invalid("TargetKindUnknown", "scaleTargetRef: the API server serves no kind %s in %s; install its CRD or correct apiVersion/kind", ref.Kind, ref.APIVersion)
	}
	if err != nil {
		return fmt.Errorf("mapping %s %s: %w", ref.APIVersion, ref.Kind, err)
	}
	scalable, err := c.hasScale(gv, mapping.Resource.Resource)
	if err != nil {
		return err
	}
	if !scalable {
		return invalid("TargetNotScalable", "scaleTargetRef: %s has no /scale subresource, so it cannot be scaled; use a Deployment, StatefulSet or another kind with /scale", ref.Kind)
	}
	if c.Watched[mapping.GroupVersionKind] {
		// The cache watches this kind's metadata: no API call needed. A workload created a moment ago
		// may not be cached yet; its creation event re-validates the object.
		pom := &metav1.PartialObjectMetadata{}
		pom.SetGroupVersionKind(mapping.GroupVersionKind)
		err = c.Client.Get(ctx, client.ObjectKey{Namespace: hso.Namespace, Name: ref.Name}, pom)
	} else {
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(mapping.GroupVersionKind)
		obj.SetNamespace(hso.Namespace)
		obj.SetName(ref.Name)
		// The client reads subresources of unstructured objects only into unstructured objects.
		scale := &unstructured.Unstructured{}
		scale.SetGroupVersionKind(autoscalingv1.SchemeGroupVersion.WithKind("Scale"))
		err = c.Client.SubResource("scale").Get(ctx, obj, scale)
	}
	if apierrors.IsNotFound(err) {
		return invalid("TargetNotFound", "scaleTargetRef: %s %s/%s does not exist; create it or correct the name", ref.Kind, hso.Namespace, ref.Name)
	}
	if err != nil {
		return fmt.Errorf("reading scale of %s %s/%s: %w", ref.Kind, hso.Namespace, ref.Name, err)
	}
	return nil
}
