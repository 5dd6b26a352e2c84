package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// h1Server is the server side's fast path for the common request: HTTP/1.1, origin-form target,
// one Host header and no body. It reads requests straight from the accepted connection and answers
// them on the connection's own goroutine with a light ResponseWriter, where net/http's server spends
// a goroutine, a cancelable context and two read-deadline changes on every request to notice a
// client that goes away.
//
// Anything else — a body, Transfer-Encoding, Upgrade (WebSocket), Expect, the h2c preface or an
// h2c upgrade, HTTP/1.0, a header block larger than the read buffer, a missing or duplicated Host,
// bare-LF line ends, obsolete line folding — is handed over, with the bytes already read, to the
// standard net/http server through handoffListener, at a request boundary. The hand-over is for
// the rest of the connection.
//
// A client that goes away is noticed like net/http does it (a background read that cancels the
// request's context), but the read is only armed once a request has been running for watchAfter:
// held requests and slow upstreams are watched, quick ones cost nothing. One goroutine per server
// (watchLoop) finds the long-running requests, where a timer per request would cost a timer reset
// and stop on every request.
type h1Server struct {
	handler       http.Handler
	engine        *Engine // serves screened requests on the raw path; nil: none
	base          context.Context
	srv           *http.Server // serves handed-over connections; also the ServerContextKey value
	handoff       *handoffListener
	idleTimeout   time.Duration
	headerTimeout time.Duration
	watchAfter    time.Duration
	log           logr.Logger

	mu       sync.Mutex
	conns    map[*h1ServerConn]struct{}
	shutting bool
	zero     chan struct{} // closed when conns drops to zero while shutting
	watching bool          // watchLoop runs
	// loops, when set, serve the raw path's requests on event loops (see evLoops); loopConns
	// counts the client connections they own.
	loops     *evLoops
	loopConns int
	// closing mirrors shutting for the connections and the response writer, which read it on
	// every request.
	closing atomic.Bool
}

// h1ReadBuffer bounds the header block the fast path parses; larger ones are handed over.
const h1ReadBuffer = 4 << 10

var errFastClosed = errors.New("fast path closed")

// serve accepts connections from ln until it is closed.
func (s *h1Server) serve(ln net.Listener) error {
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			shutting := s.shutting
			s.mu.Unlock()
			if shutting || errors.Is(err, net.ErrClosed) {
				return errFastClosed
			}
			// Out of file descriptors and the like: back off as net/http does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Error(err, "accepting connection; retrying", "delay", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if s.loops != nil {
			s.loops.adopt(c)
			continue
		}
		sc := &h1ServerConn{s: s, c: c}
		if !s.track(sc) {
			_ = c.Close()
			continue
		}
		go sc.serve()
	}
}

func (s *h1Server) track(sc *h1ServerConn) bool { return s.trackConn(sc, false) }

// trackConn adds sc to the connections shutdown waits for; while shutting down only when force is
// set (a request an event loop started, which is finished).
func (s *h1Server) trackConn(sc *h1ServerConn, force bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shutting && !force {
		return false
	}
	if s.conns == nil {
		s.conns = map[*h1ServerConn]struct{}{}
	}
	s.conns[sc] = struct{}{}
	if !s.watching && s.watchAfter > 0 {
		s.watching = true
		go s.watchLoop()
	}
	return true
}

// watchLoop arms the client watch of every request that has been running for at least watchAfter
// (and at most twice that): a request still running at two ticks in a row. It ends when the server
// shut down and its last connection closed.
func (s *h1Server) watchLoop() {
	t := time.NewTicker(s.watchAfter)
	defer t.Stop()
	for range t.C {
		s.mu.Lock()
		if s.shutting && len(s.conns) == 0 {
			s.watching = false
			s.mu.Unlock()
			return
		}
		for sc := range s.conns {
			seq := sc.reqSeq.Load()
			if seq&1 == 1 && seq == sc.seenSeq {
				sc.watch()
			}
			sc.seenSeq = seq
		}
		s.mu.Unlock()
	}
}

