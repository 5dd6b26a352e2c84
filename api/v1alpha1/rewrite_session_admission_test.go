package v1alpha1_test

import (
	"context"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

var _ = Describe("HTTPScaledObject admission of path rewrites and session persistence", func() {
	ctx := context.Background()

	DescribeTable("rejects an invalid rewrite or session setting with a message that says what to fix",
		func(mutate func(*v1.HTTPScaledObject), field, message string) {
			obj := valid("invalid-rw")
			mutate(obj)
			err := k8s.Create(ctx, obj)
			Expect(err).To(HaveOccurred(), "the API server accepted an invalid object")
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want 422 Invalid, got %v", err)
			Expect(err.Error()).To(ContainSubstring(field))
			Expect(err.Error()).To(ContainSubstring(message))
		},
		Entry("a rewrite of a prefix the object does not route", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/shop"}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/cart", ReplacePrefixMatch: "/"}}
		}, "spec.pathRewrites", "must be one of spec.pathPrefixes, written the same way"),
		Entry("a rewrite of a prefix written with another trailing slash", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/shop"}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop/", ReplacePrefixMatch: "/"}}
		}, "spec.pathRewrites", "must be one of spec.pathPrefixes, written the same way"),
		Entry("a rewrite of a prefix other than / without pathPrefixes", func(o *v1.HTTPScaledObject) {
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "/"}}
		}, "spec.pathRewrites", "can only rewrite /"),
		Entry("the same prefix rewritten twice", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/shop"}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "/"}, {PathPrefix: "/shop", ReplacePrefixMatch: "/a"}}
		}, "spec.pathRewrites[1]", "Duplicate value"),
		Entry("a replacement without a leading slash", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/shop"}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "store"}}
		}, "spec.pathRewrites[0].replacePrefixMatch", "must be empty or a path starting with /"),
		Entry("a replacement with a query", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/shop"}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "/store?x=1"}}
		}, "spec.pathRewrites[0].replacePrefixMatch", "no percent-encoding, query, fragment or spaces"),
		Entry("a percent-encoded replacement", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/shop"}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "/a%2Fb"}}
		}, "spec.pathRewrites[0].replacePrefixMatch", "no percent-encoding"),
		Entry("a replacement that climbs out with ..", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/shop"}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "/store/../admin"}}
		}, "spec.pathRewrites[0].replacePrefixMatch", "must not contain . or .. segments"),
		Entry("a replacement with an empty segment", func(o *v1.HTTPScaledObject) {
			o.Spec.PathPrefixes = []v1.PathPrefix{"/shop"}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/shop", ReplacePrefixMatch: "//evil.example"}}
		}, "spec.pathRewrites[0].replacePrefixMatch", "or //"),
		Entry("rewrites in Serve mode", func(o *v1.HTTPScaledObject) {
			o.Spec.Mode = v1.ModeServe
			o.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1)}
			o.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/", ReplacePrefixMatch: "/app"}}
		}, "spec.pathRewrites", "pathRewrites need mode Proxy"),
		Entry("a cookie name with a space", func(o *v1.HTTPScaledObject) {
			o.Spec.SessionPersistence = &v1.SessionPersistence{CookieName: "my cookie"}
		}, "spec.sessionPersistence.cookieName", "must be 1-64 letters, digits"),
		Entry("a cookie name with ; that would add attributes", func(o *v1.HTTPScaledObject) {
			o.Spec.SessionPersistence = &v1.SessionPersistence{CookieName: "a;Domain=example.com"}
		}, "spec.sessionPersistence.cookieName", "must be 1-64 letters, digits"),
		Entry("a __Host- cookie name", func(o *v1.HTTPScaledObject) {
			o.Spec.SessionPersistence = &v1.SessionPersistence{CookieName: "__host-pod"}
		}, "spec.sessionPersistence.cookieName", "must not start with __Host- or __Secure-"),
		Entry("a cookie name over 64 characters", func(o *v1.HTTPScaledObject) {
			o.Spec.SessionPersistence = &v1.SessionPersistence{CookieName: strings.Repeat("c", 65)}
		}, "spec.sessionPersistence.cookieName", "may not be more than 64"),
		Entry("a lifetime below a second", func(o *v1.HTTPScaledObject) {
			o.Spec.SessionPersistence = &v1.SessionPersistence{Lifetime: dur("500ms")}
		}, "spec.sessionPersistence.lifetime", "must be between 1s and 9600h"),
		Entry("a lifetime over 400 days", func(o *v1.HTTPScaledObject) {
			o.Spec.SessionPersistence = &v1.SessionPersistence{Lifetime: dur("10000h")}
		}, "spec.sessionPersistence.lifetime", "must be between 1s and 9600h"),
		Entry("a lifetime that is not a duration", func(o *v1.HTTPScaledObject) {
			o.Spec.SessionPersistence = &v1.SessionPersistence{Lifetime: dur("1 day")}
		}, "spec.sessionPersistence.lifetime", "must be a positive duration"),
		Entry("session persistence in Serve mode", func(o *v1.HTTPScaledObject) {
			o.Spec.Mode = v1.ModeServe
			o.Spec.Replicas = &v1.ReplicaBounds{Min: ptr.To[int32](1)}
			o.Spec.SessionPersistence = &v1.SessionPersistence{}
		}, "spec.sessionPersistence", "sessionPersistence needs mode Proxy"),
		Entry("session persistence through the Service address", func(o *v1.HTTPScaledObject) {
			o.Spec.Forwarding = &v1.Forwarding{ViaService: true}
			o.Spec.SessionPersistence = &v1.SessionPersistence{}
		}, "spec.sessionPersistence", "cannot be combined with forwarding.viaService"),
	)

	It("accepts rewrites of its prefixes and session persistence, and defaults the cookie name", func() {
		obj := valid("rewrite-session")
		obj.Spec.PathPrefixes = []v1.PathPrefix{"/shop", "/api/v1/"}
		obj.Spec.PathRewrites = []v1.PathRewrite{
			{PathPrefix: "/shop", ReplacePrefixMatch: ""},
			{PathPrefix: "/api/v1/", ReplacePrefixMatch: "/v1:internal/@x~y"},
		}
		obj.Spec.SessionPersistence = &v1.SessionPersistence{Lifetime: dur("9600h")}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
		got := &v1.HTTPScaledObject{}
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.Spec.PathRewrites).To(Equal(obj.Spec.PathRewrites))
		Expect(got.Spec.SessionPersistence).To(Equal(&v1.SessionPersistence{CookieName: v1.DefaultSessionCookie, Lifetime: dur("9600h")}))
	})

	It("accepts a rewrite of / for an object without path prefixes", func() {
		obj := valid("rewrite-root")
		obj.Spec.PathRewrites = []v1.PathRewrite{{PathPrefix: "/", ReplacePrefixMatch: "/app"}}
		obj.Spec.SessionPersistence = &v1.SessionPersistence{CookieName: "shop.pod_1"}
		Expect(k8s.Create(ctx, obj)).To(Succeed())
	})
})
