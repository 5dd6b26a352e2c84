package h1

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Differential fuzz targets: each parser, writer and framer of the package against net/http.
// `make test` runs them on their seeds (testdata/fuzz/<FuzzName>/ and the f.Add calls below); `make
// fuzz` runs them for longer (see docs/development.md).

// fuzzClientIP is the client address X-Forwarded-For gets; refConn's.
const fuzzClientIP = "192.0.2.1"

// fuzzPeers are the peers every request head is written for: untrusted and trusted, over
// cleartext and TLS (the rules are the same code on both engine paths; only the net/http path
// serves TLS).
var fuzzPeers = []Peer{
	{IP: fuzzClientIP},
	{IP: fuzzClientIP, Trusted: true},
	{IP: fuzzClientIP, TLS: true},
	{IP: fuzzClientIP, Trusted: true, TLS: true},
}

// fuzzTrusted trusts fuzzClientIP.
var fuzzTrusted = TrustedProxies{netip.MustParsePrefix("192.0.2.0/24")}

// maxClientHead is the largest request head the event loops read (the server's MaxHeaderBytes,
// net/http's default when not set).
const maxClientHead = http.DefaultMaxHeaderBytes

// requestHead returns the head at the start of in when the event loops would read it (CRLF CRLF
// within maxClientHead), nil otherwise (net/http reads it).
func requestHead(in []byte) []byte {
	end := HeadEnd(in)
	if end < 0 || end > maxClientHead {
		return nil
	}
	return in[:end]
}

func addRequestSeeds(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
}

// FuzzFastRequest: a head Request.Parse takes is served by the event loops, any other by net/http.
// So a head net/http's server rejects must be refused; a head Parse takes must give the method,
// target, decoded path, Host, header fields, body length and keep-alive net/http's handler sees,
// with no Transfer-Encoding; and the head Write sends for it frames the same body.
func FuzzFastRequest(f *testing.F) {
	addRequestSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		block := requestHead(in)
		if block == nil {
			return
		}
		rq := new(Request)
		if !rq.Parse(string(block)) {
			return // net/http serves it
		}
		ref := refRequest(block)
		if ref == nil {
			t.Fatalf("Parse takes %q; net/http's server rejects it", block)
		}
		if ref.Proto != "HTTP/1.1" || ref.ContentLength != rq.BodyLen || len(ref.TransferEncoding) > 0 {
			t.Fatalf("Parse reads %q with a %d-byte body; net/http reads %s with Content-Length %d, Transfer-Encoding %q",
				block, rq.BodyLen, ref.Proto, ref.ContentLength, ref.TransferEncoding)
		}
		got := &seenRequest{
			Method: rq.Method, RequestURI: rq.Target, Path: rq.Path, Proto: "HTTP/1.1", Host: rq.Host,
			Header: http.Header{}, ContentLength: rq.BodyLen, Close: rq.Close,
		}
		for _, h := range rq.headers {
			if !EqualFold(h.name, "Host") {
				k := http.CanonicalHeaderKey(h.name)
				got.Header[k] = append(got.Header[k], h.value)
			}
		}
		// net/http keeps one of several equal Content-Length values; Parse takes them only as
		// "0", and Write writes its own.
		if cl := got.Header["Content-Length"]; len(cl) > 1 {
			got.Header["Content-Length"] = cl[:1]
		}
		if rq.noCache { // net/http's parser adds it; Write adds it to what it writes
			got.Header["Cache-Control"] = []string{"no-cache"}
		}
		if d := cmp.Diff(ref, got); d != "" {
			t.Fatalf("Parse(%q) differs from net/http (-net/http +Parse):\n%s", block, d)
		}
		var out bytes.Buffer
		rq.Write(&out, Peer{IP: fuzzClientIP})
		w, err := http.ReadRequest(bufio.NewReader(&out))
		if err != nil {
			t.Fatalf("Write writes %q for %q: %v", out.Bytes(), block, err)
		}
		if w.ContentLength != rq.BodyLen && !(rq.BodyLen == 0 && w.ContentLength == -1) || len(w.TransferEncoding) > 0 {
			t.Fatalf("Write writes %q for %q: Content-Length %d, want %d", out.Bytes(), block, w.ContentLength, rq.BodyLen)
		}
	})
}

