package controller

import (
	"cmp"
	"maps"
	"slices"

	"github.com/httpscale/httpscale/pkg/routing"
)

// The propagation ledger: which table versions this process wrote or read, in which order, and which
// version first held each object's current generation. The prober and the main reconcile read it
// (Written) to tell how many interceptors route an object.

// introduction records the first written table that held a key at a generation.
type introduction struct {
	generation int64
	seq        uint64 // order of the table among the tables this process wrote or read
	version    string
}

// Written is an immutable view of the last table written to the ConfigMaps.
type Written struct {
	// Version of the table; empty before the first write.
	Version string
	// Conflicts by loser key.
	Conflicts map[string]routing.Conflict
	// versions maps every table version this process knows to its order.
	versions map[string]uint64
	// introduced maps each key in the table to the table that first held its current generation.
	introduced map[string]introduction
	// snap numbers the writer's state this view was written from (TableWriter.write); zero before
	// the first write of this process.
	snap uint64
}

// Introduced returns the version of the first table that held key at generation, if the current
// table holds it at that generation.
func (w *Written) Introduced(key string, generation int64) (version string, seq uint64, ok bool) {
	in, ok := w.introduced[key]
	if !ok || in.generation != generation {
		return "", 0, false
	}
	return in.version, in.seq, true
}

// Contains reports whether the written table holds key at any generation.
func (w *Written) Contains(key string) bool {
	_, ok := w.introduced[key]
	return ok
}

// Lost reports whether the written table reports key as the loser of a route conflict.
func (w *Written) Lost(key string) bool {
	_, ok := w.Conflicts[key]
	return ok
}

// Seq returns the order of a table version, or false for a version this process never wrote or read.
func (w *Written) Seq(version string) (uint64, bool) {
	s, ok := w.versions[version]
	return s, ok
}

// tableLedger numbers the table versions the writer records. Owned by the TableWriter's Start
// goroutine (tests call it directly).
type tableLedger struct {
	seq uint64
}

// maxKnownVersions bounds how many table versions the writer remembers for the propagation proof. A
// replica serving a version older than that is reported as not (yet) serving the current one.
const maxKnownVersions = 1024

// record returns the view after writing the table version, given the published generation of every
// key decided since the last write (-1: not in the table) and the conflicts. Every write of a new
// version gets the next sequence number, even when the same content was written before (a table A,
// then B, then A again): a replica still serving B must not count as serving what the second A
// introduced. Cost: one copy of the previous view's maps, whatever the number of changes.
func (l *tableLedger) record(prev *Written, version string, touched map[string]int64, conflicts map[string]routing.Conflict) *Written {
	next := &Written{Version: version, Conflicts: conflicts, versions: prev.versions, introduced: maps.Clone(prev.introduced)}
	seq := uint64(0)
	if version != prev.Version {
		if s, ok := prev.versions[version]; ok && s == l.seq {
			seq = s // announced
		} else {
			l.seq++
			seq = l.seq
		}
	} else {
		seq = prev.versions[version]
	}
	for k, gen := range touched {
		if gen < 0 {
			delete(next.introduced, k)
			continue
		}
		if in, ok := prev.introduced[k]; !ok || in.generation != gen {
			next.introduced[k] = introduction{generation: gen, seq: seq, version: version}
		}
	}
	if version != prev.Version {
		oldest := seq
		for _, in := range next.introduced {
			oldest = min(oldest, in.seq)
		}
		next.versions = pruneVersions(prev.versions, oldest, maxKnownVersions-1)
		next.versions[version] = seq
	}
	return next
}

// announce returns prev with version known at the next sequence number, and nothing else changed:
// it is stored before the table is written, so that a probe answered with the new version finds it
// known (a replica serving it counts for everything introduced before it). Were it unknown until the
// write returned, the objects evaluated in that window would count no replica, and those the write
// did not change would never be re-evaluated: the prober re-queues objects only when its answers
// change, and the writer only the objects the write changed. Objects that version introduces are not
// introduced yet, so no object is counted as served by a table that does not exist.
func (l *tableLedger) announce(prev *Written, version string) *Written {
	l.seq++
	versions := maps.Clone(prev.versions)
	versions[version] = l.seq
	return &Written{Version: prev.Version, Conflicts: prev.Conflicts, versions: versions, introduced: prev.introduced, snap: prev.snap}
}

// pruneVersions copies the versions whose sequence is at least oldest (no current entry was introduced
// before them, so older ones prove nothing), keeping at most limit of the newest.
func pruneVersions(versions map[string]uint64, oldest uint64, limit int) map[string]uint64 {
	type vs struct {
		v string
		s uint64
	}
	keep := make([]vs, 0, len(versions))
	for v, s := range versions {
		if s >= oldest {
			keep = append(keep, vs{v, s})
		}
	}
	if len(keep) > limit {
		slices.SortFunc(keep, func(a, b vs) int { return cmp.Compare(b.s, a.s) })
		keep = keep[:limit]
	}
	out := make(map[string]uint64, len(keep)+1)
	for _, k := range keep {
		out[k.v] = k.s
	}
	return out
}

// changedKeys returns the keys among touched whose routing or conflict state differs between prev
// and next.
func changedKeys(prev, next *Written, touched map[string]int64) []string {
	var keys []string
	for k := range touched {
		in, ok := next.introduced[k]
		old, had := prev.introduced[k]
		c, lost := next.Conflicts[k]
		oc, lostBefore := prev.Conflicts[k]
		if ok != had || in != old || lost != lostBefore || c.Winner != oc.Winner {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
