// Package h1 is the interceptor's byte-level HTTP/1.1: request and response heads screened,
// parsed and written, bodies framed (Content-Length, chunked, to the end of the stream), answers
// written, and the forwarding rules (hop-by-hop and X-Forwarded-* headers, replays). Everything in
// it is a pure function of bytes (or a state machine fed bytes), with no I/O, so that the engine's
// event loops and its net/http path share one copy of each rule, and each parser or writer is
// fuzzed against net/http's own (see the Fuzz targets).
package h1

import (
	"bytes"
	"net/http"
	"net/textproto"
	"strings"
	"sync/atomic"
	"time"
)

// Writer is what heads are written to: a bytes.Buffer (the event loops) or a bufio.Writer.
type Writer interface {
	Write(p []byte) (int, error)
	WriteString(s string) (int, error)
	WriteByte(c byte) error
}

// EqualFold reports whether b equals s, ignoring ASCII case (header names and tokens).
func EqualFold[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		d := s[i]
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// IsToken reports whether b is an RFC 9110 token (a header name, a method); empty is a token.
func IsToken[T string | []byte](b T) bool {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// FieldValue reports whether net/http's parser accepts v as a header value: no control character
// but horizontal tab (bytes from 0x80 are allowed).
//
// It looks at eight bytes at a time and at single bytes only in a word that may hold a control
// character: the event loops check every byte of every head, up to --max-header-bytes each, and a
// byte at a time this was a quarter of their time while thousands of 100 KiB heads arrived.
func FieldValue[T string | []byte](v T) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(v); i += 8 {
		w := uint64(v[i]) | uint64(v[i+1])<<8 | uint64(v[i+2])<<16 | uint64(v[i+3])<<24 |
			uint64(v[i+4])<<32 | uint64(v[i+5])<<40 | uint64(v[i+6])<<48 | uint64(v[i+7])<<56
		// A byte below 0x20 (a byte from 0x80 has its high bit set in w and so is not counted), or a
		// byte equal to 0x7f (a zero byte of w^0x7f...): the high bit of its byte is set here. A
		// borrow can set it for a byte above one that is set too, never when none is.
		below := (w - 0x20*ones) &^ w & highs
		del := w ^ 0x7f*ones
		if below|((del-ones)&^del&highs) != 0 && !fieldBytes(v[i:i+8]) {
			return false
		}
	}
	return fieldBytes(v[i:])
}

// fieldBytes is FieldValue a byte at a time.
func fieldBytes[T string | []byte](v T) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// HasToken reports whether the comma-separated list v contains tok, ignoring ASCII case.
func HasToken(v, tok string) bool {
	for len(v) > 0 {
		var t string
		t, v, _ = strings.Cut(v, ",")
		if EqualFold(textproto.TrimString(t), tok) {
			return true
		}
	}
	return false
}

// AnyHasToken reports whether one of the header values vs contains tok (see HasToken).
func AnyHasToken(vs []string, tok string) bool {
	for _, v := range vs {
		if HasToken(v, tok) {
			return true
		}
	}
	return false
}

// plainConnection reports whether a Connection header only says keep-alive or close (so it names
// no header to drop).
func plainConnection(v []byte) bool {
	for len(v) > 0 {
		var tok []byte
		tok, v, _ = bytes.Cut(v, []byte(","))
		tok = bytes.Trim(tok, " \t")
		if !EqualFold(tok, "keep-alive") && !EqualFold(tok, "close") {
			return false
		}
	}
	return true
}

// ParseLength reads a Content-Length value (already trimmed of spaces) the one way the engine
// reads it, in requests and responses: 1 to 18 decimal digits (RFC 9110's 1*DIGIT), no sign. net/http
// reads every value this accepts the same way; anything else is refused (ok false) and left to
// net/http's own parser, or answered as net/http would answer it.
func ParseLength(v []byte) (n int64, ok bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// HeadEnd returns the length of the head at the start of buf, its final CRLF CRLF included, or -1
// when buf holds no CRLF CRLF.
func HeadEnd(buf []byte) int {
	i := bytes.Index(buf, crlfcrlf)
	if i < 0 {
		return -1
	}
	return i + 4
}

var crlfcrlf = []byte("\r\n\r\n")

// BareLF reports whether a head not yet complete (no CRLF CRLF in it) has a line feed without a
// carriage return before it. net/http's parsers end lines at any LF, so such a head may already be
// complete for them ("...\n\r\n", "...\n\n").
func BareLF(b []byte) bool { return BareLFFrom(b, 0) }

// BareLFFrom is BareLF for a b whose first from bytes are known to hold no bare LF: it looks at the
// line feeds of b[from:] only (with the byte before each, which may come before from).
func BareLFFrom(b []byte, from int) bool {
	for i := from; i < len(b); i++ {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return false
		}
		i += j
		if i == 0 || b[i-1] != '\r' {
			return true
		}
	}
	return false
}

// LooseHeadEnd returns the length of the head at the start of buf as net/http's parser reads it
// (lines end at LF, with or without CR; the head ends at the first empty line), or -1 when buf
// holds no empty line yet.
func LooseHeadEnd(buf []byte) int {
	for i := 0; i < len(buf); {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return -1
		}
		line := buf[i : i+j]
		i += j + 1
		if len(line) == 0 || len(line) == 1 && line[0] == '\r' {
			return i
		}
	}
	return -1
}

// WriteHeaderLine writes one header line; line breaks in the value become spaces, as net/http
// does.
func WriteHeaderLine(w Writer, k, v string) {
	_, _ = w.WriteString(k)
	_, _ = w.WriteString(": ")
	if strings.ContainsAny(v, "\r\n") {
		b := []byte(v)
		for i, c := range b {
			if c == '\r' || c == '\n' {
				b[i] = ' '
			}
		}
		v = string(b)
	}
	_, _ = w.WriteString(v)
	_, _ = w.WriteString("\r\n")
}

// Date returns the current time in the Date header's format, formatted once a second.
func Date() string {
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
