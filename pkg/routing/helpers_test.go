package routing

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/textproto"
	"reflect"
	"slices"
	"strings"
	"time"

	kdiff "k8s.io/apimachinery/pkg/util/diff"
)

// diff returns "" when want and got are deeply equal, else a readable diff (want → got).
//
// It stands in for cmp.Diff: github.com/google/go-cmp is in the module graph but not required by
// go.mod, and this package must not change go.mod. Equality is reflect.DeepEqual, as strict as cmp
// for these exported-field types; the rendering comes from apimachinery (JSON lines).
func diff(want, got any) string {
	if reflect.DeepEqual(want, got) {
		return ""
	}
	if d := kdiff.Diff(want, got); d != "" {
		return d
	}
	return fmt.Sprintf("want %#v\n got %#v", want, got) // equal JSON, unequal values (nil vs empty)
}

func ptr[T any](v T) *T { return &v }

// entry builds a valid Entry for key "ns/name" on hosts; opts adjust it.
func entry(key string, hosts []string, opts ...func(*Entry)) Entry {
	ns, name, _ := strings.Cut(key, "/")
	e := Entry{Namespace: ns, Name: name, Hosts: hosts, Service: "svc", Port: 80}
	for _, o := range opts {
		o(&e)
	}
	return e
}

func paths(p ...string) func(*Entry) { return func(e *Entry) { e.PathPrefixes = p } }

// hdr adds a header match; "Name=value" needs the value, "Name" only needs the header to be present.
func hdr(spec string) func(*Entry) {
	return func(e *Entry) {
		name, value, hasValue := strings.Cut(spec, "=")
		h := HeaderMatch{Name: name}
		if hasValue {
			h.Value = ptr(value)
		}
		e.Headers = append(e.Headers, h)
	}
}

func mustTable(t interface{ Fatalf(string, ...any) }, entries ...Entry) *Table {
	tbl, err := NewTable(entries)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	return tbl
}

// fullEntry sets every field, so codec tests notice a field that does not survive.
func fullEntry(key string) Entry {
	return entry(key, []string{"*.shop.example.com", "shop.example.com"}, paths("/api", "/cart"), hdr("X-Tenant=acme"), hdr("X-Debug"),
		func(e *Entry) {
			e.Generation = 7
			e.Port, e.PortName, e.TargetPort, e.Protocol, e.ClusterIP, e.ServePort = 8080, "http", 9090, ProtocolH2C, "10.96.0.10", 20001
			e.Timeouts = Timeouts{Readiness: 1500 * time.Millisecond, Request: 2*time.Minute + 1, ResponseHeader: 10 * time.Second}
			e.ColdStart = ColdStart{
				QueueLimit: 50,
				Fallback:   &Backend{Service: "fallback", Port: 80, PortName: "web", TargetPort: 8000, Protocol: ProtocolHTTP, ClusterIP: "fd00::11"},
				Placeholder: &Placeholder{StatusCode: 503, Headers: map[string]string{"Retry-After": "5", "Content-Type": "text/html"},
					Body: "<h1>Waking up… ☕</h1>"},
				WaitingPage: &WaitingPage{Refresh: 3, HTML: "<p>Starting… ☕</p>"},
			}
			e.ZoneAware = ptr(false)
			e.ViaService = true
		})
}

