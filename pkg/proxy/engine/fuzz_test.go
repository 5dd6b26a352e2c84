package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// Differential fuzz targets: each hand-written HTTP/1.1 parser or writer against net/http. `make
// test` runs them on their seeds (testdata/fuzz/<FuzzName>/ and the f.Add calls below); `make
// fuzz` runs them for longer (see docs/development.md).

// fuzzClientIP is the client address the raw path appends to X-Forwarded-For; refConn's.
const fuzzClientIP = "192.0.2.1"

// fastHead returns the header block at the start of in when the fast path's screen passes it, or
// nil when net/http reads the request (no CRLF CRLF in the read buffer, or refused by fastRequest).
func fastHead(in []byte) []byte {
	end := headerEnd(in)
	if end < 0 || end > h1ReadBuffer || !fastRequest(in[:end]) {
		return nil
	}
	return in[:end]
}

func addRequestSeeds(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
}

// FuzzFastRequest: a head the screen (fastRequest) passes is served by the raw path when its parser
// (rawRequest.parse) takes it, else parsed by http.ReadRequest, whose error is answered 400 (see
// serveOne). So: a head net/http's server rejects must be declined by the parser and rejected by
// http.ReadRequest; a head it accepts must be a body-less HTTP/1.1 request that http.ReadRequest
// accepts too, and one the parser takes must give the same method, target, Host, header fields and
// keep-alive as net/http's handler sees.
func FuzzFastRequest(f *testing.F) {
	addRequestSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		checkBodyScreen(t, in)
		block := fastHead(in)
		if block == nil {
			return // net/http reads it: nothing of ours to compare
		}
		ref := refRequest(block)
		rq := new(rawRequest)
		raw := rq.parse(string(block))
		_, readErr := http.ReadRequest(bufio.NewReader(bytes.NewReader(block)))
		if ref == nil {
			if raw {
				t.Fatalf("the raw path takes %q; net/http's server rejects it", block)
			}
			if readErr == nil {
				t.Fatalf("the fast path serves %q; net/http's server rejects it", block)
			}
			return // answered 400 by both
		}
		if !raw && readErr != nil {
			t.Fatalf("the fast path answers 400 to %q (%v); net/http's server accepts it", block, readErr)
		}
		if ref.Proto != "HTTP/1.1" || ref.ContentLength != 0 || len(ref.TransferEncoding) > 0 {
			t.Fatalf("fastRequest accepts %q; net/http reads %s with Content-Length %d, Transfer-Encoding %q",
				block, ref.Proto, ref.ContentLength, ref.TransferEncoding)
		}
		if !raw {
			return // served from http.ReadRequest's request
		}
		got := &seenRequest{
			Method: rq.method, RequestURI: rq.target, Proto: "HTTP/1.1", Host: rq.host,
			Header: http.Header{}, TransferEncoding: ref.TransferEncoding, Close: rq.close,
		}
		for _, h := range rq.headers {
			if !asciiEqualFold(h.name, "Host") {
				k := http.CanonicalHeaderKey(h.name)
				got.Header[k] = append(got.Header[k], h.value)
			}
		}
		// net/http keeps one of several equal Content-Length values; the raw path drops the lines
		// (it writes its own, see FuzzRawRequestWrite) and fastRequest lets only "0" through.
		if cl := got.Header["Content-Length"]; len(cl) > 1 {
			got.Header["Content-Length"] = cl[:1]
		}
		if rq.noCache { // net/http's parser adds it; the raw path adds it to what it writes
			got.Header["Cache-Control"] = []string{"no-cache"}
		}
		if d := cmp.Diff(ref, got); d != "" {
			t.Fatalf("rawRequest.parse(%q) differs from net/http (-net/http +raw):\n%s", block, d)
		}
	})
}

