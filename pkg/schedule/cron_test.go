package schedule

import (
	"strings"
	"testing"
	"time"
)

func mustLoc(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseRejectsWithActionableMessages(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{"", "schedule is empty"},
		{"@every 5m", "@every is not a cron schedule"},
		{"TZ=Europe/Berlin 0 8 * * *", "set the time zone in timeZone"},
		{"CRON_TZ=UTC 0 8 * * *", "set the time zone in timeZone"},
		{"0 0 8 * * *", "not a valid 5-field cron expression"},
		{"0 8 * *", "not a valid 5-field cron expression"},
		{"61 8 * * *", "not a valid 5-field cron expression"},
		{"0 8 * * funday", "not a valid 5-field cron expression"},
		{"30 2 31 feb *", "never fires"},
	} {
		_, err := Parse(tc.expr, time.UTC)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) error = %v, want it to contain %q", tc.expr, err, tc.want)
		}
	}
	for _, expr := range []string{"30 8 * * mon-fri", "0 9 1 jan,jul *", "*/15 * * * *", "@daily", "@hourly", " 0 8 * * * "} {
		if _, err := Parse(expr, time.UTC); err != nil {
			t.Errorf("Parse(%q) = %v, want it accepted", expr, err)
		}
	}
}

func TestLoadLocation(t *testing.T) {
	berlin := mustLoc(t, "Europe/Berlin")
	if got, err := LoadLocation("", berlin); err != nil || got != berlin {
		t.Errorf("empty name = %v, %v; want the default zone", got, err)
	}
	if _, err := LoadLocation("Mars/Olympus", time.UTC); err == nil || !strings.Contains(err.Error(), "not a known IANA time zone") {
		t.Errorf("unknown zone error = %v", err)
	}
	if _, err := LoadLocation("Local", time.UTC); err == nil || !strings.Contains(err.Error(), "omit timeZone") {
		t.Errorf("Local error = %v", err)
	}
}

// TestNextAcrossZones reads one schedule in several zones, including a half-hour offset.
func TestNextAcrossZones(t *testing.T) {
	from := utc("2026-03-02T00:00:00Z") // a Monday
	for _, tc := range []struct {
		zone, expr string
		want       []string
	}{
		{"UTC", "30 8 * * mon-fri", []string{"2026-03-02T08:30:00Z", "2026-03-03T08:30:00Z"}},
		{"Europe/Berlin", "30 8 * * mon-fri", []string{"2026-03-02T07:30:00Z", "2026-03-03T07:30:00Z"}},
		{"Asia/Kolkata", "30 8 * * mon-fri", []string{"2026-03-02T03:00:00Z", "2026-03-03T03:00:00Z"}},
		{"America/Los_Angeles", "0 9 * * sat", []string{"2026-03-07T17:00:00Z", "2026-03-14T16:00:00Z"}}, // DST starts on 8 March
		{"Australia/Sydney", "0 0 1 jan,jul *", []string{"2026-06-30T14:00:00Z", "2026-12-31T13:00:00Z"}},
	} {
		s, err := Parse(tc.expr, mustLoc(t, tc.zone))
		if err != nil {
			t.Fatal(err)
		}
		at := from
		for i, w := range tc.want {
			at = s.Next(at)
			if !at.Equal(utc(w)) {
				t.Errorf("%s %q execution %d = %s, want %s", tc.zone, tc.expr, i, at.UTC().Format(time.RFC3339), w)
			}
		}
	}
}

// TestNextAcrossDaylightSavingChanges uses New York's 2026 changes: 8 March 02:00 EST -> 03:00 EDT and
// 1 November 02:00 EDT -> 01:00 EST.
func TestNextAcrossDaylightSavingChanges(t *testing.T) {
	ny := mustLoc(t, "America/New_York")
	for _, tc := range []struct {
		name, expr, from string
		want             []string
	}{
		{"fixed time in the skipped hour fires when the clock jumps", "30 2 * * *", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z" /* 03:00 EDT */, "2026-03-09T06:30:00Z" /* 02:30 EDT */}},
		{"fixed time after the jump keeps its wall-clock time", "30 8 * * *", "2026-03-07T12:00:00Z",
			[]string{"2026-03-07T13:30:00Z" /* 08:30 EST */, "2026-03-08T12:30:00Z" /* 08:30 EDT */}},
		{"hourly schedule skips the hour that does not exist", "30 * * * *", "2026-03-08T06:00:00Z",
			[]string{"2026-03-08T06:30:00Z" /* 01:30 EST */, "2026-03-08T07:30:00Z" /* 03:30 EDT */}},
		{"fixed time in the repeated hour fires once", "30 1 * * *", "2026-11-01T00:00:00Z",
			[]string{"2026-11-01T05:30:00Z" /* 01:30 EDT */, "2026-11-02T06:30:00Z" /* 01:30 EST next day */}},
		{"every minute of a fixed hour runs through the repeated hour once", "58 1 * * *", "2026-11-01T05:00:00Z",
			[]string{"2026-11-01T05:58:00Z", "2026-11-02T06:58:00Z"}},
		{"hourly schedule fires every real hour through the repeated hour", "0 * * * *", "2026-11-01T04:30:00Z",
			[]string{"2026-11-01T05:00:00Z" /* 01:00 EDT */, "2026-11-01T06:00:00Z" /* 01:00 EST */, "2026-11-01T07:00:00Z" /* 02:00 EST */}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.expr, ny)
			if err != nil {
				t.Fatal(err)
			}
			at := utc(tc.from)
			for i, w := range tc.want {
				at = s.Next(at)
				if !at.Equal(utc(w)) {
					t.Errorf("execution %d = %s (%s), want %s", i, at.UTC().Format(time.RFC3339), at.In(ny).Format(time.DateTime+" MST"), w)
				}
			}
		})
	}
}

func TestLatest(t *testing.T) {
	s, err := Parse("*/5 * * * *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	yearly, err := Parse("0 0 1 jan *", time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		s        *Schedule
		from, to string
		want     string // empty: none
	}{
		{"latest of many", s, "2026-01-01T00:00:00Z", "2026-01-01T01:07:00Z", "2026-01-01T01:05:00Z"},
		{"bounds are inclusive", s, "2026-01-01T01:05:00Z", "2026-01-01T01:05:00Z", "2026-01-01T01:05:00Z"},
		{"none in range", s, "2026-01-01T01:06:00Z", "2026-01-01T01:09:59Z", ""},
		{"a year of minutes is cheap", s, "2025-01-01T00:00:00Z", "2026-01-01T00:02:00Z", "2026-01-01T00:00:00Z"},
		{"sparse schedule far back", yearly, "2020-06-01T00:00:00Z", "2026-03-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"reversed range", s, "2026-01-01T02:00:00Z", "2026-01-01T01:00:00Z", ""},
	} {
		got, ok := tc.s.Latest(utc(tc.from), utc(tc.to))
		switch {
		case tc.want == "" && ok:
			t.Errorf("%s: got %s, want none", tc.name, got)
		case tc.want != "" && (!ok || !got.Equal(utc(tc.want))):
			t.Errorf("%s: got %s (%v), want %s", tc.name, got, ok, tc.want)
		}
	}
}