// syntheticEntries returns n valid entries shaped like a large cluster: mostly one or two exact hosts
// per app, every 10th a tenant wildcard, every 10th a path on a shared API host, some with header
// matches, timeouts and cold-start settings. Names are made of random syllables so that the data
// compresses about as well as real names do, not as well as "app-1", "app-2", ... would.
func syntheticEntries(n int) []Entry {
	r := rand.New(rand.NewPCG(42, uint64(n)))
	syllables := strings.Fields("ka lo mi nu pe ra si to vu we xa yo ze bri cha dro fle gri kro pla " +
		"shi sto tra zum bel cor dan fen gal hor jin kel mor nix pol quin rus sel tam urn vex wil yar zed")
	word := func(parts int) string {
		var b strings.Builder
		for range parts {
			b.WriteString(syllables[r.IntN(len(syllables))])
		}
		return b.String()
	}
	domains := make([]string, 50)
	for i := range domains {
		domains[i] = word(2) + "." + []string{"com", "io", "net", "dev", "cloud"}[i%5]
	}
	out := make([]Entry, 0, n)
	for i := range n {
		ns, app := word(2)+"-"+word(1), word(2+r.IntN(2))+fmt.Sprintf("-%d", i)
		domain := domains[r.IntN(len(domains))]
		var e Entry
		switch i % 10 {
		case 0:
			e = entry(ns+"/"+app, []string{"*." + app + "." + domain})
		case 1:
			e = entry(ns+"/"+app, []string{"api." + domain}, paths("/"+app, "/v2/"+app))
		case 2:
			e = entry(ns+"/"+app, []string{app + "." + domain, app + "." + ns + ".internal." + domain})
		default:
			e = entry(ns+"/"+app, []string{app + "." + domain})
		}
		e.Service = "svc-" + app
		e.Port, e.PortName, e.TargetPort = 80, "http", int32(8000+r.IntN(1000))
		e.Generation = int64(1 + r.IntN(40))
		if i%7 == 0 {
			e.Headers = []HeaderMatch{{Name: "X-Canary", Value: ptr("true")}}
		}
		if i%3 == 0 {
			e.Timeouts = Timeouts{Readiness: time.Duration(1+r.IntN(120)) * time.Second}
		}
		if i%5 == 0 {
			e.ColdStart.QueueLimit = int32(100 + r.IntN(900))
		}
		if i%50 == 0 {
			e.ColdStart.Placeholder = &Placeholder{StatusCode: 503, Headers: map[string]string{"Retry-After": "10"},
				Body: "<html><body>" + app + " is starting, retrying in 10 seconds</body></html>"}
		}
		out = append(out, e)
	}
	return out
}

// referenceMatch is a deliberately naive Match: score every route of every entry and take the best
// (host level, prefix length, header count), ties to the first entry in key order. It returns the key
// of the winner or "".
func referenceMatch(tbl *Table, host, path string, header http.Header) string {
	if path == "" {
		path = "/"
	}
	name, ipLiteral := normalizeHost(host)
	levelOf := func(h string) int {
		switch {
		case h == "*":
			return 0
		case ipLiteral:
		case strings.HasPrefix(h, "*."):
			base := h[1:] // ".example.com"
			if strings.HasSuffix(name, base) && len(name) > len(base) && name[0] != '.' {
				return len(base)
			}
		case h == name:
			return 1 << 20
		}
		return -1
	}
	// The namespaces routing each level the name matches; the most specific level owns the name, and
	// a less specific level serves only when all its entries are of the owner's namespace (or the
	// owning level mixes namespaces, as only old tables do).
	levelNS := map[int]map[string]bool{}
	top := -1
	for _, e := range tbl.entries() {
		for _, h := range e.Hosts {
			if l := levelOf(h); l >= 0 {
				if levelNS[l] == nil {
					levelNS[l] = map[string]bool{}
				}
				levelNS[l][e.Namespace] = true
				top = max(top, l)
			}
		}
	}
	serves := func(level int) bool {
		if level == top || len(levelNS[top]) != 1 {
			return true
		}
		return len(levelNS[level]) == 1 && maps.Equal(levelNS[level], levelNS[top])
	}
	best, bestScore := "", [3]int{-1}
	for i := range tbl.entries() {
		e := tbl.entries()[i]
		if !referenceHeaders(e.Headers, header) {
			continue
		}
		for _, h := range e.Hosts {
			level := levelOf(h)
			if level < 0 || !serves(level) {
				continue
			}
			// Ignored paths and static routes are prefixes like the others.
			prefixes := append(slices.Clone(routePrefixes(e)), e.Ignored...)
			for _, sr := range e.Static {
				prefixes = append(prefixes, sr.PathPrefix)
			}
			for _, p := range prefixes {
				if p != "/" && path != p && !strings.HasPrefix(path, p+"/") {
					continue
				}
				score := [3]int{level, len(p), len(e.Headers)}
				if greater(score, bestScore) {
					best, bestScore = e.Key(), score
				}
			}
		}
	}
	return best
}

func greater(a, b [3]int) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] > b[i]
		}
	}
	return false
}

func referenceHeaders(want []HeaderMatch, header http.Header) bool {
	for _, w := range want {
		var values []string
		for k, v := range header {
			if strings.EqualFold(k, w.Name) && textproto.CanonicalMIMEHeaderKey(k) == k {
				values = append(values, v...)
			}
		}
		if len(values) == 0 {
			return false
		}
		found := w.Value == nil
		for _, v := range values {
			found = found || v == *w.Value
		}
		if !found {
			return false
		}
	}
	return true
}
