package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

func validObject() *v1.HTTPScaledObject {
	return &v1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: "default"},
		Spec: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{"shop.example.com"},
			ScaleTargetRef: v1.ScaleTargetRef{Name: "shop", Service: "shop", Port: ptr.To[int32](8080)},
			Replicas:       &v1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](10)},
			Schedules: []v1.ScheduleRule{{
				Name: "sale", Schedule: "30 8 * * mon-fri", TimeZone: ptr.To("Europe/Berlin"),
				TargetMinReplicas: ptr.To[int32](5), TargetMaxReplicas: ptr.To[int32](20),
			}},
		},
	}
}

// TestValidatorRejects covers every check, including those the CRD's CEL rules make first when the
// object goes through the API server (an older CRD would let them through to the webhook).
func TestValidatorRejects(t *testing.T) {
	for _, tc := range []struct {
		name, field, message string
		mutate               func(*v1.HTTPScaledObject)
	}{
		{"invalid cron", "spec.schedules[0].schedule", "not a valid 5-field cron expression", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Schedule = "30 8 * *" }},
		{"cron that never fires", "spec.schedules[0].schedule", "never fires", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Schedule = "0 0 30 feb *" }},
		{"@every", "spec.schedules[0].schedule", "@every is not a cron schedule", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].Schedule = "@every 1h" }},
		{"unknown time zone", "spec.schedules[0].timeZone", "not a known IANA time zone", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].TimeZone = ptr.To("Europe/Atlantis") }},
		{"Local time zone", "spec.schedules[0].timeZone", "omit timeZone", func(o *v1.HTTPScaledObject) { o.Spec.Schedules[0].TimeZone = ptr.To("Local") }},
		{"duplicate rule names", "spec.schedules[1].name", "give each rule its own name", func(o *v1.HTTPScaledObject) {
			o.Spec.Schedules = append(o.Spec.Schedules, o.Spec.Schedules[0])
		}},
		{"no target", "spec.schedules[0]", "set targetMinReplicas, targetMaxReplicas or both", func(o *v1.HTTPScaledObject) {
			o.Spec.Schedules[0].TargetMinReplicas, o.Spec.Schedules[0].TargetMaxReplicas = nil, nil
		}},
		{"targetMin above targetMax", "spec.schedules[0].targetMinReplicas", "must not be greater than targetMaxReplicas (20)", func(o *v1.HTTPScaledObject) {
			o.Spec.Schedules[0].TargetMinReplicas = ptr.To[int32](21)
		}},
		{"targetMax alone below replicas.min", "spec.schedules[0].targetMaxReplicas", "below replicas.min (3)", func(o *v1.HTTPScaledObject) {
			o.Spec.Replicas.Min = ptr.To[int32](3)
			o.Spec.Schedules[0].TargetMinReplicas, o.Spec.Schedules[0].TargetMaxReplicas = nil, ptr.To[int32](2)
		}},
		{"history limit out of range", "spec.schedules[0].successfulHistoryLimit", "between 1 and 32", func(o *v1.HTTPScaledObject) {
			o.Spec.Schedules[0].SuccessfulHistoryLimit = ptr.To[int32](0)
		}},
		{"header names differing only in case", "spec.headers[1].name", "header names are case-insensitive", func(o *v1.HTTPScaledObject) {
			o.Spec.Headers = []v1.HeaderMatch{{Name: "X-Tenant"}, {Name: "x-tenant"}}
		}},
		{"placeholder headers differing only in case", "spec.coldStart.placeholder.headers", "header names are case-insensitive", func(o *v1.HTTPScaledObject) {
			o.Spec.ColdStart = &v1.ColdStart{Placeholder: &v1.Placeholder{Headers: map[string]string{"Content-Type": "a", "content-type": "b"}}}
		}},
		{"ignored path outside the path prefixes", "spec.ignoredPaths[0]", "must lie inside one of pathPrefixes", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/api"}
			o.Spec.IgnoredPaths = []v1.PathPrefix{"/apis/health"}
		}},
		{"ignored path twice", "spec.ignoredPaths[1]", "a trailing / does not matter", func(o *v1.HTTPScaledObject) {
			o.Spec.IgnoredPaths = []v1.PathPrefix{"/healthz", "/healthz/"}
		}},
		{"static route on the root of an object without path prefixes", "spec.staticRoutes[0].pathPrefix", "also one of the app's pathPrefixes", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/", Response: &v1.StaticResponse{}}}
		}},
		{"static route on an ignored path", "spec.staticRoutes[0].pathPrefix", "also in ignoredPaths", func(o *v1.HTTPScaledObject) {
			o.Spec.IgnoredPaths = []v1.PathPrefix{"/healthz"}
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/healthz/", Response: &v1.StaticResponse{}}}
		}},
		{"static route twice", "spec.staticRoutes[1].pathPrefix", "keep one", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/ping", Response: &v1.StaticResponse{}}, {PathPrefix: "/ping/", Service: &v1.StaticService{Name: "ping", Port: 80}}}
		}},
		{"static response headers differing only in case", "spec.staticRoutes[0].response.headers", "header names are case-insensitive", func(o *v1.HTTPScaledObject) {
			o.Spec.StaticRoutes = []v1.StaticRoute{{PathPrefix: "/ping", Response: &v1.StaticResponse{Headers: map[string]string{"Content-Type": "a", "content-type": "b"}}}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := validObject()
			tc.mutate(obj)
			_, err := Validator{Location: time.UTC}.ValidateCreate(context.Background(), obj)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want 422 Invalid", err)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.message) {
				t.Errorf("error %q does not name %q with %q", err, tc.field, tc.message)
			}
		})
	}
}

