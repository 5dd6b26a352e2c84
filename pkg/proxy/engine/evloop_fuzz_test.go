//go:build linux

package engine

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
)

// FuzzEventLoopRelay: an upstream answers a request with arbitrary bytes; the event loop relays
// them, and so does the net/http path (net/http's server with the ReverseProxy and the pool's
// transport), over real loopback sockets. A client must get the same thing from both (status,
// header fields but Date, body, whether the connection stays open), and a second request on the
// same client connection must get its own answer, never bytes of the first response (a desync).
//
// An input whose framing needs the end of the stream (close-delimited, or shorter than it says) is
// sent with the upstream closing its side after it; any other input is followed by nothing, and
// the upstream keeps the connection open for the second request if the proxy reuses it.
func FuzzEventLoopRelay(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
		"HTTP/1.1 404 Not Found\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabcdef",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nKeep-Alive: timeout=5\r\n\r\nshort",
		"HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nEVIL",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 304 Not Modified\r\nEtag: \"x\"\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 5\r\n\r\ndata\n",
		"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nclose-delimited",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\nContent-Length: 2\n\nok",
		"HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", 9000) + "\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
		"garbage\r\n\r\n",
		// Bodies larger than the upstream buffer, which the loop reads straight into its body buffer.
		"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + strings.Repeat("b", 100000),
		"HTTP/1.1 200 OK\r\nContent-Length: 16384\r\n\r\n" + strings.Repeat("b", 16384) + "EVIL",
		"HTTP/1.1 200 OK\r\nContent-Length: 70000\r\n\r\n" + strings.Repeat("b", 70000) + "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nEVIL",
		"HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n" + strings.Repeat("b", 12000),
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	rig := relayRig(f)
	f.Fuzz(func(t *testing.T, in []byte, head bool) {
		method := http.MethodGet
		if head {
			method = http.MethodHead
		}
		rig.up.set(in, needsEOF(in, method))
		// net/http sniffs a Content-Type, the loops add none; and for a response without a length
		// of its own each proxy chooses the framing (net/http's server: Content-Length when the
		// body ended before its first flush, which a timer races with; the loops: chunked).
		sniffed, framed := upstreamFields(in, method)
		loops := rig.exchange(t, rig.loops, method, sniffed, framed)
		std := rig.exchange(t, rig.std, method, sniffed, framed)
		if d := cmp.Diff(std, loops); d != "" {
			t.Fatalf("for %q (%s) the event loop's client gets another answer than net/http's (-net/http +loops):\n%s", in, method, d)
		}
	})
}

// upstreamFields reports of the final response at the start of in whether it has no Content-Type
// (sniffed) and no length of its own (framed: chunked or to the end of the stream).
func upstreamFields(in []byte, method string) (sniffed, framed bool) {
	br := bufio.NewReader(bytes.NewReader(in))
	for {
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return true, true
		}
		if res.StatusCode >= 100 && res.StatusCode < 200 && res.StatusCode != http.StatusSwitchingProtocols {
			continue
		}
		_, ct := res.Header["Content-Type"]
		return !ct, res.ContentLength < 0 || len(res.TransferEncoding) > 0
	}
}

// needsEOF reports whether a client of the upstream could only tell where the response in ends by
// the end of the stream: no response, a close-delimited body, or one shorter than its framing says.
func needsEOF(in []byte, method string) bool {
	br := bufio.NewReader(bytes.NewReader(in))
	for {
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			return true
		}
		if res.StatusCode >= 100 && res.StatusCode < 200 && res.StatusCode != http.StatusSwitchingProtocols {
			continue // a transport skips informational responses
		}
		if res.Close || res.ContentLength < 0 && len(res.TransferEncoding) == 0 && method != http.MethodHead &&
			res.StatusCode != http.StatusNoContent && res.StatusCode != http.StatusNotModified {
			return true
		}
		_, err = io.Copy(io.Discard, res.Body)
		return err != nil
	}
}

// relayAnswer is what a client got for the fuzzed request and for a second one after it.
type relayAnswer struct {
	First  string // status, sorted header lines but Date, body; or the error
	Kept   bool   // the client connection stayed open after the first answer
	Second string // the second request's answer; "" when the connection was closed
}

type relayRigT struct {
	up         *scriptedUpstream
	loops, std string // the proxies' addresses
}

// relayRig starts the scripted upstream and two servers forwarding to it: one with an event loop,
// one with net/http only. They live as long as the fuzz target.
func relayRig(f *testing.F) *relayRigT {
	up := newScriptedUpstream(f)
	rig := &relayRigT{up: up}
	for i, loops := range []int{1, 0} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			f.Fatal(err)
		}
		e := New(fixedLogic{addr: up.addr()}, Options{Log: logr.Discard(), MaxConnsPerEndpoint: 4})
		s := &Server{Name: fmt.Sprintf("relay%d", i), Listener: ln, Engine: e, FastHTTP1: true, EventLoops: loops, DrainTimeout: time.Second, Log: logr.Discard()}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Start(ctx) }()
		f.Cleanup(func() { cancel(); <-done })
		if loops > 0 {
			rig.loops = ln.Addr().String()
		} else {
			rig.std = ln.Addr().String()
		}
	}
	return rig
}

