package engine

import (
	"errors"
	"io"
	"net/http"
	"strings"
)

// forwardDirect does for a fast-path request what the ReverseProxy does, without its copies: the
// request's own header map is rewritten (the fast path owns the request and nothing reads it
// afterwards) and the response's header map becomes the writer's. Everything observable is the
// ReverseProxy's: hop-by-hop headers removed both ways ("Te: trailers" kept), Forwarded dropped,
// X-Forwarded-For appended to, X-Forwarded-Host and -Proto passed on or set, no User-Agent added,
// the response's trailers announced and sent, streaming responses flushed on every write, and a
// body that fails midway aborts the response (http.ErrAbortHandler) instead of completing it.
func (e *Engine) forwardDirect(w *h1Response, r *http.Request, x Exchange) {
	forwardRequestHeaders(r.Header, r.Header, r.RemoteAddr, r.Host)
	out := *r
	out.RequestURI = ""
	out.Body = nil
	out.Close = false
	out.URL.Scheme = "http"
	if c, _ := r.Context().Value(callKey{}).(*call); c != nil && c.target != "" {
		setTarget(out.URL, c.target)
	}

	res, err := e.RoundTrip(&out)
	if err != nil {
		e.errorHandler(w, &out, err)
		return
	}
	if err := e.relayResponse(w, &out, res, x); err != nil {
		e.errorHandler(w, &out, err)
	}
}

// relayResponse writes res to w as the ReverseProxy would (see forwardDirect) and closes its body.
// It returns an error, having written nothing, for a response it must not pass on; a body that
// fails midway aborts the response (it panics with http.ErrAbortHandler).
func (e *Engine) relayResponse(w *h1Response, r *http.Request, res *http.Response, x Exchange) error {
	if res.StatusCode == http.StatusSwitchingProtocols {
		_ = res.Body.Close()
		return errors.New("backend switched protocols without an upgrade request")
	}
	x.Responded(res.StatusCode, res.Header) // status for the metrics, cold-start headers
	removeHopByHop(res.Header)
	if len(w.header) == 0 {
		w.header, res.Header = res.Header, w.header
	} else {
		for k, vs := range res.Header {
			w.header[k] = append(w.header[k], vs...)
		}
	}
	if len(res.Trailer) > 0 {
		keys := make([]string, 0, len(res.Trailer))
		for k := range res.Trailer {
			keys = append(keys, k)
		}
		w.header.Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(res.StatusCode)
	flush := res.ContentLength == -1 || isEventStream(w.header.Get("Content-Type"))
	buf := buffers.Get().(*[]byte)
	err := copyBody(w, res.Body, *buf, flush)
	buffers.Put(buf)
	_ = res.Body.Close()
	if err != nil {
		e.log.V(1).Info("copying the response body failed; aborting the response", "host", r.Host, "error", err.Error())
		panic(http.ErrAbortHandler)
	}
	// Trailers go out as trailers, announced or not, never promoted to header fields (the head may
	// not be sent yet): under TrailerPrefix, which end writes after the last chunk.
	for k, vs := range res.Trailer {
		k = http.TrailerPrefix + k
		w.header[k] = append(w.header[k], vs...)
	}
	return nil
}

func copyBody(w *h1Response, body io.Reader, buf []byte, flush bool) error {
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			if flush {
				if err := w.FlushError(); err != nil {
					return err
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

func isEventStream(ct string) bool {
	ct, _, _ = strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}
