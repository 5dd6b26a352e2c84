package h1

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// ResponseWriter writes a response the engine composes (an answer of the request logic, or a
// relayed response whose head is not passed on as it came, see Relay) as net/http's server would
// write it for a handler: the head on the first Write (or at End), the body with the
// Content-Length the header sets, else chunked, trailers announced in a Trailer header or set
// under http.TrailerPrefix sent after the last chunk, Date added, "Connection: close" when the
// connection closes after it. It writes to an in-memory Writer; sending it is the caller's. It is an
// http.ResponseWriter (and an http.Flusher whose Flush does nothing) so that a handler can be held
// to net/http's own writer (FuzzResponseWriter).
type ResponseWriter struct {
	w      Writer
	method string
	// close: the connection closes after this response (the client asked, the server drains).
	close bool

	header      http.Header
	status      int
	wroteHeader bool
	headSent    bool
	chunked     bool
	noBody      bool
	length      int64 // declared Content-Length, -1 when none
	written     int64
	failed      error
	trailers    []string
}

// Reset starts a response to a request of method written to w; closeAfter: the connection closes
// after it. The header map is kept (cleared) across resets.
func (w *ResponseWriter) Reset(out Writer, method string, closeAfter bool) {
	h := w.header
	clear(h)
	trailers := w.trailers[:0]
	*w = ResponseWriter{w: out, method: method, close: closeAfter, header: h, length: -1, trailers: trailers}
	if w.header == nil {
		w.header = make(http.Header, 8)
	}
}

// Header is the response's header map.
func (w *ResponseWriter) Header() http.Header { return w.header }

// WriteHeader sets the status; informational ones are not sent.
func (w *ResponseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code < 200 {
		return
	}
	w.wroteHeader = true
	w.status = code
}

// Write writes body bytes (the head first, when not written yet).
func (w *ResponseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(false)
	}
	if w.failed != nil {
		return 0, w.failed
	}
	if w.noBody {
		if w.status == http.StatusNotModified || w.status == http.StatusNoContent {
			return 0, http.ErrBodyNotAllowed
		}
		return len(p), nil // HEAD: the body is dropped
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.chunked {
		_, _ = w.w.WriteString(strconv.FormatInt(int64(len(p)), 16))
		_, _ = w.w.WriteString("\r\n")
	}
	n, err := w.w.Write(p)
	if w.chunked && err == nil {
		_, err = w.w.WriteString("\r\n")
	}
	w.written += int64(n)
	if err != nil {
		w.failed = err
	}
	return n, err
}

// Flush writes the head when it is not written yet; the bytes are the caller's to send.
func (w *ResponseWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(false)
	}
}

// sendHead writes the status line and headers. final is set when the response ends without a body
// written, so an unknown length is zero.
func (w *ResponseWriter) sendHead(final bool) {
	w.headSent = true
	h := w.header
	bodyless := w.status == http.StatusNoContent || w.status == http.StatusNotModified
	w.noBody = bodyless || w.method == http.MethodHead
	if cl := h.Get("Content-Length"); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.length = n
		} else {
			h.Del("Content-Length")
		}
	}
	if w.length < 0 && !bodyless {
		switch {
		case final && !w.hasTrailers():
			if w.method != http.MethodHead {
				w.length = 0
				h.Set("Content-Length", "0")
			}
		case w.method == http.MethodHead:
		default:
			w.chunked = true
		}
	}
	if bodyless {
		h.Del("Content-Length")
		h.Del("Transfer-Encoding")
	}
	if w.chunked {
		h.Del("Transfer-Encoding")
		for _, v := range h["Trailer"] {
			for _, k := range bytes.Split([]byte(v), []byte(",")) {
				if k = bytes.TrimSpace(k); len(k) > 0 {
					w.trailers = append(w.trailers, http.CanonicalHeaderKey(string(k)))
				}
			}
		}
	} else if w.method != http.MethodHead { // a HEAD answer announces what a GET would send, as net/http's does
		h.Del("Trailer")
	}
	if AnyHasToken(h["Connection"], "close") {
		w.close = true
	}
	out := w.w
	_, _ = out.WriteString("HTTP/1.1 ")
	_, _ = out.WriteString(strconv.Itoa(w.status))
	_ = out.WriteByte(' ')
	if text := http.StatusText(w.status); text != "" {
		_, _ = out.WriteString(text)
	} else { // net/http's reason phrase for a code it does not know
		_, _ = out.WriteString("status code ")
		_, _ = out.WriteString(strconv.Itoa(w.status))
	}
	_, _ = out.WriteString("\r\n")
	for k, vs := range h {
		if len(k) > 0 && (k[0] == 'C' && k == "Connection" || k == "Transfer-Encoding" || strings.HasPrefix(k, http.TrailerPrefix)) {
			continue
		}
		if !IsToken(k) {
			continue // not a header name (net/http's parser lets "a b" through): net/http drops it too
		}
		for _, v := range vs {
			WriteHeaderLine(out, k, v)
		}
	}
	if _, ok := h["Date"]; !ok {
		WriteHeaderLine(out, "Date", Date())
	}
	if w.chunked {
		_, _ = out.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.close {
		_, _ = out.WriteString("Connection: close\r\n")
	}
	_, _ = out.WriteString("\r\n")
}

// hasTrailers reports whether the response has trailers to send (announced in a Trailer header, or
// set under http.TrailerPrefix): it then goes chunked even when its body is empty, as net/http's.
func (w *ResponseWriter) hasTrailers() bool {
	if _, ok := w.header["Trailer"]; ok {
		return true
	}
	for k := range w.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// End completes the response (the head when not written yet, the last chunk and the trailers) and
// reports whether the connection can carry another request after it: not when the response says it
// closes, or its body is shorter than its Content-Length.
func (w *ResponseWriter) End() bool {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(true)
	}
	out := w.w
	if w.failed == nil && w.chunked {
		_, _ = out.WriteString("0\r\n")
		// Names that are not tokens are dropped, as in the head (net/http drops them too).
		for _, k := range w.trailers {
			if !IsToken(k) {
				continue
			}
			for _, v := range w.header[k] {
				WriteHeaderLine(out, k, v)
			}
		}
		for k, vs := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && IsToken(name) {
				for _, v := range vs {
					WriteHeaderLine(out, name, v)
				}
			}
		}
		_, _ = out.WriteString("\r\n")
	}
	if w.failed != nil {
		return false
	}
	if !w.noBody && w.length >= 0 && w.written != w.length {
		return false // a short body: the client cannot find the next response
	}
	return !w.close
}

// Closes reports whether the connection closes after the response (known once its head is
// written).
func (w *ResponseWriter) Closes() bool { return w.close }

// WriteAnswer writes a whole answer: status code, the header fields h (with its Content-Length, as
// the request logic sets one), and body. It reports whether the connection can carry another
// request after it.
func WriteAnswer(out Writer, w *ResponseWriter, method string, closeAfter bool, code int, h http.Header, body string) bool {
	w.Reset(out, method, closeAfter)
	for k, vs := range h {
		w.header[k] = vs
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
	return w.End()
}
