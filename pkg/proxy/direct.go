package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/httpscale/httpscale/pkg/routing"
)

// hopHeaders are removed from forwarded requests and responses (RFC 9110 section 7.6.1), with
// every header the Connection header names; the same list httputil.ReverseProxy uses.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// directEligible reports whether a request can skip the ReverseProxy: it was read by the server's
// fast path (plain HTTP/1.1 without a body or an upgrade, see h1Server) and goes to an HTTP/1.1
// backend.
func directEligible(w http.ResponseWriter, b *backend) (*h1Response, bool) {
	fw, ok := w.(*h1Response)
	return fw, ok && b.protocol != routing.ProtocolH2C
}

// forwardDirect does for a fast-path request what the ReverseProxy does, without its copies: the
// request's own header map is rewritten (the fast path owns the request and nothing reads it
// afterwards) and the response's header map becomes the writer's. Everything observable is the
// ReverseProxy's: hop-by-hop headers removed both ways ("Te: trailers" kept), Forwarded dropped,
// X-Forwarded-For appended to, X-Forwarded-Host and -Proto passed on or set, no User-Agent added,
// the response's trailers announced and sent, streaming responses flushed on every write, and a
// body that fails midway aborts the response (http.ErrAbortHandler) instead of completing it.
func (p *Proxy) forwardDirect(w *h1Response, r *http.Request) {
	h := r.Header
	teTrailers := anyHasToken(h["Te"], "trailers")
	removeHopByHop(h)
	if teTrailers {
		h["Te"] = []string{"trailers"}
	}
	delete(h, "Forwarded")
	dropUnderscoreHeaders(h)
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := h["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		h["X-Forwarded-For"] = []string{ip}
	} else {
		delete(h, "X-Forwarded-For")
	}
	if len(h["X-Forwarded-Host"]) == 0 {
		h["X-Forwarded-Host"] = []string{r.Host}
	}
	if len(h["X-Forwarded-Proto"]) == 0 {
		h["X-Forwarded-Proto"] = []string{"http"}
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // an empty value keeps Request.Write from adding Go's
	}
	out := *r
	out.RequestURI = ""
	out.Body = nil
	out.Close = false
	out.URL.Scheme = "http"

	res, err := p.RoundTrip(&out)
	if err != nil {
		p.errorHandler(w, &out, err)
		return
	}
	if err := p.relayResponse(w, &out, res); err != nil {
		p.errorHandler(w, &out, err)
	}
}

// relayResponse writes res to w as the ReverseProxy would (see forwardDirect) and closes its body.
// It returns an error, having written nothing, for a response it must not pass on; a body that
// fails midway aborts the response (it panics with http.ErrAbortHandler).
func (p *Proxy) relayResponse(w *h1Response, r *http.Request, res *http.Response) error {
	if res.StatusCode == http.StatusSwitchingProtocols {
		_ = res.Body.Close()
		return errors.New("backend switched protocols without an upgrade request")
	}
	_ = p.modifyResponse(res) // status for the metrics, cold-start headers
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
		p.log.V(1).Info("copying the response body failed; aborting the response", "host", r.Host, "error", err.Error())
		panic(http.ErrAbortHandler)
	}
	for k, vs := range res.Trailer {
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

func removeHopByHop(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}