func (s *h1Server) untrack(sc *h1ServerConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, sc)
	s.checkZeroLocked()
}

// loopConn counts a client connection an event loop takes (d 1; false: shutting down, it must be
// closed) or gives up (d -1).
func (s *h1Server) loopConn(d int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d > 0 && s.shutting {
		return false
	}
	s.loopConns += d
	s.checkZeroLocked()
	return true
}

// checkZeroLocked tells shutdown when the last connection closed.
func (s *h1Server) checkZeroLocked() {
	if s.shutting && len(s.conns) == 0 && s.loopConns == 0 && s.zero != nil {
		close(s.zero)
		s.zero = nil
	}
}

// setBusy marks sc as serving a request (busy) or waiting for the next one. It returns false when
// the server is shutting down and sc must close instead of reading another request. Lock-free: with
// shutdown's store to closing and load of busy, either sc sees closing or shutdown sees it busy
// (sequentially consistent atomics).
func (s *h1Server) setBusy(sc *h1ServerConn, busy bool) bool {
	sc.busyConn.Store(busy)
	return !s.closing.Load()
}

func (s *h1Server) shuttingDown() bool { return s.closing.Load() }

// shutdown stops reading new requests: idle connections are closed at once, busy ones after their
// current response. It waits until every connection is closed or ctx ends.
func (s *h1Server) shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.shutting = true
	s.closing.Store(true)
	for sc := range s.conns {
		if !sc.busyConn.Load() {
			_ = sc.c.Close()
		}
	}
	if s.loops != nil {
		s.loops.shutdown()
	}
	var zero chan struct{}
	if len(s.conns) > 0 || s.loopConns > 0 {
		if s.zero == nil {
			s.zero = make(chan struct{})
		}
		zero = s.zero
	}
	s.mu.Unlock()
	if zero == nil {
		return nil
	}
	select {
	case <-zero:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for connections to finish: %w", ctx.Err())
	}
}

// close closes every connection, busy or not.
func (s *h1Server) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutting = true
	s.closing.Store(true)
	for sc := range s.conns {
		_ = sc.c.Close()
	}
	if s.loops != nil {
		s.loops.close()
	}
}

// h1ServerConn is one client connection served by the fast path.
type h1ServerConn struct {
	s      *h1Server
	c      net.Conn
	cr     h1ConnReader
	br     *bufio.Reader
	bw     *bufio.Writer
	remote string
	// deadline is the read deadline last set (zero: none); the idle deadline is only moved when it
	// drifted by a quarter of the idle timeout, which saves a runtime timer update per request.
	deadline time.Time
	// headerBy, when set, is when the request header being read must be complete: its first byte
	// plus the header timeout. It is kept across a hand-off (to net/http, or from an event loop) so
	// that the timeouts do not add up.
	headerBy time.Time
	ctx      context.Context
	cancel   context.CancelFunc
	ip       string // the client's address without the port (X-Forwarded-For); "" when none

	busyConn atomic.Bool // serving a request, not waiting for one (see setBusy)
	// reqSeq is odd while a request is served; it counts requests twice. seenSeq is watchLoop's
	// last look at it (guarded by the server's mu).
	reqSeq  atomic.Uint64
	seenSeq uint64

	// The client watch (see h1Server): armed by watchLoop once a request runs for watchAfter.
	mu       sync.Mutex
	watching chan struct{} // non-nil while the background read runs; closed when it ends
	aborting bool          // the background read is being stopped on purpose
	gone     bool          // the client closed its side or the connection failed
	// peer is the upstream connection of the raw path's current request. It is closed when ctx ends
	// (client gone, drain cut-off) so that a read from it returns; aborted records that.
	peer    net.Conn
	aborted bool
	// rawServed: the last request was served on the raw path, which an event loop could have done.
	rawServed bool
}

// setPeer registers the upstream connection of the request being served. It returns false, and
// registers nothing, when ctx already ended.
func (sc *h1ServerConn) setPeer(c net.Conn) bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.aborted {
		return false
	}
	sc.peer = c
	return true
}