// checkBodyScreen: a head the event loop's screen (screenRequest) passes with a body is, for
// net/http's server, an HTTP/1.1 request with that Content-Length and no Transfer-Encoding; the
// head the raw path writes for it frames the same length; without its Content-Length lines it is
// one fastRequest passes (the other rules are the same).
func checkBodyScreen(t *testing.T, in []byte) {
	end := headerEnd(in)
	if end < 0 || end > h1ReadBuffer {
		return
	}
	block := in[:end]
	n, ok := screenRequest(block)
	if !ok || n == 0 {
		return
	}
	ref := refRequest(block)
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(block)))
	if err != nil || ref == nil {
		t.Fatalf("screenRequest passes %q with a %d-byte body; net/http rejects it (%v)", block, n, err)
	}
	if req.ContentLength != n || len(req.TransferEncoding) > 0 || req.ProtoMinor != 1 || req.ProtoMajor != 1 {
		t.Fatalf("screenRequest reads a %d-byte body in %q; net/http reads %s, Content-Length %d, Transfer-Encoding %q",
			n, block, req.Proto, req.ContentLength, req.TransferEncoding)
	}
	var stripped bytes.Buffer
	for line := range bytes.Lines(block) {
		if name, _, _ := bytes.Cut(line, []byte(":")); !asciiEqualFold(name, "Content-Length") {
			stripped.Write(line)
		}
	}
	if !fastRequest(stripped.Bytes()) {
		t.Fatalf("screenRequest passes %q; fastRequest refuses it without its Content-Length", block)
	}
	rq := new(rawRequest)
	if !rq.parse(string(block)) {
		return // the general path serves it
	}
	rq.bodyLen = n
	var out bytes.Buffer
	rq.write(&out, fuzzClientIP)
	written := out.String()
	w, err := http.ReadRequest(bufio.NewReader(&out))
	if err != nil {
		t.Fatalf("the raw path writes %q for %q: %v", written, block, err)
	}
	if w.ContentLength != n || len(w.TransferEncoding) > 0 {
		t.Fatalf("the raw path writes %q for %q: Content-Length %d, want %d", written, block, w.ContentLength, n)
	}
}

// FuzzRawRequestWrite: the head the raw path writes upstream (rawRequest.write), read by
// http.ReadRequest, must be the request the general path (the ReverseProxy with the interceptor's
// rewrite, written by Request.Write) sends for the same client head: method, target, Host, header
// fields (hop-by-hop removed, X-Forwarded-* set), body framing.
func FuzzRawRequestWrite(f *testing.F) {
	addRequestSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		block := fastHead(in)
		if block == nil {
			return
		}
		rq := new(rawRequest)
		if !rq.parse(string(block)) {
			return
		}
		var out bytes.Buffer
		rq.write(&out, fuzzClientIP)
		br := bufio.NewReader(bytes.NewReader(out.Bytes()))
		up, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("the raw path writes %q for %q; net/http cannot read it: %v", out.Bytes(), block, err)
		}
		if br.Buffered() > 0 {
			t.Fatalf("the raw path writes %q for %q: %d bytes after the head", out.Bytes(), block, br.Buffered())
		}
		got := seen(up)
		want := refForwarded(t, block)
		if want == nil {
			t.Fatalf("the raw path forwards %q; net/http's server rejects it", block)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("for %q the raw path sends %q, which differs from the general path's (-general +raw):\n%s", block, out.Bytes(), d)
		}
	})
}