// FuzzRawRequestWrite: the head Request.Write sends upstream, read by http.ReadRequest, must be the
// request the net/http path (the ReverseProxy with Rewrite, written by Request.Write) sends for the
// same client request from the same peer (fuzzPeers): method, target, Host, header fields
// (hop-by-hop removed, X-Forwarded-* set or passed on), body framing.
func FuzzRawRequestWrite(f *testing.F) {
	addRequestSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		block := requestHead(in)
		if block == nil {
			return
		}
		rq := new(Request)
		if !rq.Parse(string(block)) || rq.BodyLen > 1<<20 {
			return
		}
		for _, p := range fuzzPeers {
			var out bytes.Buffer
			rq.Write(&out, p)
			br := bufio.NewReader(bytes.NewReader(out.Bytes()))
			up, err := http.ReadRequest(br)
			if err != nil {
				t.Fatalf("Write writes %q for %q; net/http cannot read it: %v", out.Bytes(), block, err)
			}
			if br.Buffered() > 0 {
				t.Fatalf("Write writes %q for %q: %d bytes after the head", out.Bytes(), block, br.Buffered())
			}
			got := seen(up)
			want := refForwarded(t, append(bytes.Clone(block), bytes.Repeat([]byte("x"), int(rq.BodyLen))...), p)
			if want == nil {
				t.Fatalf("Write forwards %q; net/http's server rejects it", block)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Fatalf("for %q from %+v Write sends %q, which differs from the net/http path's (-net/http +Write):\n%s", block, p, out.Bytes(), d)
			}
		}
	})
}

// refForwarded returns the request the net/http path sends upstream for the request in (its head
// and body) from peer p (fuzzClientIP, trusted or not, over TLS or not), as the upstream's parser
// reads it, or nil when net/http's server rejects it.
func refForwarded(t *testing.T, in []byte, p Peer) *seenRequest {
	var want *seenRequest
	var target string
	var trusted TrustedProxies
	if p.Trusted {
		trusted = fuzzTrusted
	}
	rp := &httputil.ReverseProxy{Rewrite: trusted.Rewrite}
	rp.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		var b bytes.Buffer
		if err := r.Write(&b); err != nil {
			return nil, err
		}
		up, err := http.ReadRequest(bufio.NewReader(&b))
		if err != nil {
			return nil, err
		}
		want = seen(up)
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	var rpErr error
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		rpErr = err
		w.WriteHeader(http.StatusBadGateway)
	}
	accepted := false
	refServe(in, func(w http.ResponseWriter, r *http.Request) {
		if accepted {
			return
		}
		accepted = true
		r.URL.Host = "upstream.invalid" // RoundTrip's endpoint
		if p.TLS {
			r.TLS = &tls.ConnectionState{} // as the TLS port's server sets it
		}
		target = r.RequestURI
		rp.ServeHTTP(w, r)
	})
	if rpErr != nil {
		t.Fatalf("the net/http path fails to forward %q: %v", in, rpErr)
	}
	if accepted && want == nil {
		t.Fatalf("the net/http path sends nothing for %q", in)
	}
	if want != nil {
		// The target goes upstream as the client sent it (Rewrite keeps the query as sent),
		// where the ReverseProxy re-encodes a query it cannot parse ("/?a=%zz&b=\xff" → "/?b=%FF").
		want.RequestURI = target
	}
	return want
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Seeds every run starts from; testdata/fuzz/<FuzzName>/ holds the rest (smuggling shapes, odd
// framing, inputs the fuzzer found).
var requestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET /a/b?c=d&e HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: x\r\nConnection: close\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX-Forwarded-For: 10.0.0.1\r\nTe: trailers\r\n\r\n",
	// Forged forwarding headers: from an untrusted peer none reaches the upstream.
	"GET /f HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\nx-forwarded-for: 10.0.0.2, 10.0.0.3\r\nX-Forwarded-Host: evil.example\r\n" +
		"X-Forwarded-Proto: https\r\nx-forwarded-port: 443\r\nX-Real-IP: 10.0.0.4\r\nX-Forwarded-Host: second\r\n\r\n",
	"GET /f HTTP/1.1\r\nHost: h\r\nX-Forwarded-For:\r\nX-Forwarded-Host:\r\nX-Forwarded-Proto:\r\nX-Real-Ip:\r\n\r\n",
	"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
	"PUT /up HTTP/1.1\r\nHost: h\r\nContent-Length: 05\r\n\r\nhello",
	"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
	"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\nhello",
	"GET /up HTTP/1.1\r\nHost: h\r\nContent-Length: 123456789012345678\r\n\r\n",
	"GET /a%2Fb/c%20d?x=%zz HTTP/1.1\r\nHost: h\r\n\r\n",
	"GET /a%zzb HTTP/1.1\r\nHost: h\r\n\r\n",
	"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
}
