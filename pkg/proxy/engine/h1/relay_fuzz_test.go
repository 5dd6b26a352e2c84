package h1

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzRawResponse: a response stream (head, body, and whatever follows) whose head ParseResponse
// takes is passed on as it came: WritePassedHead, then the body's Content-Length bytes. net/http's
// ReadResponse must accept the stream with the same status and framing; the client must get the
// header fields (hop-by-hop removed, Date added) and body net/http reads; and the upstream
// connection must be reusable exactly when net/http would find the next response on it (the body
// complete, no bytes left over, no close).
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
		end := HeadEnd(in)
		if end < 0 {
			return
		}
		res, ok := ParseResponse(in[:end])
		if !ok {
			return // relayed by Relay
		}
		rbr := bufio.NewReader(bytes.NewReader(in))
		ref, err := http.ReadResponse(rbr, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("ParseResponse accepts %q; net/http rejects it: %v", in, err)
		}
		if len(ref.TransferEncoding) > 0 || ref.ContentLength < 0 && method != http.MethodHead {
			t.Fatalf("ParseResponse accepts %q as Content-Length framed; net/http reads Transfer-Encoding %q, Content-Length %d",
				in, ref.TransferEncoding, ref.ContentLength)
		}
		if ref.StatusCode != res.Code {
			t.Fatalf("for %q ParseResponse reads %d; net/http reads %d", in, res.Code, ref.StatusCode)
		}
		refBody, refErr := io.ReadAll(ref.Body)
		rest, _ := io.ReadAll(rbr)
		refReuse := refErr == nil && !ref.Close && len(rest) == 0

		// The event loop's relay: the head, then the body's bytes as far as they came.
		bodyLen := res.Length
		if method == http.MethodHead {
			bodyLen = 0
		}
		after := in[end:]
		complete := int64(len(after)) >= bodyLen
		body := after[:min(int64(len(after)), bodyLen)]
		reuse := complete && res.Keep && int64(len(after)) == bodyLen
		if reuse != refReuse {
			t.Fatalf("for %q (%s) the upstream connection is reused: %v; net/http would: %v (body error %v, %d bytes left, Close %v)",
				in, method, reuse, refReuse, refErr, len(rest), ref.Close)
		}
		if complete != (refErr == nil) {
			t.Fatalf("for %q the body is complete: %v; net/http reads it with error %v", in, complete, refErr)
		}
		var out bytes.Buffer
		WritePassedHead(&out, in[:end], res, nil, false)
		out.Write(body)
		cbr := bufio.NewReader(&out)
		cl, err := http.ReadResponse(cbr, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("for %q the client gets %q, which net/http cannot read: %v", in, out.Bytes(), err)
		}
		clBody, clErr := io.ReadAll(cl.Body)
		if refErr == nil && (clErr != nil || cbr.Buffered() > 0) {
			t.Fatalf("for %q the client gets %q: body error %v, %d bytes after the response", in, out.Bytes(), clErr, cbr.Buffered())
		}
		if refErr != nil && clErr == nil {
			t.Fatalf("for %q (body error %v) the client gets %q, a complete response", in, refErr, out.Bytes())
		}
		if !bytes.Equal(clBody, refBody) {
			t.Fatalf("for %q the client gets the body %q; net/http reads %q", in, clBody, refBody)
		}
		want := ref.Header.Clone()
		for _, k := range HopHeaders {
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

// FuzzResponseWriter: a response written by ResponseWriter (the event loops' answers, and every
// response Relay relays) must reach a client as what net/http's server writes for the same handler:
// status, body and trailers, framed so that the client finds the end (chunked or Content-Length).
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
		w := new(ResponseWriter)
		w.Reset(&out, http.MethodGet, true)
		handle(w)
		w.End()

		want, wantErr := readAll(refOut)
		got, gotErr := readAll(out.Bytes())
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("net/http writes %q (read: %v); ResponseWriter writes %q (read: %v)", refOut, wantErr, out.Bytes(), gotErr)
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("net/http writes %q; ResponseWriter writes %q (-net/http +ResponseWriter):\n%s", refOut, out.Bytes(), d)
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

var responseSeeds = []string{
	"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
	"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabcdef",
	"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nKeep-Alive: timeout=5\r\n\r\nshort",
}

// FuzzRelayResponse: an upstream response relayed by Relay (its bytes fed in pieces, as they come
// from a socket) must read, for a client, as what net/http's server relays with
// httputil.ReverseProxy and Rewrite for the same upstream response: status, header fields, body,
// trailers, and a broken upstream body as a broken response. Deliberate differences: no
// Content-Type sniffing, and Date, Content-Length, Transfer-Encoding and Connection (the framing)
// may differ.
func FuzzRelayResponse(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add([]byte(s), false)
	}
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n5;a=b\r\nhello\r\n0\r\nX-T: v\r\n\r\n"), false)
	f.Add([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"), false)
	f.Add([]byte("HTTP/1.0 200 OK\r\n\r\nuntil close"), true)
	f.Add([]byte("HTTP/1.1 200 OK\nContent-Length: 2\n\nok"), false)
	f.Add([]byte("HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\nabc"), false)
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

		rp := &httputil.ReverseProxy{Rewrite: TrustedProxies(nil).Rewrite}
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

		out := relayAll(t, in, method)
		want, wantErr := readRelayed(refOut, method)
		got, gotErr := readRelayed(out, method)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("for %q net/http relays %q (read: %v); Relay writes %q (read: %v)", in, refOut, wantErr, out, gotErr)
		}
		if wantErr != nil {
			return
		}
		if _, ok := upstream().Header["Content-Type"]; !ok {
			delete(want.Header, "Content-Type") // net/http sniffs one
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Fatalf("for %q net/http relays %q; Relay writes %q (-net/http +Relay):\n%s", in, refOut, out, d)
		}
	})
}

