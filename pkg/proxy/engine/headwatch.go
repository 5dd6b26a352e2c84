package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/textproto"
	"os"
	"sync"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/engine/h1"
)

// A request with both Content-Length and Transfer-Encoding must be answered with the connection
// closed (RFC 9112 section 6.1): bytes after it may be a request smuggled past a front proxy that
// framed it by its Content-Length. net/http reads such a request by its Transfer-Encoding and
// removes the Content-Length before the handler sees it, so a connection net/http serves (every
// connection without the fast path, and those the fast path hands over) carries a headWatch: a
// second reader of the bytes net/http reads, which frames them with net/http's own parsers
// (http.ReadRequest for each head, httputil's chunked reader for bodies) and records a head that
// had both. The handler (closeAfterBothLengths) looks at it before answering.
//
// Cost: a copy of every byte read on the connection, parsed twice (heads without a length line only
// line by line), and a goroutine while there is something to parse; the net/http path carries
// bodies and upgrades, the fast path's common requests never meet it.

// headWatchMaxPending bounds the bytes read on the connection that the watch has not parsed yet;
// a reader ahead by more waits for it. It is small so that the copy stays small: with thousands of
// connections sending large heads at once the parsers fall behind, and each copy grew to the whole
// head (at 256 KiB: 706 MB allocated for 3,000 heads of 100 KiB, a quarter of all; see
// docs/benchmarks.md#held-requests-under-a-flood).
const headWatchMaxPending = 16 << 10

// headWatchMaxHead bounds the head the watch reads (net/http's default MaxHeaderBytes and its
// slack); a longer one is refused by net/http, which closes the connection.
const headWatchMaxHead = http.DefaultMaxHeaderBytes + 4096

// headWatch parses a copy of a connection's request stream. Its parser runs on a goroutine of its
// own while there are bytes to parse, and ends between requests once it has parsed everything it was
// given: an idle keep-alive connection costs the watch's struct, not a goroutine and its buffers.
// It is safe for concurrent use.
type headWatch struct {
	mu      sync.Mutex
	cond    sync.Cond
	pending []byte
	running bool // a parser goroutine runs
	idle    bool // the parser waits for bytes, or ended between requests with nothing left
	stopped bool // the parser ended (the stream is not HTTP/1 any more, or the connection closed)
	both    bool // a head with both Content-Length and Transfer-Encoding was read
	post    bool // the last head was a POST's (see run)

	// seen, when set (tests), is called with every head the parser frames.
	seen func(head []byte)
}

func newHeadWatch() *headWatch { return startHeadWatch(nil) }

func startHeadWatch(seen func(head []byte)) *headWatch {
	w := &headWatch{seen: seen, idle: true}
	w.cond.L = &w.mu
	return w
}

// feed passes bytes read on the connection to the parser, starting it when none runs. It blocks
// while the parser is behind by more than headWatchMaxPending.
//
// The common case costs no copy and no goroutine: a read that is exactly one whole head without a
// Content-Length or Transfer-Encoding line (a request without a body, which ends where its head
// ends), arriving while the parser is parked at a request boundary, is framed here.
func (w *headWatch) feed(p []byte) {
	w.mu.Lock()
	for len(w.pending) > headWatchMaxPending && !w.stopped {
		w.cond.Wait()
	}
	if w.stopped {
		w.mu.Unlock()
		return
	}
	if !w.running && !w.post && len(w.pending) == 0 && wholeBodylessHead(p) {
		w.post = bytes.HasPrefix(p, []byte("POST "))
		w.mu.Unlock()
		if w.seen != nil {
			w.seen(p)
		}
		return
	}
	defer w.mu.Unlock()
	w.pending = append(w.pending, p...)
	if !w.running {
		w.running, w.idle = true, false
		go w.run()
	}
	w.cond.Broadcast()
}

// wholeBodylessHead reports whether p is exactly one request head (as readHead frames it: lines
// ending in LF, up to the first empty one, the first line not empty) with neither a Content-Length
// nor a Transfer-Encoding line: a request net/http reads without a body, so that the next byte on
// the connection starts the next request.
func wholeBodylessHead(p []byte) bool {
	if len(p) == 0 || len(p) > headWatchMaxHead || p[0] == '\r' || p[0] == '\n' || h1.LooseHeadEnd(p) != len(p) {
		return false
	}
	cl, te := lengthLines(p)
	return !cl && !te
}

// Read is the parser's side of the stream.
func (w *headWatch) Read(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.pending) == 0 {
		if w.stopped {
			return 0, io.EOF
		}
		w.idle = true
		w.cond.Broadcast()
		w.cond.Wait()
		w.idle = false
	}
	n := copy(p, w.pending)
	w.pending = w.pending[:copy(w.pending, w.pending[n:])]
	w.cond.Broadcast()
	return n, nil
}

// sawBoth reports whether a head read so far had both lengths. It waits until the parser has
// parsed every byte read on the connection: the head of the request being answered was read
// before its handler runs.
func (w *headWatch) sawBoth() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for !w.stopped && !(w.idle && len(w.pending) == 0) {
		w.cond.Wait()
	}
	return w.both
}

