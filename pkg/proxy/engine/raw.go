package engine

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The raw path is the server-side fast path's forward step for the request that dominates proxied
// traffic: a screened body-less HTTP/1.1 request (see h1Server) to a warm app, forwarded over a
// pooled HTTP/1.1 connection, answered with a Content-Length response. It works on the bytes of the
// two heads, as nginx does, where the general path builds an http.Request, a header map for each
// direction, a context per request and a ResponseWriter: on loopback those cost more CPU than the
// four socket calls of the exchange (see docs/benchmarks/interceptor.md).
//
// What it sends and answers is what forwardDirect (and so httputil.ReverseProxy) would, by the
// rules of headers.go applied line by line (droppedRequestHeader), a Date added when the upstream
// sent none, "Connection: close" when the client asked for it or the server drains. Header lines
// keep the case and order they arrived in, and the status line is the upstream's.
//
// It declines — before anything is counted, sent or answered — whatever it does not handle, and the
// general path serves the request: no route (404), a cold app (hold), a Service-addressed or h2c
// backend, apps with a request or response-header timeout, a percent-encoded path, too many headers.
// A response it does not relay itself (chunked or close-delimited, 1xx, 204/304, HTTP/1.0, a very
// large head) is read by net/http's parser and relayed like forwardDirect does.

// maxRawHeaders bounds the request header lines the raw path keeps; more are left to the general path.
const maxRawHeaders = 64

// rawRequest is a screened request head parsed in place. Every string points into one copy of the
// head, so parsing allocates once.
type rawRequest struct {
	rawFields
	buf    [maxRawHeaders]rawHeader
	xffBuf [4]string
}

// rawFields are rawRequest's fields reset for every request (buf is only cleared as far as used).
type rawFields struct {
	method, target, host, path string
	close                      bool // the client sent "Connection: close"
	teTrailers                 bool // the client sent "Te: trailers"
	hasXFHost, hasXFProto      bool
	idempotencyKey             bool     // Idempotency-Key or X-Idempotency-Key: replayable (see replayable)
	noCache                    bool     // "Pragma: no-cache" without Cache-Control: net/http adds "Cache-Control: no-cache"
	bodyLen                    int64    // the Content-Length of a body the event loop relays (see screenRequest)
	xff                        []string // prior X-Forwarded-For values
	headers                    []rawHeader
	set                        http.Header // header fields replacing the request's own (see Traced)
	out                        string      // the target forwarded instead of target; "" none (see Rewriter)
	resp                       http.Header // the logic's response header fields (see Exchange.Responded)
}

// reset forgets the last request, dropping its references into the head.
func (rq *rawRequest) reset() {
	clear(rq.buf[:len(rq.headers)])
	clear(rq.xffBuf[:])
	resp := rq.resp
	clear(resp)
	rq.rawFields = rawFields{headers: rq.buf[:0], xff: rq.xffBuf[:0], resp: resp}
}

// respHeader returns the (empty) header the logic adds its response fields to; the map is kept
// with the pooled request, so that a response the logic adds nothing to costs no allocation.
func (rq *rawRequest) respHeader() http.Header {
	if rq.resp == nil {
		rq.resp = make(http.Header, 1)
	}
	return rq.resp
}

type rawHeader struct {
	name, value string
	drop        bool // hop-by-hop or rewritten
}

// Values implements routing.Header for header-matched routes.
func (rq *rawRequest) Values(key string) []string {
	if asciiEqualFold(key, "Host") {
		return nil // net/http moves Host out of the header map: a route cannot match on it
	}
	var vs []string
	for i := range rq.headers {
		if h := &rq.headers[i]; asciiEqualFold(h.name, key) {
			vs = append(vs, h.value)
		}
	}
	return vs
}

var _ Header = (*rawRequest)(nil)

var rawRequests = sync.Pool{New: func() any { return new(rawRequest) }}

// release returns rq to rawRequests, dropping its references into the head.
func (rq *rawRequest) release() {
	rq.reset()
	rawRequests.Put(rq)
}

