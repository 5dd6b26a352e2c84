package tablewatch

import (
	"errors"
	"fmt"
	"testing"

	"github.com/httpscale/httpscale/pkg/routing"
)

func TestOlderResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"9", "10", true}, // numeric, not lexical
		{"10", "9", false},
		{"10", "10", false},
		{"", "10", false},
		{"123456789012345678901234567890", "123456789012345678901234567891", true}, // no length limit
		{"abc", "10", false}, // not a valid resource version: assume nothing
		{"10", "abc", false},
		{"010", "9", false}, // leading zeros are invalid
		{"0", "10", false},  // 0 is never a live resource version
	} {
		if got := olderResourceVersion(tc.a, tc.b); got != tc.want {
			t.Errorf("olderResourceVersion(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestReasonOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("reading: %w", routing.ErrIncomplete), reasonIncomplete},
		{fmt.Errorf("reading: %w", routing.ErrCorrupt), reasonCorrupt},
		{errors.New("something else"), reasonInvalid},
	} {
		if got := reasonOf(tc.err); got != tc.want {
			t.Errorf("reasonOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
