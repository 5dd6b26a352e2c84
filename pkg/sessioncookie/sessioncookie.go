// Package sessioncookie is the value of session-persistence cookies (an opaque, authenticated name
// of one endpoint of one app), the fleet's keys that authenticate it, and the reading of Cookie
// headers that looks for it.
//
// A value is the first 128 bits of HMAC-SHA256(key, app key NUL endpoint address), base64url without
// padding (ValueLen characters). It names an endpoint only to someone who holds the key and knows
// the app's endpoints, so the interceptors need no state to map it back: they compute the values of
// the app's ready endpoints once per endpoint set and look a client's value up among them. A value
// that is not one of them (forged, altered, issued for another app, for a pod that is gone, or
// under a key no longer in use) names nothing, and the request is balanced as if it had none.
package sessioncookie

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
)

// errNoKeys: no key was given (an empty key file: one not written yet).
var errNoKeys = errors.New("session keys: none given")

// ValueLen is the length of a cookie value: 16 bytes in unpadded base64url.
const ValueLen = 22

// MinKeyLen is the shortest key accepted, in bytes.
const MinKeyLen = 16

// maxKeys bounds the keys accepted at once (the signing key and the ones being rotated out).
const maxKeys = 8

// Keys are a fleet's session keys: the first signs new cookies, and a cookie signed with any of them
// is accepted, so that keys can be rotated without sending every client to a new pod. Immutable;
// safe for concurrent use.
type Keys struct {
	keys [][]byte
}

// NewKeys returns keys, the first of which signs. Each must be at least MinKeyLen bytes.
func NewKeys(keys ...[]byte) (*Keys, error) {
	if len(keys) == 0 {
		return nil, errNoKeys
	}
	if len(keys) > maxKeys {
		return nil, fmt.Errorf("session keys: %d given, at most %d", len(keys), maxKeys)
	}
	k := &Keys{keys: make([][]byte, len(keys))}
	for i, key := range keys {
		if len(key) < MinKeyLen {
			return nil, fmt.Errorf("session keys: key %d is %d bytes, want at least %d", i+1, len(key), MinKeyLen)
		}
		k.keys[i] = bytes.Clone(key)
	}
	return k, nil
}

// ParseKeys reads keys from text: one key per line (its bytes, surrounding spaces trimmed), the
// signing key first; empty lines and lines starting with # are skipped.
func ParseKeys(text []byte) (*Keys, error) {
	var keys [][]byte
	for line := range bytes.SplitSeq(text, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		keys = append(keys, line)
	}
	return NewKeys(keys...)
}

// RandomKeys returns one random key: cookies it signs are recognised by this process only.
func RandomKeys() *Keys {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return &Keys{keys: [][]byte{key}}
}

// Len returns the number of keys.
func (k *Keys) Len() int { return len(k.keys) }

// Equal reports whether k and o hold the same keys in the same order.
func (k *Keys) Equal(o *Keys) bool {
	if k == nil || o == nil || len(k.keys) != len(o.keys) {
		return k == o
	}
	for i := range k.keys {
		if !hmac.Equal(k.keys[i], o.keys[i]) {
			return false
		}
	}
	return true
}

// Value returns the cookie value naming the endpoint at addr of app under key i (0 signs).
// Cost: one HMAC-SHA256 and two small allocations; callers compute it once per endpoint set.
func (k *Keys) Value(i int, app, addr string) string {
	m := hmac.New(sha256.New, k.keys[i])
	m.Write([]byte(app))
	m.Write([]byte{0})
	m.Write([]byte(addr))
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0])[:16])
}

// Find calls found with each value of the cookie named name in the Cookie header lines, in order,
// as long as found returns false, and skips values that cannot be one of ours (not ValueLen
// characters, or not base64url). It reads at most max values of that name and allocates nothing:
// a client can make it scan its header lines, never compute anything for them. Cookie pairs are
// read as browsers send them ("a=1; b=2"); a value in double quotes is unquoted.
func Find(lines []string, name string, max int, found func(value string) bool) {
	seen := 0
	for _, line := range lines {
		for len(line) > 0 {
			var pair string
			if i := indexByte(line, ';'); i >= 0 {
				pair, line = line[:i], line[i+1:]
			} else {
				pair, line = line, ""
			}
			pair = trimOWS(pair)
			if len(pair) <= len(name) || pair[len(name)] != '=' || pair[:len(name)] != name {
				continue
			}
			if seen++; seen > max {
				return
			}
			v := pair[len(name)+1:]
			if len(v) == ValueLen+2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			if len(v) == ValueLen && base64url(v) && found(v) {
				return
			}
		}
	}
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

func base64url(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}