// clearPeer unregisters the upstream connection; it returns false when it was closed because ctx
// ended, so it must not be reused.
func (sc *h1ServerConn) clearPeer() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.peer = nil
	return !sc.aborted
}

// abortPeer runs once ctx ends.
func (sc *h1ServerConn) abortPeer() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.aborted = true
	if sc.peer != nil {
		_ = sc.peer.Close()
	}
}

// h1ConnReader reads from the connection, first returning the byte the background read got.
type h1ConnReader struct {
	c       net.Conn
	pending []byte
}

func (r *h1ConnReader) Read(p []byte) (int, error) {
	if len(r.pending) > 0 {
		n := copy(p, r.pending)
		r.pending = r.pending[n:]
		return n, nil
	}
	return r.c.Read(p)
}

func (sc *h1ServerConn) serve() { sc.serveFrom(nil) }

// serveFrom serves the connection, first (when set) finishing a request an event loop started.
func (sc *h1ServerConn) serveFrom(first *carried) {
	s := sc.s
	handedOff := false
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler { //nolint:errorlint // sentinel value
			s.log.Error(fmt.Errorf("%v", v), "panic serving request", "remote", sc.remote)
		}
		if !handedOff {
			_ = sc.c.Close()
		}
		if sc.cancel != nil {
			sc.cancel()
		}
		s.untrack(sc)
	}()
	sc.cr.c = sc.c
	sc.br = bufio.NewReaderSize(&sc.cr, h1ReadBuffer)
	sc.remote = sc.c.RemoteAddr().String()
	if ip, _, err := net.SplitHostPort(sc.remote); err == nil {
		sc.ip = ip
	}
	if first != nil {
		sc.ensureCtx()
		if !first.finish(s.engine, sc) || sc.ctx.Err() != nil || !s.setBusy(sc, false) {
			return
		}
	}
	for {
		if s.idleTimeout > 0 {
			if at := time.Now().Add(s.idleTimeout); sc.deadline.IsZero() || at.Sub(sc.deadline) > s.idleTimeout/4 {
				sc.setDeadline(at)
			}
		}
		if _, err := sc.br.Peek(1); err != nil {
			return // closed by the client, idle timeout, or shutdown
		}
		if !s.setBusy(sc, true) {
			return
		}
		n, ok, err := sc.screen()
		if err != nil {
			return
		}
		if !ok {
			handedOff = sc.handOff()
			return
		}
		sc.rawServed = false
		if !sc.serveOne(n) {
			return
		}
		if sc.rawServed && s.loops != nil && sc.backToLoop() {
			return
		}
		if !s.setBusy(sc, false) {
			return
		}
	}
}

func (sc *h1ServerConn) setDeadline(t time.Time) {
	sc.deadline = t
	_ = sc.c.SetReadDeadline(t)
}

// screen waits for the whole header block and reports its length and whether the fast path can
// serve it. Bytes are only peeked, so a request it refuses can be handed over intact.
func (sc *h1ServerConn) screen() (int, bool, error) {
	deadlineSet := false
	for {
		buf, _ := sc.br.Peek(sc.br.Buffered())
		if end := headerEnd(buf); end >= 0 {
			ok := fastRequest(buf[:end])
			if ok {
				sc.headerBy = time.Time{} // read; one handed over keeps it for net/http
			}
			return end, ok, nil
		}
		if len(buf) >= h1ReadBuffer || bareLF(buf) {
			return 0, false, nil // too large, or bare LF: net/http decides
		}
		if !deadlineSet && sc.s.headerTimeout > 0 {
			if sc.headerBy.IsZero() {
				sc.headerBy = time.Now().Add(sc.s.headerTimeout)
			}
			sc.setDeadline(sc.headerBy)
			deadlineSet = true
		}
		if _, err := sc.br.Peek(len(buf) + 1); err != nil {
			if len(buf) > 0 && !errors.Is(err, bufio.ErrBufferFull) {
				return 0, false, err
			}
			return 0, false, nil
		}
	}
}