// stop ends the parser; bytes are no longer copied.
func (w *headWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.pending = nil
	w.cond.Broadcast()
}

// parked ends the parser between requests when it has parsed everything it was given (br holds
// nothing either); the next feed starts another.
func (w *headWatch) parked(br *bufio.Reader) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if br.Buffered() > 0 || len(w.pending) > 0 || w.stopped {
		return false
	}
	w.running, w.idle = false, true
	if cap(w.pending) > 4<<10 {
		w.pending = nil // a large body passed: its buffer goes
	}
	w.cond.Broadcast()
	return true
}

// watchParser is what a running parser uses; pooled between runs.
type watchParser struct {
	br  *bufio.Reader
	hr  bytes.Reader
	hbr *bufio.Reader // reads a head with net/http (lines longer than it are joined)
	buf []byte
}

var watchParsers = sync.Pool{New: func() any {
	wp := &watchParser{br: bufio.NewReaderSize(nil, 4<<10)}
	wp.hbr = bufio.NewReaderSize(&wp.hr, 512)
	return wp
}}

// run frames the stream as net/http does, from a request boundary, until it has nothing left to
// parse there (parked), or the stream ends or stops being HTTP/1 (stop).
func (w *headWatch) run() {
	wp := watchParsers.Get().(*watchParser)
	br := wp.br
	br.Reset(w)
	if !w.frame(wp) {
		w.stop()
	}
	br.Reset(nil)
	wp.hr.Reset(nil)
	if cap(wp.buf) > 4<<10 {
		wp.buf = nil
	}
	watchParsers.Put(wp)
}

// frame parses requests; it returns true when it parked between two.
func (w *headWatch) frame(wp *watchParser) bool {
	br := wp.br
	for {
		if w.parked(br) {
			return true
		}
		if w.post { // net/http's tolerance for old clients: up to 4 CR or LF after a POST are skipped
			peek, _ := br.Peek(4)
			n := 0
			for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
				n++
			}
			_, _ = br.Discard(n)
		}
		head, err := readHead(br, wp.buf[:0])
		if err != nil {
			return false
		}
		wp.buf = head // reused for the next head: nothing keeps this one
		if w.seen != nil {
			w.seen(head)
		}
		w.post = bytes.HasPrefix(head, []byte("POST "))
		cl, te := lengthLines(head)
		if cl && te {
			w.mu.Lock()
			w.both = true
			w.mu.Unlock()
		}
		if !cl && !te {
			continue // a request without either has no body (RFC 9112 section 6.3)
		}
		wp.hr.Reset(head)
		wp.hbr.Reset(&wp.hr)
		req, err := http.ReadRequest(wp.hbr)
		if err != nil || req.ProtoMajor != 1 {
			return false // net/http refuses it too (and closes), or it is the h2c preface
		}
		switch {
		case len(req.TransferEncoding) > 0: // chunked, the only coding net/http accepts
			if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
				return false
			}
			if _, err := textproto.NewReader(br).ReadMIMEHeader(); err != nil { // the trailer
				return false
			}
		case req.ContentLength > 0:
			if _, err := io.CopyN(io.Discard, br, req.ContentLength); err != nil {
				return false
			}
		}
	}
}

// readHead reads a request head and returns the part of it that frames the request, in head: the
// request line and the Content-Length and Transfer-Encoding lines, each with the continuation lines
// (obsolete folding) that follow it. Lines end in LF, with or without CR, as net/http's textproto
// reads them. The other lines are read past, not kept: http.ReadRequest frames the part as it frames
// the whole head (a request net/http refuses for a line left out is one whose connection it closes,
// where the watch is no longer needed), and a flood of large heads costs the watch what a line
// costs, not a copy of every head. The limit applies to the whole head.
func readHead(br *bufio.Reader, head []byte) ([]byte, error) {
	size := 0
	first, keep, atStart := true, true, true // keep: the line being read (and its continuations) is kept
	for {
		line, err := br.ReadSlice('\n')
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
		size += len(line)
		if size > headWatchMaxHead {
			return nil, errors.New("request head too large")
		}
		if atStart { // the start of a line: decide whether it is kept
			switch {
			case string(line) == "\r\n" || string(line) == "\n":
				if first {
					return nil, errors.New("empty request line") // net/http refuses it and closes
				}
				return append(head, line...), nil
			case first:
				keep = true
			case line[0] == ' ' || line[0] == '\t':
				// a continuation of the line before: kept with it
			default:
				keep = framingLine(line)
			}
			first = false
		}
		if keep {
			head = append(head, line...)
		}
		atStart = err == nil // a line longer than br's buffer goes on in the next slice
	}
}

// framingLine reports whether a header line (its start, at least up to a colon when it has one)
// is a Content-Length or Transfer-Encoding line, named as lengthLines names them.
func framingLine(line []byte) bool {
	name, _, _ := bytes.Cut(line, []byte(":"))
	name = bytes.TrimRight(name, " \t")
	return h1.EqualFold(name, "Content-Length") || h1.EqualFold(name, "Transfer-Encoding")
}