func TestValidatorAcceptsAndWarns(t *testing.T) {
	v := Validator{Location: time.UTC}
	obj := validObject()
	if w, err := v.ValidateCreate(context.Background(), obj); err != nil || len(w) != 0 {
		t.Fatalf("valid object: warnings %v, err %v", w, err)
	}
	obj.Spec.Schedules[0].TargetMaxReplicas = nil
	obj.Spec.Schedules[0].TargetMinReplicas = ptr.To[int32](50)
	w, err := v.ValidateCreate(context.Background(), obj)
	if err != nil || len(w) != 1 || !strings.Contains(w[0], "the maximum is raised to 50") {
		t.Errorf("min above replicas.max: warnings %v, err %v; want one warning", w, err)
	}
}

func TestValidatorLetsUnchangedSpecsThrough(t *testing.T) {
	v := Validator{Location: time.UTC}
	bad := validObject()
	bad.Spec.Schedules[0].TimeZone = ptr.To("Europe/Atlantis")
	edited := bad.DeepCopy()
	edited.Finalizers = nil
	if _, err := v.ValidateUpdate(context.Background(), bad, edited); err != nil {
		t.Errorf("a metadata-only update of an invalid object must pass (finalizer removal): %v", err)
	}
	edited.Spec.Hosts = []v1.Host{"other.example.com"}
	if _, err := v.ValidateUpdate(context.Background(), bad, edited); err == nil {
		t.Error("a spec update that keeps an invalid rule must be rejected")
	}
}

func TestValidatorAcceptsIgnoredPathsAndStaticRoutes(t *testing.T) {
	obj := validObject()
	obj.Spec.PathPrefixes = []v1.PathPrefix{"/api", "/healthz"}
	obj.Spec.IgnoredPaths = []v1.PathPrefix{"/healthz", "/api/ready/"}
	obj.Spec.StaticRoutes = []v1.StaticRoute{
		{PathPrefix: "/ping", Response: &v1.StaticResponse{StatusCode: 200, Body: "pong"}},
		{PathPrefix: "/api/status", Service: &v1.StaticService{Name: "status", Port: 8080}},
	}
	if warnings, err := (Validator{Location: time.UTC}).ValidateCreate(context.Background(), obj); err != nil || len(warnings) > 0 {
		t.Errorf("ValidateCreate = %v, %v; want it accepted without warnings", warnings, err)
	}
}