// bareLF reports whether a head not yet complete (no CRLF CRLF in it) has a line feed without a
// carriage return before it. net/http's parsers end lines at any LF, so such a head may already be
// complete for them ("...\n\r\n", "...\n\n"): it is left to net/http, which reads it at once
// instead of waiting for bytes that never come.
func bareLF(b []byte) bool {
	for i := bytes.IndexByte(b, '\n'); i >= 0; {
		if i == 0 || b[i-1] != '\r' {
			return true
		}
		j := bytes.IndexByte(b[i+1:], '\n')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
}

// headerEnd returns the length of the header block in buf including its final CRLF CRLF, or -1.
func headerEnd(buf []byte) int {
	i := bytes.Index(buf, []byte("\r\n\r\n"))
	if i < 0 {
		return -1
	}
	return i + 4
}

// fastRequest reports whether the header block (request line and headers, CRLF ends) is a request
// the fast path serves exactly like net/http would.
func fastRequest(block []byte) bool {
	n, ok := screenRequest(block)
	return ok && n == 0
}

// screenRequest is fastRequest for a request that may have a body framed by one Content-Length
// (the event loops relay it, see evLoop.pumpBody): it returns the body's length. A length
// net/http reads otherwise than this does (signs, spaces, leading zeros, more than 18 digits, the
// header repeated) is refused, and the request goes to net/http.
func screenRequest(block []byte) (int64, bool) {
	line, rest, _ := bytes.Cut(block, []byte("\r\n"))
	method, rest1, ok := bytes.Cut(line, []byte(" "))
	if !ok || len(method) == 0 || !isToken(method) {
		return 0, false
	}
	target, proto, ok := bytes.Cut(rest1, []byte(" "))
	if !ok || len(target) == 0 || target[0] != '/' || string(proto) != "HTTP/1.1" {
		return 0, false
	}
	for _, b := range target {
		if b <= ' ' || b == 0x7f {
			return 0, false
		}
	}
	var length int64
	lengths := 0
	hosts := 0
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if len(l) == 0 {
			break // the empty line ending the block
		}
		if bytes.IndexByte(l, '\n') >= 0 || bytes.IndexByte(l, '\r') >= 0 {
			return 0, false // bare LF or CR
		}
		name, value, ok := bytes.Cut(l, []byte(":"))
		if !ok || len(name) == 0 || !isToken(name) {
			return 0, false // includes obsolete line folding (leading space)
		}
		value = bytes.Trim(value, " \t")
		if !fieldValue(value) {
			return 0, false
		}
		switch {
		case asciiEqualFold(name, "Host"):
			hosts++
			if !validHost(value) {
				return 0, false
			}
		case asciiEqualFold(name, "Content-Length"):
			lengths++
			if string(value) == "0" {
				continue // net/http takes repeated zeros as one
			}
			if len(value) == 0 || len(value) > 18 || value[0] == '0' {
				return 0, false
			}
			for _, c := range value {
				if c < '0' || c > '9' {
					return 0, false
				}
				length = length*10 + int64(c-'0')
			}
		case asciiEqualFold(name, "Connection"):
			if !connectionPlain(value) {
				return 0, false
			}
		case asciiEqualFold(name, "Transfer-Encoding"), asciiEqualFold(name, "Upgrade"),
			asciiEqualFold(name, "Expect"), asciiEqualFold(name, "HTTP2-Settings"):
			return 0, false
		}
	}
	if length > 0 && lengths > 1 {
		return 0, false
	}
	return length, hosts == 1
}

// connectionPlain reports whether a Connection header only says keep-alive or close.
func connectionPlain(v []byte) bool {
	for len(v) > 0 {
		var tok []byte
		tok, v, _ = bytes.Cut(v, []byte(","))
		tok = bytes.Trim(tok, " \t")
		if !asciiEqualFold(tok, "keep-alive") && !asciiEqualFold(tok, "close") {
			return false
		}
	}
	return true
}