// parse reads a head that fastRequest accepted. It returns false for what the raw path leaves to the
// general one.
func (rq *rawRequest) parse(head string) bool {
	rq.reset()
	line, rest, _ := strings.Cut(head, "\r\n")
	var proto string
	rq.method, line, _ = strings.Cut(line, " ")
	rq.target, proto, _ = strings.Cut(line, " ")
	if proto != "HTTP/1.1" || len(rq.target) == 0 || rq.target[0] != '/' {
		return false
	}
	rq.path = rq.target
	for i := 0; i < len(rq.target); i++ {
		switch c := rq.target[i]; {
		case c == '%':
			return false // the route matches the decoded path: net/http decodes it
		case c == '?':
			rq.path = rq.target[:i]
			i = len(rq.target)
		case !pathByte(c):
			return false // net/http would send the path percent-encoded (url.URL.EscapedPath)
		}
	}
	closeToken, seenUA, seenPragma, hasCC := false, false, false, false
	for len(rest) > 2 {
		if len(rq.headers) == maxRawHeaders {
			return false
		}
		line, rest, _ = strings.Cut(rest, "\r\n")
		name, value, _ := strings.Cut(line, ":")
		value = textproto.TrimString(value)
		h := rawHeader{name: name, value: value}
		switch {
		case strings.IndexByte(name, '_') >= 0:
			h.drop = true // see droppedRequestHeader
		case asciiEqualFold(name, "Host"):
			rq.host = value
		case asciiEqualFold(name, "Connection"):
			h.drop = true
			if hasToken(value, "close") {
				rq.close, closeToken = true, true
			}
		case asciiEqualFold(name, "Te"):
			h.drop = true
			if hasToken(value, "trailers") {
				rq.teTrailers = true
			}
		case asciiEqualFold(name, "X-Forwarded-For"):
			h.drop = true
			rq.xff = append(rq.xff, value)
		case asciiEqualFold(name, "X-Forwarded-Host"):
			rq.hasXFHost = true
		case asciiEqualFold(name, "X-Forwarded-Proto"):
			rq.hasXFProto = true
		case droppedRequestHeader(name):
			h.drop = true
		// Request.Write, which sends the general path's requests, writes its own Content-Length
		// (see write) and only the first User-Agent, when it is not empty.
		case asciiEqualFold(name, "Content-Length"):
			h.drop = true
		case asciiEqualFold(name, "User-Agent"):
			h.drop = seenUA || value == ""
			seenUA = true
		case asciiEqualFold(name, "Pragma"):
			if !seenPragma {
				rq.noCache = value == "no-cache"
				seenPragma = true
			}
		case asciiEqualFold(name, "Cache-Control"):
			hasCC = true
		case asciiEqualFold(name, "Idempotency-Key"), asciiEqualFold(name, "X-Idempotency-Key"):
			rq.idempotencyKey = true
		}
		rq.headers = append(rq.headers, h)
	}
	if hasCC {
		rq.noCache = false
	}
	if closeToken { // headers named by Connection are hop-by-hop; the screen allows only these two
		for i := range rq.headers {
			if asciiEqualFold(rq.headers[i].name, "Close") {
				rq.headers[i].drop = true
			}
		}
	}
	return rq.host != ""
}

// headWriter is what the heads are written to: the connection's bufio.Writer on the raw path, a
// bytes.Buffer in the event loop (see evloop_linux.go).
type headWriter interface {
	Write(p []byte) (int, error)
	WriteString(s string) (int, error)
	WriteByte(c byte) error
}

