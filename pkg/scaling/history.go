package scaling

import (
	"sort"
	"time"
)

// sample is an app's cumulative request total as observed at a point in time (Unix nanoseconds).
type sample struct {
	at    int64
	total uint64
}

// history is an app's cumulative request total over time, used to answer "how many requests in
// this window". It is append-only from the point of view of published snapshots: append never
// writes to an element an earlier copy of the history can read (it either writes past every
// published length or copies into a new array), so a history value can be shared with readers
// without locks.
type history struct {
	// base is the total before samples[0] (or the current total when samples is empty).
	base    uint64
	samples []sample
}

// total is the latest cumulative value.
func (h history) total() uint64 {
	if n := len(h.samples); n > 0 {
		return h.samples[n-1].total
	}
	return h.base
}

// lastAt is when the total last changed; zero when it never did.
func (h history) lastAt() int64 {
	if n := len(h.samples); n > 0 {
		return h.samples[n-1].at
	}
	return 0
}

// since counts the requests observed at or after start (Unix nanoseconds).
func (h history) since(start int64) uint64 {
	i := sort.Search(len(h.samples), func(i int) bool { return h.samples[i].at >= start })
	before := h.base
	if i > 0 {
		before = h.samples[i-1].total
	}
	return h.total() - before
}

// inWindow counts the requests in the window of length w ending at now, with the window's start
// aligned to granularity g the way rate windows are bucketed: the window is the w/g buckets of
// length g up to and including the one that holds now.
func (h history) inWindow(now time.Time, w, g time.Duration) uint64 {
	return h.since(windowStart(now, w, g))
}

func windowStart(now time.Time, w, g time.Duration) int64 {
	if g <= 0 {
		g = w
	}
	n := now.UnixNano()
	bucket := n - mod(n, int64(g))
	return bucket + int64(g) - int64(w)
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// appended returns h with total observed at now. When the backing array is full it compacts
// instead of growing blindly: samples older than keep before now are folded into base and samples
// within one granularity bucket collapse to the bucket's last one (exact for windows aligned to g,
// which is how inWindow aligns them). The result never shares a written element with h.
func (h history) appended(now time.Time, total uint64, keep, g time.Duration) history {
	s := sample{at: now.UnixNano(), total: total}
	if len(h.samples) < cap(h.samples) {
		h.samples = append(h.samples, s)
		return h
	}
	cutoff := windowStart(now, keep, g)
	out := history{base: h.base}
	kept := make([]sample, 0, len(h.samples)+1)
	for _, x := range append(h.samples[:len(h.samples):len(h.samples)], s) {
		if x.at < cutoff {
			out.base = x.total
			continue
		}
		if n := len(kept); n > 0 && g > 0 && x.at/int64(g) == kept[n-1].at/int64(g) {
			kept[n-1] = x
			continue
		}
		kept = append(kept, x)
	}
	c := 2 * len(kept)
	if c < 8 {
		c = 8
	}
	out.samples = make([]sample, len(kept), c)
	copy(out.samples, kept)
	return out
}