// asciiEqualFold reports whether b equals s, ignoring ASCII case (header names and tokens).
func asciiEqualFold[T string | []byte](b T, s string) bool {
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

func isToken[T string | []byte](b T) bool {
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHost accepts the characters of host names, IPv4 and bracketed IPv6 literals and a port; the
// rest (and an empty host) is left to net/http.
func validHost(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '.' || c == ':' || c == '[' || c == ']' || c == '_':
		default:
			return false
		}
	}
	return true
}

// serveOne reads the screened request of n header bytes and answers it. It returns whether the
// connection stays open for another request.
func (sc *h1ServerConn) serveOne(n int) bool {
	s := sc.s
	sc.ensureCtx()
	if s.engine != nil {
		head, _ := sc.br.Peek(n)
		if served, keep := s.engine.serveRaw(sc, head); served {
			sc.rawServed = true
			return keep && sc.ctx.Err() == nil
		}
	}
	// The idle or header deadline stays: the handler reads nothing (no body), and the client watch
	// clears it before it reads.
	req, err := http.ReadRequest(sc.br)
	if err != nil || req.ContentLength != 0 || req.Body != http.NoBody {
		// The screen passed it, so this is a malformed request: answer as net/http does.
		_, _ = sc.c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"))
		return false
	}
	req.RemoteAddr = sc.remote
	req = req.WithContext(sc.ctx)

	sc.startWatch()
	w := h1ResponsePool.Get().(*h1Response)
	w.reset(sc, req)
	s.handler.ServeHTTP(w, req)
	keep := w.finish()
	w.reset(nil, nil)
	h1ResponsePool.Put(w)
	if !sc.stopWatch() {
		keep = false
	}
	return keep && sc.ctx.Err() == nil
}

// ensureCtx sets up what serving a request needs, once per connection.
func (sc *h1ServerConn) ensureCtx() {
	if sc.ctx == nil {
		sc.ctx, sc.cancel = context.WithCancel(context.WithValue(sc.s.base, http.ServerContextKey, sc.s.srv))
		sc.bw = bufio.NewWriterSize(sc.c, 4<<10)
		context.AfterFunc(sc.ctx, sc.abortPeer) // once per connection, not per request
	}
}

// startWatch lets the client watch be armed for the request being served: at once when
// watchAfter is not positive, else by watchLoop.
func (sc *h1ServerConn) startWatch() {
	sc.reqSeq.Add(1) // odd: serving
	if sc.s.watchAfter <= 0 {
		sc.watch()
	}
}

// watch starts the background read when the request is still running.
func (sc *h1ServerConn) watch() {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	// Serving is reqSeq odd; stopWatch makes it even before it takes mu, so it finds any watch
	// started here.
	if sc.reqSeq.Load()&1 == 0 || sc.watching != nil || sc.gone {
		return
	}
	if sc.br.Buffered() > 0 || len(sc.cr.pending) > 0 {
		return // the client already sent the next request (pipelining); it is still there
	}
	done := make(chan struct{})
	sc.watching = done
	sc.setDeadline(time.Time{})
	go func() {
		defer close(done)
		var b [1]byte
		n, err := sc.c.Read(b[:])
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if n > 0 {
			sc.cr.pending = append(sc.cr.pending[:0], b[0]) // the start of a pipelined request
			return
		}
		if err != nil && !sc.aborting {
			sc.gone = true
			sc.cancel() // the client went away: the request's context ends
		}
	}()
}

