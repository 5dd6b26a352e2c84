// Package schedule turns HTTPScaledObject schedule rules (5-field cron with an IANA time zone) into
// execution times, decides which executions are due at a given instant (including catch-up after
// downtime within a starting deadline), keeps the per-rule history, and names the rule whose replica
// bounds stand. Everything takes the current time as a parameter; nothing here sleeps or reads a clock.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	// The operator image may have no zoneinfo files; embed the database so every IANA zone resolves.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// parser accepts the standard 5 fields (minute hour day-of-month month day-of-week, with names such as
// jan and mon) and the @hourly/@daily/@weekly/@monthly/@yearly descriptors.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// allHours is the bit set of a cron hour field that names every hour.
const allHours = 1<<24 - 1

// Schedule is a parsed cron expression read in one time zone. It is immutable and safe for concurrent use.
type Schedule struct {
	spec *cron.SpecSchedule
	loc  *time.Location
	// fixedHour is true when the hour field does not name every hour. Such schedules follow the
	// traditional cron rule on daylight-saving changes: a wall-clock time that occurs twice fires once, and
	// a wall-clock time that does not occur fires at the moment the clock jumps.
	fixedHour bool
}

// Parse parses a standard 5-field cron expression read in loc. It rejects @every (not a wall-clock
// schedule), an embedded TZ= prefix (the zone is a separate setting) and schedules that never fire.
func Parse(expr string, loc *time.Location) (*Schedule, error) {
	trimmed := strings.TrimSpace(expr)
	switch {
	case trimmed == "":
		return nil, errors.New("schedule is empty; write 5 cron fields such as 30 8 * * mon-fri")
	case strings.HasPrefix(trimmed, "@every"):
		return nil, fmt.Errorf("schedule %q: @every is not a cron schedule; write 5 cron fields such as */15 * * * *", expr)
	case strings.HasPrefix(trimmed, "TZ=") || strings.HasPrefix(trimmed, "CRON_TZ="):
		return nil, fmt.Errorf("schedule %q: set the time zone in timeZone, not inside the schedule", expr)
	}
	s, err := parser.Parse(trimmed)
	if err != nil {
		return nil, fmt.Errorf("schedule %q is not a valid 5-field cron expression (minute hour day-of-month month day-of-week, e.g. 30 8 * * mon-fri): %w", expr, err)
	}
	spec, ok := s.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("schedule %q: unsupported schedule form", expr)
	}
	spec.Location = loc
	out := &Schedule{spec: spec, loc: loc, fixedHour: spec.Hour&allHours != allHours}
	// cron gives up after five years; a schedule with no time in that span (30 2 31 feb *) never fires.
	probe := time.Date(2000, time.January, 1, 0, 0, 0, 0, loc)
	if out.Next(probe).IsZero() {
		return nil, fmt.Errorf("schedule %q never fires (no such date); check the day-of-month and month fields", expr)
	}
	return out, nil
}

// LoadLocation resolves an IANA time zone name; the empty name means def. "Local" is refused because it
// would silently mean the operator's zone.
func LoadLocation(name string, def *time.Location) (*time.Location, error) {
	switch name {
	case "":
		return def, nil
	case "Local":
		return nil, errors.New(`timeZone "Local" is ambiguous; omit timeZone to use the operator's zone, or name a zone such as Europe/Berlin`)
	}
	if loc, ok := zones.Load(name); ok {
		return loc.(*time.Location), nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("timeZone %q is not a known IANA time zone (examples: UTC, Europe/Berlin, America/New_York): %w", name, err)
	}
	zones.Store(name, loc)
	return loc, nil
}

// zones caches loaded locations by name: loading parses the zone database (tens of microseconds), and
// every reconcile of an object with schedules needs its rules' zones. Only valid names are cached.
var zones sync.Map

// Location returns the zone the schedule is read in.
func (s *Schedule) Location() *time.Location { return s.loc }

