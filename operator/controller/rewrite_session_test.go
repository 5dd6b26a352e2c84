package controller

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
)

// TestBuildEntryCarriesRewritesAndSession: the object's path rewrites and session persistence reach
// the routing entry (the cookie name defaulted, the lifetime in seconds), and the entry validates;
// two rewrites of one prefix spelt with and without a trailing / (which CEL lets through) make the
// entry invalid, so the object is Valid=False instead of routed half-rewritten.
func TestBuildEntryCarriesRewritesAndSession(t *testing.T) {
	obj := fullObject()
	obj.Spec.Forwarding = nil
	obj.Spec.PathPrefixes = []v1.PathPrefix{"/cart", "/shop/"}
	obj.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop/", ReplacePrefixMatch: "/store"}}
	obj.Spec.SessionPersistence = &v1.SessionPersistence{Lifetime: ptr.To(v1.Duration("2h"))}
	got := buildEntry(obj, routing.Backend{Service: "web", Port: 80}, nil)
	if d := cmp.Diff([]routing.PathRewrite{{Prefix: "/shop/", Replace: "/store"}}, got.Rewrites); d != "" {
		t.Errorf("rewrites (-want +got):\n%s", d)
	}
	if d := cmp.Diff(&routing.Session{Cookie: v1.DefaultSessionCookie, MaxAge: 7200}, got.Session); d != "" {
		t.Errorf("session (-want +got):\n%s", d)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("built entry does not validate: %v", err)
	}

	obj.Spec.PathPrefixes = append(obj.Spec.PathPrefixes, "/shop")
	obj.Spec.PathRewrites = append(obj.Spec.PathRewrites, v1.PathRewrite{PathPrefix: "/shop", ReplacePrefixMatch: "/"})
	if bad := buildEntry(obj, routing.Backend{Service: "web", Port: 80}, nil); bad.Validate() == nil {
		t.Error("two rewrites of /shop validate")
	}
}