// stopWatch ends the client watch after a request; it returns false when the client went away.
func (sc *h1ServerConn) stopWatch() bool {
	sc.reqSeq.Add(1) // even: done
	sc.mu.Lock()
	done := sc.watching
	if done != nil {
		sc.aborting = true
		sc.setDeadline(time.Unix(1, 0))
	}
	sc.mu.Unlock()
	if done != nil {
		<-done
		sc.mu.Lock()
		sc.watching = nil
		sc.aborting = false
		sc.setDeadline(time.Time{})
		sc.mu.Unlock()
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return !sc.gone
}

// backToLoop moves an idle connection to an event loop once it carried a request the loops serve:
// a connection an event loop handed over (a held request, a chunked response, …) goes back to
// them, so that a client's long-lived connection does not stay on the slower path for good. It
// reports whether the connection left (moved, or lost if its socket could not be taken).
func (sc *h1ServerConn) backToLoop() bool {
	if sc.br.Buffered() > 0 || len(sc.cr.pending) > 0 || sc.s.shuttingDown() {
		return false
	}
	sc.s.loops.adopt(sc.c) // closes sc.c
	return true
}

// handOff passes the connection, with the bytes read so far, to the net/http server.
func (sc *h1ServerConn) handOff() bool {
	sc.setDeadline(time.Time{})
	if sc.s.shuttingDown() {
		return false
	}
	return sc.s.handoff.give(newWatchedConn(sc.c, sc.br, sc.headerBy))
}

// h1Response is the fast path's ResponseWriter: the head is written into the connection's buffer
// on the first Write or Flush (or at the end), the body with Content-Length when the handler set
// one, else chunked.
type h1Response struct {
	sc          *h1ServerConn
	req         *http.Request
	header      http.Header
	status      int
	wroteHeader bool
	headSent    bool
	chunked     bool
	noBody      bool
	closeAfter  bool
	length      int64 // declared Content-Length, -1 when none
	written     int64
	failed      error
	aborted     bool // nothing is to be sent and the connection closes (see abortResponse)
	trailers    []string
}

var h1ResponsePool = sync.Pool{New: func() any { return &h1Response{} }}

func (w *h1Response) reset(sc *h1ServerConn, req *http.Request) {
	h := w.header
	clear(h)
	trailers := w.trailers[:0]
	*w = h1Response{sc: sc, req: req, header: h, length: -1, trailers: trailers}
	if w.header == nil {
		w.header = make(http.Header, 8)
	}
}

func (w *h1Response) Header() http.Header { return w.header }

func (w *h1Response) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code >= 100 && code < 200 {
		return // informational responses are not forwarded by this writer
	}
	w.wroteHeader = true
	w.status = code
}

func (w *h1Response) Write(p []byte) (int, error) {
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
	bw := w.sc.bw
	if w.chunked {
		_, _ = bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		_, _ = bw.WriteString("\r\n")
	}
	n, err := bw.Write(p)
	if w.chunked && err == nil {
		_, err = bw.WriteString("\r\n")
	}
	w.written += int64(n)
	if err != nil {
		w.failed = err
	}
	return n, err
}

// Flush sends what was written so far.
func (w *h1Response) Flush() {
	_ = w.FlushError()
}

// FlushError is Flush reporting a write error (http.ResponseController uses it).
func (w *h1Response) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(false)
	}
	if w.failed != nil {
		return w.failed
	}
	if err := w.sc.bw.Flush(); err != nil {
		w.failed = err
		return err
	}
	return nil
}

// sendHead writes the status line and headers. final is set when the handler returned without
// writing a body, so an unknown length is zero.
func (w *h1Response) sendHead(final bool) {
	w.headSent = true
	h := w.header
	bodyless := w.status == http.StatusNoContent || w.status == http.StatusNotModified
	w.noBody = bodyless || w.req.Method == http.MethodHead
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
			if w.req.Method != http.MethodHead {
				w.length = 0
				h.Set("Content-Length", "0")
			}
		case w.req.Method == http.MethodHead:
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
	} else if w.req.Method != http.MethodHead { // a HEAD answer announces what a GET would send, as net/http's does
		h.Del("Trailer")
	}
	if w.req.Close || w.sc.s.shuttingDown() || anyHasToken(h["Connection"], "close") {
		w.closeAfter = true
	}
	bw := w.sc.bw
	_, _ = bw.WriteString("HTTP/1.1 ")
	_, _ = bw.WriteString(strconv.Itoa(w.status))
	_ = bw.WriteByte(' ')
	if text := http.StatusText(w.status); text != "" {
		_, _ = bw.WriteString(text)
	} else { // net/http's reason phrase for a code it does not know
		_, _ = bw.WriteString("status code ")
		_, _ = bw.WriteString(strconv.Itoa(w.status))
	}
	_, _ = bw.WriteString("\r\n")
	for k, vs := range h {
		if len(k) > 0 && (k[0] == 'C' && k == "Connection" || k == "Transfer-Encoding" || hasPrefix(k, http.TrailerPrefix)) {
			continue
		}
		if !isToken(k) {
			continue // not a header name (net/http's parser lets "a b" through): net/http drops it too
		}
		for _, v := range vs {
			writeHeaderLine(bw, k, v)
		}
	}
	if _, ok := h["Date"]; !ok {
		writeHeaderLine(bw, "Date", httpDate())
	}
	if w.chunked {
		_, _ = bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if w.closeAfter {
		_, _ = bw.WriteString("Connection: close\r\n")
	}
	_, _ = bw.WriteString("\r\n")
}