// refForwarded returns the request the general path sends upstream for head, as the upstream's
// parser reads it, or nil when net/http's server rejects head.
func refForwarded(t *testing.T, head []byte) *seenRequest {
	var want *seenRequest
	var target string
	rp := (&Engine{}).newReverseProxy()
	rp.ModifyResponse = nil
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
	refServe(head, func(w http.ResponseWriter, r *http.Request) {
		if accepted {
			return
		}
		accepted = true
		r.URL.Host = "upstream.invalid" // RoundTrip's endpoint
		target = r.RequestURI
		rp.ServeHTTP(w, r)
	})
	if rpErr != nil {
		t.Fatalf("the general path fails to forward %q: %v", head, rpErr)
	}
	if accepted && want == nil {
		t.Fatalf("the general path sends nothing for %q", head)
	}
	if want != nil {
		// The target goes upstream as the client sent it (forwardDirect and the raw path), where
		// the ReverseProxy re-encodes a query it cannot parse ("/?a=%zz&b=\xff" → "/?b=%FF").
		want.RequestURI = target
	}
	return want
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// FuzzRawResponse: a response stream (head, body, and whatever follows) is relayed by rawRelay when
// parseRawResponse takes its head. Then net/http's ReadResponse must accept the stream with the
// same status and framing; the client must get the same header fields (hop-by-hop removed, Date
// added) and body as net/http reads; and the upstream connection must be reused exactly when
// net/http would find the next response on it (the body complete, no bytes left over, no close).
func FuzzRawResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, in []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		upC, upPeer := net.Pipe()
		defer func() { _ = upPeer.Close() }()
		tr := &h1Transport{now: time.Now, maxIdle: 1, idleTimeout: time.Hour, hosts: map[string]*hostPool{"up": {open: 1}},
			discarded: DiscardCounters{
				Leftover:    prometheus.NewCounter(prometheus.CounterOpts{Name: "leftover"}),
				Unsolicited: prometheus.NewCounter(prometheus.CounterOpts{Name: "unsolicited"}),
			}}
		pc := &h1Conn{t: tr, addr: "up", c: upC, br: bufio.NewReaderSize(bytes.NewReader(in), h1ConnBuffer)}
		headLen, err := readHeadLen(pc)
		if err != nil || headLen == 0 {
			_ = upC.Close()
			return // incomplete, too large or bare LF: relayed by net/http
		}
		hb, _ := pc.br.Peek(headLen)
		if _, ok := parseRawResponse(hb); !ok {
			_ = upC.Close()
			return // relayed by net/http
		}

		rbr := bufio.NewReader(bytes.NewReader(in))
		ref, err := http.ReadResponse(rbr, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("parseRawResponse accepts %q; net/http rejects it: %v", in, err)
		}
		if len(ref.TransferEncoding) > 0 || ref.ContentLength < 0 && method != http.MethodHead {
			t.Fatalf("parseRawResponse accepts %q as Content-Length framed; net/http reads Transfer-Encoding %q, Content-Length %d",
				in, ref.TransferEncoding, ref.ContentLength)
		}
		refBody, refErr := io.ReadAll(ref.Body)
		rest, _ := io.ReadAll(rbr)
		refReuse := refErr == nil && !ref.Close && len(rest) == 0

		var out bytes.Buffer
		sc := &h1ServerConn{s: &h1Server{}, bw: bufio.NewWriter(&out)}
		rq := new(rawRequest)
		if !rq.parse(method + " / HTTP/1.1\r\nHost: example.com\r\n\r\n") {
			t.Fatal("the request does not parse")
		}
		x := &codeExchange{}
		keep := (&Engine{fast: tr}).rawRelay(sc, rq, x, pc, headLen)
		code := x.code
		_ = sc.bw.Flush()
		reused := tr.hosts["up"] != nil && len(tr.hosts["up"].idle) == 1
		if reused {
			_ = upC.Close()
		}
		if code != ref.StatusCode {
			t.Fatalf("for %q rawRelay records %d; net/http reads %d", in, code, ref.StatusCode)
		}
		if reused != refReuse {
			t.Fatalf("for %q (%s) rawRelay reuses the upstream connection: %v; net/http would: %v (body error %v, %d bytes left, Close %v)",
				in, method, reused, refReuse, refErr, len(rest), ref.Close)
		}
		if keep != (refErr == nil) {
			t.Fatalf("for %q rawRelay keeps the client connection: %v; net/http reads the body with error %v", in, keep, refErr)
		}

		cbr := bufio.NewReader(&out)
		cl, err := http.ReadResponse(cbr, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("for %q rawRelay writes %q, which net/http cannot read: %v", in, out.Bytes(), err)
		}
		clBody, clErr := io.ReadAll(cl.Body)
		if refErr == nil && (clErr != nil || cbr.Buffered() > 0) {
			t.Fatalf("for %q rawRelay writes %q: body error %v, %d bytes after the response", in, out.Bytes(), clErr, cbr.Buffered())
		}
		if refErr != nil && clErr == nil {
			t.Fatalf("for %q (body error %v) rawRelay writes %q, a complete response", in, refErr, out.Bytes())
		}
		if !bytes.Equal(clBody, refBody) {
			t.Fatalf("for %q the client gets the body %q; net/http reads %q", in, clBody, refBody)
		}
		want := ref.Header.Clone()
		for _, k := range hopHeaders {
			delete(want, k)
		}
		if _, ok := want["Date"]; !ok {
			want["Date"] = cl.Header["Date"]
		}
		if cl.StatusCode != ref.StatusCode || cl.Status != ref.Status {
			t.Fatalf("for %q the client gets %q; net/http reads %q", in, cl.Status, ref.Status)
		}
		if d := cmp.Diff(want, cl.Header); d != "" {
			t.Fatalf("for %q the client gets other header fields than net/http reads (-net/http +client):\n%s", in, d)
		}
	})
}

