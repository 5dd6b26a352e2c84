package h1

import (
	"bytes"
	"net/http"
	"strings"
)

// Response is what the event loops need to know of a response head they pass on as it came (see
// ParseResponse): the common case of an HTTP/1.1 final response with one Content-Length.
type Response struct {
	Code   int
	Length int64 // its Content-Length
	// Keep: the upstream connection can carry another request after it.
	Keep    bool
	hasDate bool
	noCache bool // "Pragma: no-cache" without Cache-Control: net/http adds "Cache-Control: no-cache"
}

// ParseResponse checks a complete response head (status line, header lines, the empty line; CRLF
// line ends) and reports whether it can be passed on as it came (WritePassedHead): HTTP/1.1, a
// final status with a body, one valid Content-Length, no Transfer-Encoding or Trailer, a
// Connection header naming nothing but keep-alive/close, not an event stream. Any other response is
// relayed by Relay. FuzzRawResponse holds it to net/http's parser.
func ParseResponse(head []byte) (Response, bool) {
	r := Response{Length: -1, Keep: true}
	line, rest, _ := bytes.Cut(head, []byte("\r\n"))
	if len(line) < 12 || string(line[:9]) != "HTTP/1.1 " || len(line) > 12 && line[12] != ' ' {
		return r, false
	}
	if !FieldValue(line[12:]) {
		return r, false // a bare LF would end the line for net/http's parser and the client's
	}
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return r, false
		}
		r.Code = r.Code*10 + int(c-'0')
	}
	if r.Code < 200 || r.Code == http.StatusNoContent || r.Code == http.StatusNotModified {
		return r, false
	}
	seenPragma, hasCC := false, false
	for len(rest) > 2 {
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || len(name) == 0 || !IsToken(name) || !FieldValue(value) {
			return r, false // net/http's parser rejects it: Relay answers 502
		}
		value = bytes.Trim(value, " \t")
		switch {
		case EqualFold(name, "Content-Length"):
			n, ok := ParseLength(value)
			if r.Length >= 0 || !ok {
				return r, false
			}
			r.Length = n
		case EqualFold(name, "Transfer-Encoding"), EqualFold(name, "Trailer"):
			return r, false
		case EqualFold(name, "Connection"):
			if !plainConnection(value) {
				return r, false // it names headers to drop
			}
			if HasToken(string(value), "close") {
				r.Keep = false
			}
		case EqualFold(name, "Close"):
			return r, false // possibly named by Connection
		case EqualFold(name, "Content-Type"):
			if isEventStream(string(value)) {
				return r, false // streamed: Relay
			}
		case EqualFold(name, "Date"):
			r.hasDate = true
		case EqualFold(name, "Pragma"):
			if !seenPragma {
				r.noCache = string(value) == "no-cache"
				seenPragma = true
			}
		case EqualFold(name, "Cache-Control"):
			hasCC = true
		}
	}
	r.noCache = r.noCache && !hasCC
	return r, r.Length >= 0
}

func isEventStream(ct string) bool {
	ct, _, _ = strings.Cut(ct, ";")
	return EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// WritePassedHead writes the head of a response ParseResponse accepted as the client gets it: the
// status line and header lines as they came but the hop-by-hop ones, Cache-Control and Date added
// as net/http would, extra's fields (the request logic's, see the engine's Exchange.Responded)
// replacing the upstream's of the same names but Set-Cookie (added to the app's own cookies, as the
// logic adds it to the header of a response net/http read), and "Connection: close" when the
// connection closes after it.
func WritePassedHead(w Writer, head []byte, res Response, extra http.Header, closeAfter bool) {
	status, rest, _ := bytes.Cut(head, []byte("\r\n"))
	_, _ = w.Write(status)
	_, _ = w.WriteString("\r\n")
	for len(rest) > 2 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, _, _ := bytes.Cut(line, []byte(":"))
		if IsHopHeader(name) || len(extra) > 0 && inHeader(extra, name) {
			continue
		}
		_, _ = w.Write(line)
		_, _ = w.WriteString("\r\n")
	}
	for k, vs := range extra {
		for _, v := range vs {
			WriteHeaderLine(w, k, v)
		}
	}
	if res.noCache { // net/http's response parser adds it (fixPragmaCacheControl)
		_, _ = w.WriteString("Cache-Control: no-cache\r\n")
	}
	if !res.hasDate {
		_, _ = w.WriteString("Date: ")
		_, _ = w.WriteString(Date())
		_, _ = w.WriteString("\r\n")
	}
	if closeAfter {
		_, _ = w.WriteString("Connection: close\r\n")
	}
	_, _ = w.WriteString("\r\n")
}

// inHeader reports whether the upstream's header line named name gives way to h's field of that
// name: every one but Set-Cookie, of which a response may carry several.
func inHeader(h http.Header, name []byte) bool {
	for k := range h {
		if EqualFold(name, k) {
			return !EqualFold(name, "Set-Cookie")
		}
	}
	return false
}
