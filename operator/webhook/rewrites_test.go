package webhook

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

func TestValidatorChecksPathRewrites(t *testing.T) {
	v := Validator{Location: time.UTC}
	for _, tc := range []struct {
		name, field, message string
		prefixes             []v1.PathPrefix
		rewrites             []v1.PathRewrite
	}{
		{"the same prefix in both spellings", "spec.pathRewrites[1].pathPrefix", "a trailing / does not matter",
			[]v1.PathPrefix{"/shop", "/shop/"}, []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "/"}, {PathPrefix: "/shop/", ReplacePrefixMatch: "/a"}}},
		{"a prefix the object does not route", "spec.pathRewrites[0].pathPrefix", "must be one of spec.pathPrefixes",
			[]v1.PathPrefix{"/shop"}, []v1.PathRewrite{{PathPrefix: "/cart", ReplacePrefixMatch: "/"}}},
		{"not / without pathPrefixes", "spec.pathRewrites[0].pathPrefix", "can only rewrite /",
			nil, []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "/"}}},
	} {
		obj := validObject()
		obj.Spec.PathPrefixes, obj.Spec.PathRewrites = tc.prefixes, tc.rewrites
		_, err := v.ValidateCreate(context.Background(), obj)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.field) || !strings.Contains(err.Error(), tc.message) {
			t.Errorf("%s: %v, want Invalid at %s saying %q", tc.name, err, tc.field, tc.message)
		}
	}
	obj := validObject()
	obj.Spec.PathPrefixes = []v1.PathPrefix{"/shop/", "/api"}
	obj.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop/", ReplacePrefixMatch: ""}}
	obj.Spec.SessionPersistence = &v1.SessionPersistence{CookieName: "pod"}
	if w, err := v.ValidateCreate(context.Background(), obj); err != nil || len(w) > 0 {
		t.Errorf("valid rewrite and session: %v, %v", w, err)
	}
}
