package localcluster

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCarve(t *testing.T) {
	p := netip.MustParsePrefix
	for _, tc := range []struct {
		name         string
		outer, inner string
		want         []netip.Prefix
	}{
		{"disjoint", "198.18.0.0/15", "10.0.0.0/8", []netip.Prefix{p("198.18.0.0/15")}},
		{"covered", "198.18.0.0/16", "198.18.0.0/15", nil},
		{"real node range", "198.18.0.0/15", "198.18.128.0/17", []netip.Prefix{p("198.18.0.0/17"), p("198.19.0.0/16")}},
		{"deep", "10.0.0.0/24", "10.0.0.64/26", []netip.Prefix{p("10.0.0.0/26"), p("10.0.0.128/25")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := carve(p(tc.outer), p(tc.inner))
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
				t.Errorf("carve(%s, %s) (-want +got):\n%s", tc.outer, tc.inner, diff)
			}
		})
	}
}