// write writes the forwarded head to bw; clientIP is "" when the client address has none.
func (rq *rawRequest) write(bw headWriter, clientIP string) {
	_, _ = bw.WriteString(rq.method)
	_ = bw.WriteByte(' ')
	if rq.out != "" {
		_, _ = bw.WriteString(rq.out)
	} else {
		_, _ = bw.WriteString(rq.target)
	}
	_, _ = bw.WriteString(" HTTP/1.1\r\n")
	for i := range rq.headers {
		if h := &rq.headers[i]; !h.drop {
			writeHeaderLine(bw, h.name, h.value)
		}
	}
	for k, vs := range rq.set {
		for _, v := range vs {
			writeHeaderLine(bw, k, v)
		}
	}
	if rq.teTrailers {
		_, _ = bw.WriteString("Te: trailers\r\n")
	}
	if rq.noCache { // net/http's request parser adds it (fixPragmaCacheControl)
		_, _ = bw.WriteString("Cache-Control: no-cache\r\n")
	}
	switch {
	case rq.bodyLen > 0: // as Request.Write frames a body of known length, whatever the method
		var n [20]byte
		_, _ = bw.WriteString("Content-Length: ")
		_, _ = bw.Write(strconv.AppendInt(n[:0], rq.bodyLen, 10))
		_, _ = bw.WriteString("\r\n")
	case rq.method == http.MethodPost, rq.method == http.MethodPut, rq.method == http.MethodPatch:
		_, _ = bw.WriteString("Content-Length: 0\r\n") // what Request.Write sends without a body
	}
	if clientIP != "" {
		_, _ = bw.WriteString("X-Forwarded-For: ")
		for _, v := range rq.xff {
			_, _ = bw.WriteString(v)
			_, _ = bw.WriteString(", ")
		}
		_, _ = bw.WriteString(clientIP)
		_, _ = bw.WriteString("\r\n")
	}
	if !rq.hasXFHost {
		writeHeaderLine(bw, "X-Forwarded-Host", rq.host)
	}
	if !rq.hasXFProto {
		_, _ = bw.WriteString("X-Forwarded-Proto: http\r\n")
	}
	_, _ = bw.WriteString("\r\n")
}

// pathByte reports whether net/http sends c in a request path as it is, unescaped ('%' and '?'
// aside).
func pathByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~!$&'()*+,/:;=@[]", c) >= 0
}

// serveRaw serves a screened request on the raw path, or declines (served false) without having
// counted, sent or written anything.
func (e *Engine) serveRaw(sc *h1ServerConn, head []byte) (served, keep bool) {
	// Pooled, not kept per connection: a connection whose request is held (declined here) or idle
	// should not keep 2.5 KiB of header slots.
	rq := rawRequests.Get().(*rawRequest)
	defer rq.release()
	if !rq.parse(string(head)) {
		return false, false
	}
	x := e.rawRoute(rq)
	if x == nil {
		return false, false
	}
	_, _ = sc.br.Discard(len(head)) // rq holds a copy
	x.Begin()
	x.Forwarding()
	return true, e.rawComplete(sc, x, func() bool { return e.rawForward(sc, rq, x) })
}

// rawRoute returns the exchange of a parsed request, or nil when the raw path leaves it to the
// general one: no route (404), a cold app (hold), a Service-addressed or h2c backend, an app with
// a request or response-header timeout.
func (e *Engine) rawRoute(rq *rawRequest) Exchange {
	x := e.logic.Route(rq.host, rq.path, rq)
	if x == nil {
		return nil
	}
	if p := x.Plan(); p.ViaService || p.H2C || p.RequestTimeout > 0 || p.ResponseHeaderTimeout > 0 || !x.Ready() {
		x.Release()
		return nil // the general path serves it (and holds a cold app's)
	}
	target, set := forwardedAs(x, Request{Method: rq.method, Target: rq.target, Host: rq.host, ProtoMajor: 1, ProtoMinor: 1})
	if target != "" && !rawTarget(target) {
		x.Release()
		return nil // the general path sends what the raw path would have to escape
	}
	rq.out = target
	rq.replace(set)
	return x
}

// rawTarget reports whether a rewritten target can go out as it is on the raw path: an origin-form
// path of bytes net/http sends unescaped, then any query.
func rawTarget(t string) bool {
	if t[0] != '/' {
		return false
	}
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case c == '?':
			return true
		case c != '%' && !pathByte(c):
			return false
		}
	}
	return true
}

// replace makes write send the fields of set instead of the request's own fields of those names.
func (rq *rawRequest) replace(set http.Header) {
	if len(set) == 0 {
		return
	}
	rq.set = set
	for i := range rq.headers {
		for k := range set {
			if asciiEqualFold(rq.headers[i].name, k) {
				rq.headers[i].drop = true
			}
		}
	}
}

// rawComplete runs forward for a counted request under the client watch, ends its exchange and
// sends the response. It reports whether the connection can carry another request.
func (e *Engine) rawComplete(sc *h1ServerConn, x Exchange, forward func() bool) bool {
	ended := false
	defer func() { // when a broken upstream body aborts the response (a panic)
		if !ended {
			x.End()
		}
	}()
	sc.startWatch()
	keep := forward()
	if !sc.stopWatch() {
		keep = false
	}
	ended = true
	x.End()
	// Sent after the counts and metrics, so that they are up to date when the client has the
	// response, as on the general path.
	if err := sc.bw.Flush(); err != nil {
		keep = false
	}
	return keep
}

// rawForward picks an endpoint (trying others when connections fail, as RoundTrip does), exchanges
// the heads and relays the response. It reports whether the client connection stays open.
func (e *Engine) rawForward(sc *h1ServerConn, rq *rawRequest, x Exchange) bool {
	var pc *h1Conn
	var headLen int
	err := tryEndpoints(sc.ctx, x, func(addr string) (err error) {
		if pc, headLen, err = e.rawExchange(sc, rq, addr); err != nil {
			return fmt.Errorf("forwarding to %s: %w", addr, err)
		}
		return nil
	}, IsDialError)
	if err != nil {
		return e.rawFail(sc, rq, x, err)
	}
	return e.rawRelay(sc, rq, x, pc, headLen)
}

// rawExchange sends the request head to addr over a pooled (or new) connection and waits for the
// whole response head. A pooled connection the upstream closed before answering is replaced, at
// most twice, for a replayable request, as h1Transport does.
func (e *Engine) rawExchange(sc *h1ServerConn, rq *rawRequest, addr string) (*h1Conn, int, error) {
	replay := replayable(rq.method, rq.idempotencyKey)
	for attempt := 0; ; attempt++ {
		pc, reused, err := e.fast.acquire(sc.ctx, addr)
		if err != nil {
			return nil, 0, err
		}
		if !sc.setPeer(pc.c) {
			e.fast.put(pc) // untouched
			return nil, 0, fmt.Errorf("%w: %w", ErrClientGone, sc.ctx.Err())
		}
		rq.write(pc.bw, sc.ip)
		if err = pc.bw.Flush(); err != nil {
			err = staleConnError{fmt.Errorf("writing request: %w", err)}
		} else {
			var n int
			if n, err = readHeadLen(pc); err == nil {
				return pc, n, nil
			}
		}
		sc.clearPeer()
		e.fast.discard(pc)
		var stale staleConnError
		if reused && errors.As(err, &stale) {
			e.fast.dropIdle(addr)
			if replay && attempt < 2 && sc.ctx.Err() == nil {
				continue
			}
		}
		return nil, 0, err
	}
}

// readHeadLen waits until pc's buffer holds the whole response head and returns its length, or 0
// when the head is larger than the buffer or uses bare LF line ends (net/http's parser reads those).
func readHeadLen(pc *h1Conn) (int, error) {
	first := true
	for {
		buf, _ := pc.br.Peek(pc.br.Buffered())
		if i := bytes.Index(buf, crlfcrlf); i >= 0 {
			return i + 4, nil
		}
		if len(buf) >= pc.br.Size() || bareLF(buf) {
			return 0, nil
		}
		if _, err := pc.br.Peek(len(buf) + 1); err != nil {
			if first && len(buf) == 0 {
				return 0, staleConnError{fmt.Errorf("reading response: %w", err)}
			}
			return 0, fmt.Errorf("reading response: %w", err)
		}
		first = false
	}
}

var crlfcrlf = []byte("\r\n\r\n")

// rawResponse is what rawRelay needs to know of a response head.
type rawResponse struct {
	code    int
	length  int64 // Content-Length
	keep    bool  // the upstream connection can carry another request
	hasDate bool
	noCache bool // "Pragma: no-cache" without Cache-Control: net/http adds "Cache-Control: no-cache"
}

