package h1

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
)

// FuzzRewrittenTarget: a rewritten target (a path prefix rewrite) goes out the same way on both
// paths. When Request.SetTarget takes it, the event loops' request line carries exactly the target
// net/http sends for the URL SetURLTarget made of it (url.URL.RequestURI, as Request.Write writes
// it); a target SetTarget refuses is left to net/http, which escapes it.
func FuzzRewrittenTarget(f *testing.F) {
	for _, s := range []string{"/", "/x?", "/a%2Fb?x", "/cart?item=1;size=2&q=%zz", "/a b", "/\u00fc", "/%zz",
		"/%2e%2e/x", "//evil.example/x", "/x#y", "x", "/a?b c", "/;a=b@c:d", "/%", "/~!$&'()*+,;=:@[]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, target string) {
		var rq Request
		if !rq.Parse("GET /orig HTTP/1.1\r\nHost: a\r\n\r\n") {
			t.Fatal("the base request does not parse")
		}
		if !rq.SetTarget(target) {
			if _, ok := requestPath(target); ok && strings.HasPrefix(target, "/") {
				t.Fatalf("SetTarget refuses %q, which a client could send the loops", target)
			}
			return
		}
		var b bytes.Buffer
		rq.Write(&b, Peer{})
		line, _, _ := strings.Cut(b.String(), "\r\n")
		if want := "GET " + target + " HTTP/1.1"; line != want {
			t.Fatalf("the loops send %q for %q", line, target)
		}
		u := &url.URL{Path: "/orig"}
		SetURLTarget(u, target)
		if got := u.RequestURI(); got != target {
			t.Fatalf("for %q the loops send the target as it is, net/http sends %q", target, got)
		}
	})
}