// exchange sends the fuzzed request and then a GET /second on one client connection to addr.
// sniffed, framed: the first answer's Content-Type, Content-Length are left out (see FuzzEventLoopRelay).
func (rig *relayRigT) exchange(t *testing.T, addr, method string, sniffed, framed bool) relayAnswer {
	t.Helper()
	rig.up.reset()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(4 * time.Second)) // two exchanges stay under the fuzzer's 10 s hang limit
	br := bufio.NewReader(c)
	var a relayAnswer
	fmt.Fprintf(c, "%s /first HTTP/1.1\r\nHost: app.example.com\r\n\r\n", method)
	a.First, a.Kept = readRelayAnswer(br, method, sniffed, framed)
	if !a.Kept {
		return a
	}
	fmt.Fprintf(c, "GET /second HTTP/1.1\r\nHost: app.example.com\r\n\r\n")
	a.Second, _ = readRelayAnswer(br, http.MethodGet, false, false)
	if a.Second != "200 [Content-Length: 6 Content-Type: text/plain] second" {
		t.Fatalf("the second request on the connection got %q, want the upstream's answer to it", a.Second)
	}
	return a
}

// readRelayAnswer reads one response as the client sees it and whether the connection stays open.
func readRelayAnswer(br *bufio.Reader, method string, sniffed, framed bool) (string, bool) {
	// A response cut off after its head (the loops pass on what came) and no response at all
	// (net/http's server drops what it buffered when the ReverseProxy aborts) are the same failure.
	res, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		return "no complete response", false
	}
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return "no complete response", false
	}
	var lines []string
	for k, vs := range res.Header {
		if k == "Date" || sniffed && k == "Content-Type" || framed && k == "Content-Length" {
			continue
		}
		for _, v := range vs {
			lines = append(lines, k+": "+v)
		}
	}
	sortStrings(lines)
	return fmt.Sprintf("%d %v %s", res.StatusCode, lines, body), !res.Close
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// scriptedUpstream answers the first request of a round (see reset) with the fuzzed bytes and
// every later one with "second".
type scriptedUpstream struct {
	ln    net.Listener
	mu    sync.Mutex
	in    []byte
	eof   bool
	first atomic.Bool // the fuzzed answer was sent this round
}

func newScriptedUpstream(f *testing.F) *scriptedUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	u := &scriptedUpstream{ln: ln}
	f.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *scriptedUpstream) addr() string { return u.ln.Addr().String() }

func (u *scriptedUpstream) set(in []byte, eof bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.in, u.eof = in, eof
}

func (u *scriptedUpstream) reset() { u.first.Store(false) }

func (u *scriptedUpstream) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.URL.Path == "/first" && u.first.CompareAndSwap(false, true) {
			u.mu.Lock()
			in, eof := u.in, u.eof
			u.mu.Unlock()
			if _, err := c.Write(in); err != nil || eof {
				return
			}
			continue
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\nsecond"); err != nil && !errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// fixedLogic routes every request to one address.
type fixedLogic struct{ addr string }

func (l fixedLogic) Route(string, string, Header) Exchange { return &fixedExchange{addr: l.addr} }
func (l fixedLogic) Unrouted(h http.Header) Reply          { return Reply{Code: http.StatusNotFound} }

// fixedExchange forwards to addr and answers failures with 502.
type fixedExchange struct{ addr string }

func (x *fixedExchange) Plan() Plan                      { return Plan{} }
func (x *fixedExchange) Ready() bool                     { return true }
func (x *fixedExchange) Begin()                          {}
func (x *fixedExchange) Wait(context.Context) error      { return nil }
func (x *fixedExchange) Forwarding()                     {}
func (x *fixedExchange) Pick(attempt int) (string, bool) { return x.addr, attempt == 0 }
func (x *fixedExchange) Refused(string, int, error) bool { return false }
func (x *fixedExchange) Forwarded(string)                {}
func (x *fixedExchange) Responded(int, http.Header)      {}
func (x *fixedExchange) End()                            {}
func (x *fixedExchange) Release()                        {}
func (x *fixedExchange) Fail(_ error, h http.Header) Reply {
	h.Set("Content-Type", "text/plain") // as the proxy's answers: net/http would sniff one
	h.Set("Content-Length", "4")
	return Reply{Code: http.StatusBadGateway, Body: "502\n"}
}