// FuzzResponseWriter: a handler's response written by h1Response (the fast path's writer, which
// also relays every response the raw path does not pass on itself: chunked, close-delimited, with
// trailers) must reach a client as what net/http's server writes for the same handler: status,
// body and trailers, framed so that the client finds the end (chunked or Content-Length).
func FuzzResponseWriter(f *testing.F) {
	f.Add([]byte("hello, world"), []byte{3, 0, 5}, "v", false, false)
	f.Add([]byte("hello, world"), []byte{}, "", true, false)
	f.Add(bytes.Repeat([]byte("x"), 5000), []byte{255, 1}, "a\r\nb", false, true)
	f.Add([]byte("0\r\n\r\n"), []byte{1, 1, 1}, "0", false, false)
	f.Add([]byte(""), []byte{}, "t", false, true)
	f.Fuzz(func(t *testing.T, body, cuts []byte, trailer string, declare, flush bool) {
		handle := func(w http.ResponseWriter) {
			h := w.Header()
			h.Set("Content-Type", "application/octet-stream") // no sniffing on either side
			h.Set("Trailer", "X-Fuzz-Trailer")
			if declare {
				h.Set("Content-Length", strconv.Itoa(len(body)))
			}
			rest := body
			for _, c := range cuts {
				n := min(int(c), len(rest))
				_, _ = w.Write(rest[:n])
				rest = rest[n:]
				if flush {
					w.(http.Flusher).Flush()
				}
			}
			_, _ = w.Write(rest)
			h.Set("X-Fuzz-Trailer", trailer)
		}
		const req = "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
		refOut := refServe([]byte(req), func(w http.ResponseWriter, _ *http.Request) { handle(w) })

		var out bytes.Buffer
		sc := &h1ServerConn{s: &h1Server{}, bw: bufio.NewWriter(&out)}
		w := new(h1Response)
		w.reset(sc, &http.Request{Method: http.MethodGet, Close: true})
		handle(w)
		w.end(true)

		want, wantErr := readAll(refOut)
		got, gotErr := readAll(out.Bytes())
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("net/http writes %q (read: %v); h1Response writes %q (read: %v)", refOut, wantErr, out.Bytes(), gotErr)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("net/http writes %q; h1Response writes %q (-net/http +h1Response):\n%s", refOut, out.Bytes(), d)
		}
	})
}

// readResult is what a client reads of one response.
type readResult struct {
	Status  string
	Body    string
	Trailer http.Header
	Left    int // bytes after the response
}

func readAll(b []byte) (*readResult, error) {
	br := bufio.NewReader(bytes.NewReader(b))
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	if res.ContentLength < 0 && len(res.TransferEncoding) == 0 {
		return nil, errors.New("close-delimited: a keep-alive client could not find the end")
	}
	return &readResult{Status: res.Status, Body: string(body), Trailer: res.Trailer, Left: br.Buffered()}, nil
}

// Seeds every run starts from; testdata/fuzz/<FuzzName>/ holds the rest (smuggling shapes, odd
// framing, inputs the fuzzer found).
var requestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
	"GET /a/b?c=d&e HTTP/1.1\r\nHost: example.com:8080\r\nUser-Agent: x\r\nConnection: close\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nX-Forwarded-For: 10.0.0.1\r\nTe: trailers\r\n\r\n",
	"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
	"PUT /up HTTP/1.1\r\nHost: h\r\nContent-Length: 05\r\n\r\nhello",
	"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
	"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: +5\r\n\r\nhello",
	"GET /up HTTP/1.1\r\nHost: h\r\nContent-Length: 123456789012345678\r\n\r\n",
}

var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabcdef",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nKeep-Alive: timeout=5\r\n\r\nshort",
}