// hasTrailers reports whether the response has trailers to send (announced in a Trailer header, or
// set under http.TrailerPrefix): it then goes chunked even when its body is empty, as net/http's.
func (w *h1Response) hasTrailers() bool {
	if _, ok := w.header["Trailer"]; ok {
		return true
	}
	for k := range w.header {
		if hasPrefix(k, http.TrailerPrefix) {
			return true
		}
	}
	return false
}

// writeHeaderLine writes one header line; line breaks in the value become spaces, as net/http does.
func writeHeaderLine(bw headWriter, k, v string) {
	_, _ = bw.WriteString(k)
	_, _ = bw.WriteString(": ")
	if strings.ContainsAny(v, "\r\n") {
		b := []byte(v)
		for i, c := range b {
			if c == '\r' || c == '\n' {
				b[i] = ' '
			}
		}
		v = string(b)
	}
	_, _ = bw.WriteString(v)
	_, _ = bw.WriteString("\r\n")
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

// hasToken reports whether the comma-separated list v contains tok, ignoring ASCII case.
func hasToken(v, tok string) bool {
	for len(v) > 0 {
		var t string
		t, v, _ = strings.Cut(v, ",")
		if asciiEqualFold(textproto.TrimString(t), tok) {
			return true
		}
	}
	return false
}

// anyHasToken reports whether one of the header values vs contains tok (see hasToken).
func anyHasToken(vs []string, tok string) bool {
	for _, v := range vs {
		if hasToken(v, tok) {
			return true
		}
	}
	return false
}

// finish completes and sends the response after the handler returned; it reports whether the
// connection can carry another request.
func (w *h1Response) finish() bool { return w.end(true) }

// end completes the response; with flush false the caller flushes the connection's buffer.
func (w *h1Response) end(flush bool) bool {
	if w.aborted { // not completed: a head already sent ends with the connection
		return false
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.headSent {
		w.sendHead(true)
	}
	bw := w.sc.bw
	if w.failed == nil && w.chunked {
		_, _ = bw.WriteString("0\r\n")
		// Names that are not tokens are dropped, as in the head (net/http drops them too).
		for _, k := range w.trailers {
			if !isToken(k) {
				continue
			}
			for _, v := range w.header[k] {
				writeHeaderLine(bw, k, v)
			}
		}
		for k, vs := range w.header {
			if name, ok := strings.CutPrefix(k, http.TrailerPrefix); ok && isToken(name) {
				for _, v := range vs {
					writeHeaderLine(bw, name, v)
				}
			}
		}
		_, _ = bw.WriteString("\r\n")
	}
	if w.failed == nil && flush {
		if err := bw.Flush(); err != nil {
			w.failed = err
		}
	}
	if w.failed != nil {
		return false
	}
	if !w.noBody && w.length >= 0 && w.written != w.length {
		return false // a short body: the client cannot find the next response
	}
	return !w.closeAfter
}

// handoffListener is the net.Listener the net/http server accepts handed-over connections from.
type handoffListener struct {
	addr   net.Addr
	ch     chan net.Conn
	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// give passes c to Accept; it returns false (and c stays with the caller) once the listener closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }
