package h1

import (
	"net/http"
	"strconv"
	"strings"
)

// MaxHeaders is how many header lines a Request holds without allocating; a head with more (up to
// the server's MaxHeaderBytes, which bounds them all) costs one slice of its lines.
const MaxHeaders = 64

// Request is a request head parsed in place (see Parse): every string points into the one copy of
// the head Parse was given, so parsing allocates nothing more. Reset (or Parse) forgets it.
type Request struct {
	requestFields
	buf    [MaxHeaders]field
	xffBuf [4]string
}

// requestFields are Request's fields reset for every request (buf is only cleared as far as used).
type requestFields struct {
	// Method and Target are the request line's, the target as the client sent it.
	Method, Target string
	// Host is the Host header's value; Path the target's path, percent-decoded (what routes match).
	Host, Path string
	// Close: the client sent "Connection: close".
	Close bool
	// BodyLen is the length of the request body (its Content-Length; 0: none).
	BodyLen int64
	// HeadLen is the length of the head Parse was given (request line, header lines, empty line).
	HeadLen int
	// IdempotencyKey: an Idempotency-Key or X-Idempotency-Key header (see Replayable).
	IdempotencyKey bool

	teTrailers            bool // the client sent "Te: trailers"
	hasXFHost, hasXFProto bool
	noCache               bool     // "Pragma: no-cache" without Cache-Control: net/http adds "Cache-Control: no-cache"
	xff                   []string // prior X-Forwarded-For values
	headers               []field
	set                   http.Header // header fields replacing the request's own (see Replace)
	out                   string      // the target Write sends instead of Target; "" none (see SetTarget)
}

type field struct {
	name, value string
	drop        bool // hop-by-hop or rewritten
	proxy       bool // a header only a proxy sets (proxyHeader): written for a trusted peer only
}

// Reset forgets the last request, dropping its references into the head.
func (rq *Request) Reset() {
	clear(rq.buf[:min(len(rq.headers), MaxHeaders)]) // more: they were in a grown slice, dropped here
	clear(rq.xffBuf[:])
	rq.requestFields = requestFields{headers: rq.buf[:0], xff: rq.xffBuf[:0]}
}

// Parse parses a complete request head (request line, header lines, the empty line; CRLF line
// ends, as HeadEnd finds it) and reports whether it is a request the event loops serve: HTTP/1.1,
// an origin-form target whose path net/http would forward as sent, exactly one valid Host, a body
// framed by at most one Content-Length (repeated only as "0"), no Transfer-Encoding, Upgrade,
// Expect or HTTP2-Settings, a Connection header saying at most keep-alive or close, and nothing net/http's server reads otherwise (bare CR or LF, obsolete line
// folding, control characters). Everything else is left to net/http, which serves it exactly as it
// does on the TLS port (or rejects it). FuzzFastRequest holds it to net/http's server.
func (rq *Request) Parse(head string) bool {
	rq.Reset()
	rq.HeadLen = len(head)
	line, rest, _ := strings.Cut(head, "\r\n")
	method, line, ok := strings.Cut(line, " ")
	if !ok || len(method) == 0 || !IsToken(method) {
		return false
	}
	target, proto, ok := strings.Cut(line, " ")
	if !ok || proto != "HTTP/1.1" || len(target) == 0 || target[0] != '/' {
		return false
	}
	path, ok := requestPath(target)
	if !ok {
		return false
	}
	rq.Method, rq.Target, rq.Path = method, target, path
	var length int64
	lengths, hosts := 0, 0
	closeToken, seenUA, seenPragma, hasCC := false, false, false, false
	for len(rest) > 2 {
		line, rest, _ = strings.Cut(rest, "\r\n")
		if strings.IndexByte(line, '\n') >= 0 || strings.IndexByte(line, '\r') >= 0 {
			return false // bare LF or CR
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || len(name) == 0 || !IsToken(name) {
			return false // includes obsolete line folding (leading space)
		}
		value = strings.Trim(value, " \t")
		if !FieldValue(value) {
			return false
		}
		h := field{name: name, value: value}
		switch {
		case strings.IndexByte(name, '_') >= 0:
			h.drop = true // see droppedRequestHeader
		case EqualFold(name, "Host"):
			hosts++
			if !validHost(value) {
				return false
			}
			rq.Host = value
		case EqualFold(name, "Content-Length"):
			// Request.Write, which sends the net/http path's requests, writes its own (see Write).
			h.drop = true
			lengths++
			if value == "0" {
				break // net/http takes repeated zeros as one
			}
			n, ok := ParseLength([]byte(value))
			if !ok {
				return false
			}
			length = n
		case EqualFold(name, "Connection"):
			if !plainConnection([]byte(value)) {
				return false
			}
			h.drop = true
			if HasToken(value, "close") {
				rq.Close, closeToken = true, true
			}
		case EqualFold(name, "Transfer-Encoding"), EqualFold(name, "Upgrade"),
			EqualFold(name, "Expect"), EqualFold(name, "HTTP2-Settings"):
			return false
		case EqualFold(name, "Te"):
			h.drop = true
			if HasToken(value, "trailers") {
				rq.teTrailers = true
			}
		case EqualFold(name, "X-Forwarded-For"):
			h.drop = true
			rq.xff = append(rq.xff, value)
		case EqualFold(name, "X-Forwarded-Host"):
			h.proxy, rq.hasXFHost = true, true
		case EqualFold(name, "X-Forwarded-Proto"):
			h.proxy, rq.hasXFProto = true, true
		case EqualFold(name, "X-Forwarded-Port"), EqualFold(name, "X-Real-Ip"):
			h.proxy = true // see proxyHeader
		case droppedRequestHeader(name):
			h.drop = true
		case EqualFold(name, "User-Agent"):
			// Request.Write writes only the first User-Agent, and none when it is empty.
			h.drop = seenUA || value == ""
			seenUA = true
		case EqualFold(name, "Pragma"):
			if !seenPragma {
				rq.noCache = value == "no-cache"
				seenPragma = true
			}
		case EqualFold(name, "Cache-Control"):
			hasCC = true
		case EqualFold(name, "Idempotency-Key"), EqualFold(name, "X-Idempotency-Key"):
			rq.IdempotencyKey = true
		}
		rq.headers = append(rq.headers, h)
	}
	if hosts != 1 || length > 0 && lengths > 1 {
		return false
	}
	rq.BodyLen = length
	if hasCC {
		rq.noCache = false
	}
	if closeToken { // headers named by Connection are hop-by-hop; only these two may be named
		for i := range rq.headers {
			if EqualFold(rq.headers[i].name, "Close") {
				rq.headers[i].drop = true
			}
		}
	}
	return true
}

// requestPath returns the path of an origin-form target, percent-decoded as net/http decodes it
// (url.URL.Path), when net/http would forward the target as it is (plainTarget).
func requestPath(target string) (string, bool) {
	escaped, ok := plainTarget(target)
	if !ok {
		return "", false
	}
	path, _, _ := strings.Cut(target, "?")
	if !escaped {
		return path, true
	}
	b := make([]byte, 0, len(path))
	for i := 0; i < len(path); i++ {
		if path[i] == '%' {
			b = append(b, unhex(path[i+1])<<4|unhex(path[i+2]))
			i += 2
			continue
		}
		b = append(b, path[i])
	}
	return string(b), true
}

// plainTarget reports whether net/http forwards the origin-form target as it is: the path's bytes
// are those url.URL.EscapedPath keeps (pathByte, and '%' with two hex digits), the query has no
// control character or space; and whether the path has a percent-encoded byte.
func plainTarget(target string) (escaped, ok bool) {
	path, query, _ := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '%':
			if i+2 >= len(path) || !isHex(path[i+1]) || !isHex(path[i+2]) {
				return false, false // net/http answers 400
			}
			escaped = true
			i += 2
		case !pathByte(c):
			return false, false // net/http would send the path percent-encoded
		}
	}
	for i := 0; i < len(query); i++ {
		if c := query[i]; c <= ' ' || c == 0x7f {
			return false, false
		}
	}
	return escaped, true
}

// SetTarget makes Write send target (origin form: a path and any query, as on the wire) instead of
// the client's, when net/http would send it as it is too; it reports whether it did. A request whose
// target was rewritten (a path prefix rewrite) goes out as on the net/http path (SetURLTarget).
func (rq *Request) SetTarget(target string) bool {
	if len(target) == 0 || target[0] != '/' {
		return false
	}
	if _, ok := plainTarget(target); !ok {
		return false
	}
	rq.out = target
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
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

// validHost accepts the characters of host names, IPv4 and bracketed IPv6 literals and a port; the
// rest (and an empty host) is left to net/http.
func validHost(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '.' || c == ':' || c == '[' || c == ']' || c == '_':
		default:
			return false
		}
	}
	return true
}

// Values returns the values of the header lines named key (case-insensitively), for header-matched
// routes (it implements the engine's Header). Host is not among them: net/http moves it out of the
// header map, so a route cannot match on it on either path.
func (rq *Request) Values(key string) []string {
	if EqualFold(key, "Host") {
		return nil
	}
	var vs []string
	for i := range rq.headers {
		if h := &rq.headers[i]; EqualFold(h.name, key) {
			vs = append(vs, h.value)
		}
	}
	return vs
}

// Replace makes Write send the fields of set instead of the request's own fields of those names.
func (rq *Request) Replace(set http.Header) {
	if len(set) == 0 {
		return
	}
	rq.set = set
	for i := range rq.headers {
		for k := range set {
			if EqualFold(rq.headers[i].name, k) {
				rq.headers[i].drop = true
			}
		}
	}
}

// Write writes the forwarded head: the request line, the client's header lines with the
// forwarding rules for peer p applied (see rules.go), the framing Request.Write would send, and
// the X-Forwarded-* lines. FuzzRawRequestWrite holds it to what the net/http path (the
// ReverseProxy) sends for the same head and peer.
func (rq *Request) Write(w Writer, p Peer) {
	_, _ = w.WriteString(rq.Method)
	_ = w.WriteByte(' ')
	if rq.out != "" {
		_, _ = w.WriteString(rq.out)
	} else {
		_, _ = w.WriteString(rq.Target)
	}
	_, _ = w.WriteString(" HTTP/1.1\r\n")
	for i := range rq.headers {
		if h := &rq.headers[i]; !h.drop && (!h.proxy || p.Trusted) {
			WriteHeaderLine(w, h.name, h.value)
		}
	}
	for k, vs := range rq.set {
		for _, v := range vs {
			WriteHeaderLine(w, k, v)
		}
	}
	if rq.teTrailers {
		_, _ = w.WriteString("Te: trailers\r\n")
	}
	if rq.noCache { // net/http's request parser adds it (fixPragmaCacheControl)
		_, _ = w.WriteString("Cache-Control: no-cache\r\n")
	}
	switch {
	case rq.BodyLen > 0: // as Request.Write frames a body of known length, whatever the method
		var n [20]byte
		_, _ = w.WriteString("Content-Length: ")
		_, _ = w.Write(strconv.AppendInt(n[:0], rq.BodyLen, 10))
		_, _ = w.WriteString("\r\n")
	case rq.Method == http.MethodPost, rq.Method == http.MethodPut, rq.Method == http.MethodPatch:
		_, _ = w.WriteString("Content-Length: 0\r\n") // what Request.Write sends without a body
	}
	if p.IP != "" {
		_, _ = w.WriteString("X-Forwarded-For: ")
		if p.Trusted {
			forwardedFor(w, rq.xff, p.IP)
		} else {
			forwardedFor(w, nil, p.IP)
		}
		_, _ = w.WriteString("\r\n")
	}
	if !p.Trusted || !rq.hasXFHost {
		WriteHeaderLine(w, "X-Forwarded-Host", rq.Host)
	}
	switch {
	case p.Trusted && rq.hasXFProto:
	case p.TLS:
		_, _ = w.WriteString("X-Forwarded-Proto: https\r\n")
	default:
		_, _ = w.WriteString("X-Forwarded-Proto: http\r\n")
	}
	_, _ = w.WriteString("\r\n")
}