// FuzzRelayResponse: an upstream response that the raw path does not pass on itself (chunked with
// trailers, close-delimited, 204/304, HTTP/1.0, ...) is read by http.ReadResponse and relayed by
// relayResponse through h1Response. A client must read from it what it reads when net/http's server
// relays the same upstream response with httputil.ReverseProxy: status, header fields, body,
// trailers, and a broken upstream body as a broken response. Deliberate differences: no Content-Type
// sniffing, and Date, Content-Length, Transfer-Encoding and Connection (the framing) may differ.
func FuzzRelayResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5;a=b\r\nhello\r\n0\r\nX-T: v\r\n\r\n"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"), false)
	f.Add([]byte("HTTP/1.0 200 OK\r\n\r\nuntil close"), true)
	f.Fuzz(func(t *testing.T, in []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		upstream := func() *http.Response {
			res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in)), &http.Request{Method: method})
			if err != nil || res.StatusCode < 200 {
				return nil // both paths answer 502, or the transports skip 1xx
			}
			return res
		}
		if upstream() == nil {
			return
		}

		rp := (&Engine{}).newReverseProxy()
		rp.ModifyResponse = nil
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
		rp.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
			res := upstream()
			res.Request = r
			return res, nil
		})
		clientReq := method + " / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"
		refOut := refServe([]byte(clientReq), func(w http.ResponseWriter, r *http.Request) {
			r.URL.Host = "upstream.invalid"
			rp.ServeHTTP(w, r)
		})

		var out bytes.Buffer
		sc := &h1ServerConn{s: &h1Server{}, bw: bufio.NewWriter(&out)}
		req := &http.Request{Method: method, Host: "example.com", Close: true, ProtoMajor: 1, ProtoMinor: 1}
		w := new(h1Response)
		w.reset(sc, req)
		res := upstream()
		res.Request = req
		func() {
			defer func() {
				if v := recover(); v != nil && v != http.ErrAbortHandler { //nolint:errorlint // sentinel value
					panic(v)
				} else if v != nil {
					_ = sc.bw.Flush() // what was written before the abort; the connection closes
				}
			}()
			if err := (&Engine{}).relayResponse(w, req, res, &codeExchange{}); err != nil {
				t.Fatalf("relayResponse refuses %q: %v", in, err)
			}
			w.end(true)
		}()

		want, wantErr := readRelayed(refOut, method)
		got, gotErr := readRelayed(out.Bytes(), method)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("for %q net/http relays %q (read: %v); h1Response writes %q (read: %v)", in, refOut, wantErr, out.Bytes(), gotErr)
		}
		if wantErr != nil {
			return
		}
		if _, ok := res.Header["Content-Type"]; !ok {
			delete(want.Header, "Content-Type") // net/http sniffs one
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("for %q net/http relays %q; h1Response writes %q (-net/http +h1Response):\n%s", in, refOut, out.Bytes(), d)
		}
	})
}

// relayed is what a client reads of a relayed response, framing aside.
type relayed struct {
	Status  string
	Header  http.Header
	Body    string
	Trailer http.Header
}

func readRelayed(b []byte, method string) (*relayed, error) {
	res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(b)), &http.Request{Method: method})
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	h := res.Header.Clone()
	for _, k := range []string{"Date", "Content-Length", "Transfer-Encoding", "Connection"} {
		delete(h, k)
	}
	return &relayed{Status: res.Status, Header: h, Body: string(body), Trailer: res.Trailer}, nil
}

// codeExchange is an Exchange that records the status it is told and answers failures with 502.
type codeExchange struct{ code int }

func (x *codeExchange) Plan() Plan                        { return Plan{} }
func (x *codeExchange) Ready() bool                       { return true }
func (x *codeExchange) Begin()                            {}
func (x *codeExchange) Wait(context.Context) error        { return nil }
func (x *codeExchange) Forwarding()                       {}
func (x *codeExchange) Pick(attempt int) (string, bool)   { return "up", attempt == 0 }
func (x *codeExchange) Refused(string, int, error) bool   { return false }
func (x *codeExchange) Forwarded(string)                  {}
func (x *codeExchange) Responded(code int, _ http.Header) { x.code = code }
func (x *codeExchange) End()                              {}
func (x *codeExchange) Release()                          {}
func (x *codeExchange) Fail(err error, h http.Header) Reply {
	x.code = http.StatusBadGateway
	h.Set("Content-Length", "4")
	return Reply{Code: http.StatusBadGateway, Body: "502\n"}
}
