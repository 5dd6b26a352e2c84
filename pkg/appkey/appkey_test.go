package appkey

import (
	"errors"
	"testing"
)

func TestString(t *testing.T) {
	for _, tc := range []struct {
		key  Key
		want string
	}{
		{New("shop", "web"), "shop/web"},
		{New("a", "b"), "a/b"},
		{New("kube-system", "api.v2"), "kube-system/api.v2"},
		{Key{}, "/"},
	} {
		if got := tc.key.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Key
		wantErr bool
	}{
		{in: "shop/web", want: New("shop", "web")},
		{in: "a/b", want: New("a", "b")},
		{in: "kube-system/api.v2", want: New("kube-system", "api.v2")},
		{in: "", wantErr: true},
		{in: "/", wantErr: true},
		{in: "shop", wantErr: true},
		{in: "shop/", wantErr: true},
		{in: "/web", wantErr: true},
		{in: "shop/web/x", wantErr: true},
		{in: "shop//web", wantErr: true},
	} {
		got, err := Parse(tc.in)
		if tc.wantErr {
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("Parse(%q) error = %v, want one wrapping ErrMalformed", tc.in, err)
			}
			if got != (Key{}) {
				t.Errorf("Parse(%q) = %#v with an error, want the zero Key", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %#v, %v; want %#v, nil", tc.in, got, err, tc.want)
		}
	}
}

func TestParseErrorQuotesInput(t *testing.T) {
	_, err := Parse("shop/web/x")
	if want := `malformed app key "shop/web/x": want namespace/name`; err == nil || err.Error() != want {
		t.Errorf("Parse error = %v, want %q", err, want)
	}
}

func TestRoundTrip(t *testing.T) {
	for _, k := range []Key{New("shop", "web"), New("a", "b-c.d")} {
		got, err := Parse(k.String())
		if err != nil || got != k {
			t.Errorf("Parse(%q) = %#v, %v; want %#v", k.String(), got, err, k)
		}
	}
}

func TestStringAllocatesOnce(t *testing.T) {
	k := New("shop", "web")
	if n := testing.AllocsPerRun(100, func() { _ = k.String() }); n > 1 {
		t.Errorf("String allocates %v times, want at most 1", n)
	}
}