// lengthLines reports whether a request head has a Content-Length line and a Transfer-Encoding
// line (lines end in LF, with or without CR; the request line is skipped).
func lengthLines(head []byte) (cl, te bool) {
	_, rest, _ := bytes.Cut(head, []byte("\n"))
	for len(rest) > 0 {
		var l []byte
		l, rest, _ = bytes.Cut(rest, []byte("\n"))
		name, _, _ := bytes.Cut(l, []byte(":"))
		name = bytes.TrimRight(name, " \t")
		cl = cl || h1.EqualFold(name, "Content-Length")
		te = te || h1.EqualFold(name, "Transfer-Encoding")
	}
	return cl, te
}

// watchedConn is a connection served by net/http: reads come from r (the connection itself, or
// the fast path's buffer for a connection it hands over) and are copied to watch.
type watchedConn struct {
	net.Conn
	r     io.Reader
	watch *headWatch
	// tls is the connection's TLS state, for Request.TLS, on the TLS port (see ServeTLS).
	tls *tls.ConnectionState
	// headerBy, when set, is the header deadline the fast path started (see h1ServerConn.headerBy).
	headerBy time.Time
	// gate bounds the heads parsed at once on the connections the loops hand over (see headGate).
	gate gateState
}

func newWatchedConn(c net.Conn, r io.Reader, headerBy time.Time) *watchedConn {
	return &watchedConn{Conn: c, r: r, watch: newHeadWatch(), headerBy: headerBy}
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := 0, error(nil)
	if c.gate.holding() {
		// What has arrived is read without waiting, keeping the slot: a head sent at once is
		// parsed to its end before the slot goes to another (thousands of heads parsed a piece
		// each in turn would all be half-parsed in memory at once). The slot is given up only to
		// wait for the client.
		n, err = c.readNow(p)
		if n == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
			c.gate.release()
			n, err = c.r.Read(p)
			if n > 0 {
				c.gate.acquire()
			}
		}
	} else if n, err = c.r.Read(p); n > 0 {
		c.gate.acquire() // before what arrived is parsed
	}
	if n > 0 {
		c.watch.feed(p[:n])
	}
	return n, err
}

// readNow reads what has arrived, without waiting (os.ErrDeadlineExceeded: nothing has), and
// restores the read deadline net/http set.
func (c *watchedConn) readNow(p []byte) (int, error) {
	_ = c.Conn.SetReadDeadline(time.Unix(1, 0))
	n, err := c.r.Read(p)
	_ = c.Conn.SetReadDeadline(c.gate.deadline())
	return n, err
}

func (c *watchedConn) Write(p []byte) (int, error) {
	c.gate.release() // an answer is written: the head was parsed (or refused)
	return c.Conn.Write(p)
}

func (c *watchedConn) Close() error {
	c.gate.close()
	c.watch.stop()
	return c.Conn.Close()
}

// SetReadDeadline keeps net/http's first deadline, the one for the header of the request the fast
// path started to read, no later than headerBy. A first deadline of zero (an h2c connection) ends
// the adjustment.
func (c *watchedConn) SetReadDeadline(t time.Time) error {
	if by := c.headerBy; !by.IsZero() {
		c.headerBy = time.Time{}
		if !t.IsZero() && t.After(by) {
			t = by
		}
	}
	c.gate.setDeadline(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *watchedConn) SetDeadline(t time.Time) error {
	c.gate.setDeadline(t)
	return c.Conn.SetDeadline(t)
}

// watchedListener wraps the connections of a listener net/http serves directly.
type watchedListener struct{ net.Listener }

func (l watchedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newWatchedConn(c, c, time.Time{}), nil
}

type watchedConnKey struct{}

// watchedContext is the net/http server's ConnContext: closeAfterBothLengths finds the connection
// through it.
func watchedContext(ctx context.Context, c net.Conn) context.Context {
	if wc, ok := c.(*watchedConn); ok {
		return context.WithValue(ctx, watchedConnKey{}, wc)
	}
	return ctx
}

// closeAfterBothLengths has the net/http server close the connection after answering a request once
// a request head on it had both Content-Length and Transfer-Encoding ("Connection: close" set
// before the handler runs, which the Proxy keeps on every answer). On the TLS port it also gives
// the request its connection's TLS state, which net/http cannot see through the watch.
type closeAfterBothLengths struct{ h http.Handler }

func (c closeAfterBothLengths) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if wc, ok := r.Context().Value(watchedConnKey{}).(*watchedConn); ok && r.ProtoMajor == 1 {
		wc.gate.served()
		defer wc.gate.next(r.Header.Get("Upgrade") != "")
		if wc.watch.sawBoth() {
			w.Header().Set("Connection", "close")
		}
		if r.TLS == nil {
			r.TLS = wc.tls
		}
	}
	c.h.ServeHTTP(w, r)
}