// parseRawResponse checks a response head (status line, header lines, empty line) and reports
// whether rawRelay can pass it on: HTTP/1.1, a final status with a body, one valid Content-Length,
// no Transfer-Encoding or Trailer, and a Connection header naming nothing but keep-alive/close.
func parseRawResponse(head []byte) (rawResponse, bool) {
	r := rawResponse{length: -1, keep: true}
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || len(line) > 12 && line[12] != ' ' {
		return r, false
	}
	if !fieldValue(line[12:]) {
		return r, false // a bare LF would end the line for net/http's parser and the client's
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return r, false
		}
		r.code = r.code*10 + int(c-'0')
	}
	if r.code < 200 || r.code == http.StatusNoContent || r.code == http.StatusNotModified {
		return r, false
	}
	seenPragma, hasCC := false, false
	for len(rest) > 2 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || !isToken(name) || !fieldValue(value) {
			return r, false // net/http's parser rejects it: the general path answers 502
		}
		value = bytes.Trim(value, " \t")
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if r.length >= 0 || len(value) == 0 || len(value) > 18 {
				return r, false
			}
			var n int64
			for _, c := range value {
				if c < '0' || c > '9' {
					return r, false
				}
				n = n*10 + int64(c-'0')
			}
			r.length = n
		case asciiEqualFold(name, "Transfer-Encoding"), asciiEqualFold(name, "Trailer"):
			return r, false
		case asciiEqualFold(name, "Connection"):
			if !connectionPlain(value) {
				return r, false // it names headers to drop: forwardDirect's rules apply
			}
			if hasToken(string(value), "close") {
				r.keep = false
			}
		case asciiEqualFold(name, "Close"):
			return r, false // possibly named by Connection
		case asciiEqualFold(name, "Content-Type"):
			if isEventStream(string(value)) {
				return r, false // flushed on every write: forwardDirect streams it
			}
		case asciiEqualFold(name, "Date"):
			r.hasDate = true
		case asciiEqualFold(name, "Pragma"):
			if !seenPragma {
				r.noCache = string(value) == "no-cache"
				seenPragma = true
			}
		case asciiEqualFold(name, "Cache-Control"):
			hasCC = true
		}
	}
	r.noCache = r.noCache && !hasCC
	return r, r.length >= 0
}

