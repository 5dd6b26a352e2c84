package routing

import "fmt"

// Conflict reports an entry that claims a route another entry already holds: the same host, path
// prefix (of any kind: path prefix, ignored path or static route) and header set (compared after canonicalisation, so "Shop.example.com" and "shop.example.com",
// "/api/" and "/api", or no prefix and "/" are the same).
type Conflict struct {
	// Loser is the key ("namespace/name") of the entry that should be left out of the table.
	Loser string
	// Winner is the key of the entry that keeps the route.
	Winner string
	// Host, PathPrefix and Headers describe the first contested route of the loser, canonicalised.
	Host       string
	PathPrefix string
	Headers    []HeaderMatch
}

// String describes the conflict for a status condition message.
func (c Conflict) String() string {
	return fmt.Sprintf("%s claims host %q path prefix %q with %d header matches, already routed to %s",
		c.Loser, c.Host, c.PathPrefix, len(c.Headers), c.Winner)
}

// Conflicts returns the entries that would have to be dropped so that no two entries claim an
// identical route, one Conflict per dropped entry, in slice order.
//
// The winner is decided by slice order: entries are taken first to last, and an entry loses (as a
// whole) if any of its routes is identical to a route of an entry already taken; a loser claims
// nothing, so a later entry that only clashes with a loser is taken. Sort entries by the precedence
// you want before calling (for example oldest creation timestamp first, then namespace/name, as the
// Gateway API does). Entries that differ only in path prefix or headers do not conflict: Match
// resolves them by precedence.
//
// Invalid entries (see Entry.Validate) and repeats of a key already seen are skipped, not reported.
// Cost: linear in the total number of routes; not for the hot path. Safe for concurrent use.
func Conflicts(entries []Entry) []Conflict {
	claimed := map[string]string{} // routeKey -> winner key
	seen := map[string]bool{}
	var out []Conflict
	for i := range entries {
		e, err := entries[i].canonical()
		if err != nil || seen[e.Key()] {
			continue
		}
		seen[e.Key()] = true
		var keys []string
		var lost *Conflict
	routes:
		for _, host := range e.Hosts {
			for r := range entryRoutes(&e) {
				rk := routeKey(host, r.prefix, e.Headers)
				if winner, ok := claimed[rk]; ok {
					lost = &Conflict{Loser: e.Key(), Winner: winner, Host: host, PathPrefix: r.prefix, Headers: e.Headers}
					break routes
				}
				keys = append(keys, rk)
			}
		}
		if lost != nil {
			out = append(out, *lost)
			continue
		}
		for _, rk := range keys {
			claimed[rk] = e.Key()
		}
	}
	return out
}

// RouteKeys returns an identity for each route of the canonical entry e (see EncodeEntry): two
// canonical entries claim an identical route, in the sense of Conflicts, exactly when they share a
// key. A writer can index them to find the entries a change may put in or out of conflict.
func RouteKeys(e *Entry) []string {
	var out []string
	for _, host := range e.Hosts {
		for r := range entryRoutes(e) {
			out = append(out, routeKey(host, r.prefix, e.Headers))
		}
	}
	return out
}
