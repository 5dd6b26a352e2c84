// Package appkey is the identity of an app — one HTTPScaledObject — as the string "namespace/name".
//
// That string is a wire format: the routing table, the admin JSON, the KEDA trigger metadata and the
// metrics labels all carry it, so String and Parse must keep it exactly. The package imports only the
// standard library, so the interceptor's hot path can use it freely.
package appkey

import (
	"errors"
	"fmt"
	"strings"
)

// ErrMalformed is wrapped by Parse's error when a string is not "namespace/name".
var ErrMalformed = errors.New("malformed app key")

// Key names an app by its namespace and name. The zero Key names no app.
type Key struct {
	Namespace string
	Name      string
}

// New returns the key of the app name in namespace. It does not validate: names that come from the
// API server are already valid, and Parse checks strings from elsewhere.
func New(namespace, name string) Key { return Key{Namespace: namespace, Name: name} }

// String returns "namespace/name", the form every wire format carries. It allocates the one string
// it returns.
func (k Key) String() string { return k.Namespace + "/" + k.Name }

// Parse reads "namespace/name": exactly one "/", with a non-empty namespace and name on either side.
// Anything else returns an error wrapping ErrMalformed that quotes s.
func Parse(s string) (Key, error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Key{}, fmt.Errorf("%w %q: want namespace/name", ErrMalformed, s)
	}
	return Key{Namespace: ns, Name: name}, nil
}