// relayAll relays the upstream stream in as the event loops do: the head (as net/http's parser
// delimits it), then the rest fed to Relay.Body in 7-byte pieces, then the end of the stream.
func relayAll(t *testing.T, in []byte, method string) []byte {
	var out bytes.Buffer
	r := new(Relay)
	for {
		end := LooseHeadEnd(in)
		if end < 0 {
			t.Fatalf("no head in %q, which net/http reads", in)
		}
		_, informational, err := r.Head(in[:end], method)
		if err != nil {
			t.Fatalf("Relay refuses the head of %q, which net/http reads: %v", in, err)
		}
		in = in[end:]
		if !informational {
			break
		}
	}
	r.WriteHead(&out, true)
	for len(in) > 0 {
		piece := in[:min(len(in), 7)]
		n, done, err := r.Body(piece, &out)
		in = in[n:]
		if err != nil {
			return out.Bytes() // cut off
		}
		if done {
			r.End(&out)
			return out.Bytes()
		}
	}
	if done, err := r.EOF(); err != nil || !done {
		return out.Bytes()
	}
	r.End(&out)
	return out.Bytes()
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

// FuzzChunked: the chunked decoder, fed in pieces of any size, yields the data net/http's chunked
// reader yields, fails where it fails, and ends (the last chunk read) exactly where it ends.
func FuzzChunked(f *testing.F) {
	for _, s := range []string{
		"5\r\nhello\r\n0\r\n\r\n",
		"5;ext=1\r\nhello\r\n3 \t\r\nabc\r\n0\r\nX-T: v\r\n\r\n",
		"5\nhello\r\n0\r\n\r\n",
		"5\r\nhelloXX0\r\n\r\n",
		"10000000000000000\r\n",
		"1;" + strings.Repeat("e", 4100) + "\r\nx\r\n0\r\n\r\n",
		"0\r\n\r\nEVIL",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		rd := bytes.NewReader(in)
		br := bufio.NewReader(rd)
		want, wantErr := io.ReadAll(httputil.NewChunkedReader(br))
		wantEnd := len(in) - rd.Len() - br.Buffered()

		var c chunked
		var got []byte
		var gotErr error
		consumed := 0
		size := int(piece%32) + 1
		for !c.done() && gotErr == nil && consumed < len(in) {
			n, data, err := c.feed(in[consumed:min(len(in), consumed+size)])
			consumed += n
			got = append(got, data...)
			gotErr = err
		}
		if (wantErr == nil) != c.done() || gotErr != nil && wantErr == nil {
			t.Fatalf("for %q net/http's reader ends with %v; the decoder is done %v with error %v", in, wantErr, c.done(), gotErr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("for %q net/http's reader yields %q; the decoder %q", in, want, got)
		}
		if wantErr == nil && consumed != wantEnd {
			t.Fatalf("for %q net/http's reader ends at %d; the decoder at %d", in, wantEnd, consumed)
		}
	})
}
