package trigger

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestRoundTrip(t *testing.T) {
	for _, m := range []Metadata{
		{App: "shop/web", ConcurrencyTarget: 100, Window: DefaultWindow, Granularity: DefaultGranularity},
		{App: "shop/web", RequestRateTarget: 2.5, Window: 30 * time.Second, Granularity: 500 * time.Millisecond},
		{App: "a/b", ConcurrencyTarget: 10, RequestRateTarget: 50, Window: time.Minute, Granularity: time.Second},
		{Fleet: true, ConcurrencyTarget: 200, Window: DefaultWindow, Granularity: DefaultGranularity},
	} {
		md := m.Encode("scaler:9090")
		if md[KeyScalerAddress] != "scaler:9090" {
			t.Errorf("Encode(%+v) lost the scaler address: %v", m, md)
		}
		got, err := Parse(md)
		if err != nil {
			t.Fatalf("Parse(Encode(%+v)): %v", m, err)
		}
		if diff := cmp.Diff(m, got); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		md   map[string]string
		want string
	}{
		{map[string]string{KeyConcurrencyTarget: "1"}, "want namespace/name"},
		{map[string]string{KeyHTTPScaledObject: "noslash", KeyConcurrencyTarget: "1"}, "want namespace/name"},
		{map[string]string{KeyHTTPScaledObject: "a/b"}, "set concurrencyTarget and/or requestRateTarget"},
		{map[string]string{KeyHTTPScaledObject: "a/b", KeyConcurrencyTarget: "-3"}, "concurrencyTarget: want a positive number"},
		{map[string]string{KeyHTTPScaledObject: "a/b", KeyRequestRateTarget: "x"}, "requestRateTarget: want a positive number"},
		{map[string]string{KeyHTTPScaledObject: "a/b", KeyRequestRateTarget: "1", KeyRequestRateWindow: "soon"}, "requestRateWindow: want a positive duration"},
		{map[string]string{KeyHTTPScaledObject: "a/b", KeyRequestRateTarget: "1", KeyRequestRateWindow: "1s", KeyRequestRateGranularity: "2s"}, "must not be longer than"},
		{map[string]string{KeyInterceptorFleet: "maybe", KeyConcurrencyTarget: "1"}, "interceptorFleet: want true or false"},
	} {
		_, err := Parse(tc.md)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%v) = %v, want an error containing %q", tc.md, err, tc.want)
		}
	}
}