// Next returns the first execution strictly after t, or the zero time if there is none within five
// years.
func (s *Schedule) Next(t time.Time) time.Time {
	n := s.spec.Next(t)
	if n.IsZero() || !s.fixedHour {
		return n
	}
	// A wall-clock time inside a spring-forward gap would be skipped: fire when the clock jumps instead.
	if jump, ok := s.gapExecution(t, n); ok {
		return jump
	}
	// A wall-clock time repeated by a fall-back fires only the first time.
	for repeated(n.In(s.loc)) {
		n = s.spec.Next(n)
		if n.IsZero() {
			return n
		}
	}
	return n
}

// Latest returns the latest execution in [from, to], if any. Its cost grows with the number of
// executions in the smallest look-back window (1h, 1d, 8d, 32d, 1y, ...) that holds one.
func (s *Schedule) Latest(from, to time.Time) (time.Time, bool) {
	if to.Before(from) {
		return time.Time{}, false
	}
	for _, w := range []time.Duration{time.Hour, 24 * time.Hour, 8 * 24 * time.Hour, 32 * 24 * time.Hour, 366 * 24 * time.Hour, to.Sub(from)} {
		start := to.Add(-w)
		if start.Before(from) {
			start = from
		}
		f := s.firstAtOrAfter(start)
		if f.IsZero() || f.After(to) {
			if !start.After(from) {
				return time.Time{}, false
			}
			continue
		}
		for {
			n := s.Next(f)
			if n.IsZero() || n.After(to) {
				return f, true
			}
			f = n
		}
	}
	return time.Time{}, false
}

// firstAtOrAfter returns the first execution at or after t (zero if none).
func (s *Schedule) firstAtOrAfter(t time.Time) time.Time {
	f := s.Next(t.Add(-time.Second))
	for !f.IsZero() && f.Before(t) {
		f = s.Next(f)
	}
	return f
}

// repeated reports whether t's wall-clock time also occurred earlier, before a fall-back transition.
func repeated(t time.Time) bool {
	_, off := t.Zone()
	_, before := t.Add(-3 * time.Hour).Zone()
	if before <= off {
		return false
	}
	earlier := t.Add(-time.Duration(before-off) * time.Second)
	return earlier.Format(time.DateTime) == t.Format(time.DateTime)
}

// gapExecution looks for a spring-forward transition in (t, n] whose skipped wall-clock times contain an
// execution, and returns the transition instant (the first instant after the jump).
func (s *Schedule) gapExecution(t, n time.Time) (time.Time, bool) {
	for from := t; from.Before(n); {
		tr, ok := nextTransition(from, n, s.loc)
		if !ok {
			return time.Time{}, false
		}
		_, offBefore := tr.Add(-time.Second).In(s.loc).Zone()
		_, offAfter := tr.In(s.loc).Zone()
		if offAfter > offBefore && tr.After(t) {
			// Read the schedule in the zone as it was before the jump: times in the gap exist there.
			before := *s.spec
			before.Location = time.FixedZone("", offBefore)
			gapEnd := tr.Add(time.Duration(offAfter-offBefore) * time.Second)
			if f := before.Next(tr.Add(-time.Second)); !f.IsZero() && f.Before(gapEnd) {
				return tr, true
			}
		}
		from = tr
	}
	return time.Time{}, false
}

// nextTransition returns the first instant in (a, b] at which loc's UTC offset differs from the one just
// before it, to the second.
func nextTransition(a, b time.Time, loc *time.Location) (time.Time, bool) {
	_, off := a.In(loc).Zone()
	const step = 12 * time.Hour
	for lo := a; lo.Before(b); lo = lo.Add(step) {
		hi := lo.Add(step)
		if hi.After(b) {
			hi = b
		}
		if _, o := hi.In(loc).Zone(); o == off {
			continue
		}
		// Offsets differ between lo and hi: bisect to the second.
		for hi.Sub(lo) > time.Second {
			mid := lo.Add(hi.Sub(lo) / 2)
			if _, o := mid.In(loc).Zone(); o == off {
				lo = mid
			} else {
				hi = mid
			}
		}
		return hi.Truncate(time.Second), true
	}
	return time.Time{}, false
}