// fieldValue reports whether net/http's parser accepts v as a header value: no control character
// but horizontal tab (bytes from 0x80 are allowed).
func fieldValue(v []byte) bool {
	for _, c := range v {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// rawRelay passes the response on. The head is in pc's buffer (headLen bytes; 0: too large to
// look at, which the general relay reads).
func (e *Engine) rawRelay(sc *h1ServerConn, rq *rawRequest, x Exchange, pc *h1Conn, headLen int) bool {
	var res rawResponse
	ok := false
	if headLen > 0 {
		head, _ := pc.br.Peek(headLen)
		res, ok = parseRawResponse(head)
	}
	if !ok {
		return e.relayParsed(sc, rq, x, pc)
	}
	extra := rq.respHeader()
	x.Responded(res.code, extra)
	head, _ := pc.br.Peek(headLen)
	closeAfter := rq.close || sc.s.shuttingDown()
	writeRawResponseHead(sc.bw, head, res, extra, closeAfter)
	_, _ = pc.br.Discard(headLen)

	remaining := res.length
	if rq.method == http.MethodHead {
		remaining = 0
	}
	var readErr, writeErr error
	for remaining > 0 && writeErr == nil {
		if pc.br.Buffered() == 0 {
			if _, readErr = pc.br.Peek(1); readErr != nil {
				break
			}
		}
		chunk, _ := pc.br.Peek(int(min(int64(pc.br.Buffered()), remaining)))
		_, writeErr = sc.bw.Write(chunk)
		_, _ = pc.br.Discard(len(chunk))
		remaining -= int64(len(chunk))
	}
	// Bytes after the body (a body sent with a HEAD answer, more than Content-Length) would be read
	// as the next request's response: such a connection is not reused.
	switch cleared := sc.clearPeer(); {
	case cleared && remaining == 0 && res.keep && pc.br.Buffered() == 0:
		e.fast.put(pc)
	case cleared && remaining == 0 && res.keep:
		e.fast.discarded.Leftover.Inc()
		e.fast.discard(pc)
	default:
		e.fast.discard(pc)
	}
	if readErr != nil {
		// The upstream broke off the body: the client must not take a short body for a whole one.
		e.log.V(1).Info("copying the response body failed; aborting the response", "host", rq.host, "error", readErr.Error())
		return false
	}
	if writeErr != nil {
		return false // the client went away
	}
	return !closeAfter
}

// writeRawResponseHead writes the head of a response parseRawResponse accepted as the client gets
// it: hop-by-hop lines dropped, extra's fields (the logic's, see Exchange.Responded) replacing the
// upstream's of the same names but Set-Cookie (added to the app's own cookies), Cache-Control and
// Date added as net/http would, and "Connection: close" when the connection closes after it.
func writeRawResponseHead(bw headWriter, head []byte, res rawResponse, extra http.Header, closeAfter bool) {
	status, rest, _ := bytes.Cut(head, []byte("\r\n"))
	_, _ = bw.Write(status)
	_, _ = bw.WriteString("\r\n")
	for len(rest) > 2 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, _, _ := bytes.Cut(line, []byte(":"))
		if isHopHeader(string(name)) || len(extra) > 0 && replacedBy(extra, name) {
			continue
		}
		_, _ = bw.Write(line)
		_, _ = bw.WriteString("\r\n")
	}
	for k, vs := range extra {
		for _, v := range vs {
			writeHeaderLine(bw, k, v)
		}
	}
	if res.noCache { // net/http's response parser adds it (fixPragmaCacheControl)
		_, _ = bw.WriteString("Cache-Control: no-cache\r\n")
	}
	if !res.hasDate {
		_, _ = bw.WriteString("Date: ")
		_, _ = bw.WriteString(httpDate())
		_, _ = bw.WriteString("\r\n")
	}
	if closeAfter {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
}

// replacedBy reports whether the upstream's header line named name gives way to extra's field of
// that name: every one but Set-Cookie, of which a response may carry several.
func replacedBy(extra http.Header, name []byte) bool {
	for k := range extra {
		if asciiEqualFold(name, k) {
			return !asciiEqualFold(name, "Set-Cookie")
		}
	}
	return false
}

// relayParsed relays a response rawRelay does not pass on itself: net/http reads it and it is
// written like forwardDirect writes it.
func (e *Engine) relayParsed(sc *h1ServerConn, rq *rawRequest, x Exchange, pc *h1Conn) bool {
	// Close stays false while the response is read: the forwarded request did not ask the upstream
	// to close (as on the general path), so the connection is kept for another request.
	req := &http.Request{Method: rq.method, Host: rq.host, ProtoMajor: 1, ProtoMinor: 1}
	res, err := pc.readResponse(req, sc.clearPeer)
	if err != nil {
		sc.clearPeer()
		e.fast.discard(pc)
		return e.rawFail(sc, rq, x, fmt.Errorf("forwarding to %s: %w", pc.addr, err))
	}
	req.Close = rq.close // the client asked for close: the response says so (see h1Response)
	w := h1ResponsePool.Get().(*h1Response)
	w.reset(sc, req)
	defer func() {
		w.reset(nil, nil)
		h1ResponsePool.Put(w)
	}()
	if err := e.relayResponse(w, req, res, x); err != nil {
		return e.rawFail(sc, rq, x, fmt.Errorf("forwarding to %s: %w", pc.addr, err))
	}
	return w.end(false)
}

// rawFail answers a request the raw path could not forward, like the general path's error handler.
func (e *Engine) rawFail(sc *h1ServerConn, rq *rawRequest, x Exchange, err error) bool {
	if sc.ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", ErrClientGone, err)
	}
	w := h1ResponsePool.Get().(*h1Response)
	w.reset(sc, &http.Request{Method: rq.method, Close: rq.close})
	writeReply(w, x.Fail(err, w.header))
	keep := w.end(false) // nothing written when the client went away (see abortResponse)
	w.reset(nil, nil)
	h1ResponsePool.Put(w)
	return keep
}

// httpDate is the current time in the Date header's format, formatted once a second.
func httpDate() string {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.s
	}
	d := &cachedDate{sec: now.Unix(), s: now.UTC().Format(http.TimeFormat)}
	dateCache.Store(d)
	return d.s
}

type cachedDate struct {
	sec int64
	s   string
}

var dateCache atomic.Pointer[cachedDate]
