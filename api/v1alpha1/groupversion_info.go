// Package v1alpha1 holds the httpscale.dev/v1alpha1 API: the HTTPScaledObject that users apply once per
// app to route HTTP traffic through the interceptor fleet and scale the app to and from zero.
// +kubebuilder:object:generate=true
// +groupName=httpscale.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "httpscale.dev", Version: "v1alpha1"}

	// SchemeBuilder registers this package's kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds this package's kinds to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
