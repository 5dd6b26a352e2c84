package h1

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strings"
)

// Relay passes on a response that is not passed on as it came (ParseResponse refused its head):
// chunked, close-delimited, without a body (HEAD, 204, 304), HTTP/1.0, with trailers, an event
// stream, or a head net/http's parser reads otherwise (bare LF line ends, repeated equal
// Content-Length, ...). Its head is read by net/http's own parser; the body is framed here from
// the bytes fed to it and written to the client as net/http's server would write what the
// ReverseProxy copies: chunked unless the upstream gave a Content-Length, trailers announced and
// sent after the last chunk. FuzzRelayResponse holds it to net/http's server with the ReverseProxy.
//
// Use: Head with the head's bytes, then (for a final response) Header, which the request logic may
// add fields to, then WriteHead, then Body with the bytes that follow (as they come) until it
// reports done, or EOF when the upstream ended its stream; then End.
type Relay struct {
	rw     ResponseWriter
	res    *http.Response
	method string
	kind   bodyKind
	left   int64 // bodyLength: bytes left
	chunks chunked
	tr     []byte // the trailer section, read in part
	// Keep: the upstream connection can carry another request once the body ended where its
	// framing said.
	Keep bool
}

type bodyKind uint8

const (
	bodyNone    bodyKind = iota
	bodyLength           // Content-Length
	bodyChunked          // chunked
	bodyEOF              // to the end of the stream
)

// ErrStatus: an upstream answered with a status code below 100, which net/http's parser reads but
// no server may send (a 502 answers it on both paths).
var ErrStatus = errors.New("malformed HTTP status code")

// ErrSwitchedProtocols: an upstream answered 101 to a request that asked for no upgrade.
var ErrSwitchedProtocols = errors.New("backend switched protocols without an upgrade request")

// Head parses a whole response head (see LooseHeadEnd) to a request of method. It returns the
// status code; informational reports a 1xx response other than 101, which is dropped (the next
// head follows).
func (r *Relay) Head(head []byte, method string) (code int, informational bool, err error) {
	res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(head)), &http.Request{Method: method})
	if err != nil {
		return 0, false, fmt.Errorf("reading response: %w", err)
	}
	if res.StatusCode < 100 {
		return 0, false, ErrStatus // net/http's parser takes "000" to "099"; nobody can pass them on
	}
	if res.StatusCode < 200 && res.StatusCode != http.StatusSwitchingProtocols {
		return res.StatusCode, true, nil
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		return 0, false, ErrSwitchedProtocols
	}
	r.res, r.method = res, method
	bodyless := method == http.MethodHead || res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusNotModified
	switch {
	case bodyless:
		r.kind = bodyNone
	case len(res.TransferEncoding) > 0: // chunked, the only coding net/http accepts
		r.kind, r.chunks = bodyChunked, chunked{}
	case res.ContentLength >= 0:
		r.kind, r.left = bodyLength, res.ContentLength
	default:
		r.kind = bodyEOF
	}
	r.Keep = !res.Close && r.kind != bodyEOF
	r.tr = r.tr[:0]
	return res.StatusCode, false, nil
}

// Header is the upstream response's header fields; fields the request logic adds go out too.
func (r *Relay) Header() http.Header { return r.res.Header }

// WriteHead writes the client's head to out: the upstream's fields but the hop-by-hop ones, its
// trailers announced. closeAfter: the client connection closes after the response.
func (r *Relay) WriteHead(out Writer, closeAfter bool) {
	res := r.res
	RemoveHopByHop(res.Header)
	r.rw.Reset(out, r.method, closeAfter)
	r.rw.header, res.Header = res.Header, r.rw.header
	if len(res.Trailer) > 0 {
		keys := make([]string, 0, len(res.Trailer))
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		r.rw.header.Add("Trailer", strings.Join(keys, ", "))
	}
	r.rw.WriteHeader(res.StatusCode)
	r.rw.Flush()
}

// Body frames the upstream bytes in (as many as arrived) and writes the body to out. It returns
// how many bytes of in it consumed and whether the body ended; bytes after the end are not
// consumed (the caller decides what they mean: leftover bytes nobody asked for). An error means
// the upstream's body is broken: the response must be cut off, not completed.
func (r *Relay) Body(in []byte, out Writer) (consumed int, done bool, err error) {
	r.rw.w = out
	switch r.kind {
	case bodyNone:
		return 0, true, nil
	case bodyLength:
		k := int(min(int64(len(in)), r.left))
		if _, err := r.rw.Write(in[:k]); err != nil {
			return k, false, err
		}
		r.left -= int64(k)
		return k, r.left == 0, nil
	case bodyEOF:
		if _, err := r.rw.Write(in); err != nil {
			return len(in), false, err
		}
		return len(in), false, nil
	}
	for consumed < len(in) || r.chunks.done() {
		if r.chunks.done() {
			n, err := r.trailer(in[consumed:], false)
			if n < 0 {
				return len(in), false, err
			}
			return consumed + n, true, err
		}
		n, data, err := r.chunks.feed(in[consumed:])
		consumed += n
		if len(data) > 0 {
			if _, werr := r.rw.Write(data); werr != nil {
				return consumed, false, werr
			}
		}
		if err != nil {
			return consumed, false, err
		}
	}
	return consumed, false, nil
}

// trailer reads the trailer section from b (collected across calls). It returns how many bytes of
// b the section took, -1 while it is incomplete (b is kept).
func (r *Relay) trailer(b []byte, eof bool) (int, error) {
	had := len(r.tr)
	r.tr = append(r.tr, b...)
	end, err := trailerEnd(r.tr, eof)
	if err != nil {
		return len(b), err
	}
	if end < 0 {
		return -1, nil
	}
	section := r.tr[:end]
	if end > 2 {
		hdr, err := textproto.NewReader(bufio.NewReader(bytes.NewReader(section))).ReadMIMEHeader()
		if err != nil {
			return end - had, fmt.Errorf("reading trailer: %w", err)
		}
		// Trailers go out as trailers, announced or not, never promoted to header fields.
		for k, vs := range hdr {
			k = http.TrailerPrefix + k
			r.rw.header[k] = append(r.rw.header[k], vs...)
		}
	}
	return end - had, nil
}

// EOF tells that the upstream ended its stream: the end of a close-delimited body, else a broken
// one (io.ErrUnexpectedEOF, or the trailer's error).
func (r *Relay) EOF() (done bool, err error) {
	switch {
	case r.kind == bodyEOF:
		return true, nil
	case r.kind == bodyChunked && r.chunks.done():
		if _, err := r.trailer(nil, true); err != nil {
			return false, err
		}
		return true, nil
	case r.kind == bodyNone:
		return true, nil
	}
	return false, io.ErrUnexpectedEOF
}

// End completes the client's response once the body ended (see Body, EOF) and reports whether the
// client connection can carry another request.
func (r *Relay) End(out Writer) bool {
	r.rw.w = out
	keep := r.rw.End()
	r.res = nil
	return keep
}
