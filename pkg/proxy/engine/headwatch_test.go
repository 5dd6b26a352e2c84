package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
)

// FuzzHeadWatch: the head watch must frame a connection's byte stream exactly as net/http's server
// does, or a request with both Content-Length and Transfer-Encoding could hide where the watch does
// not look (inside what it takes for a body) and keep the connection open. The reference is
// net/http's own loop: http.ReadRequest, the body read to its end, and the server's tolerance of
// up to 4 CR or LF after a POST. Every request the reference reads, the watch must have framed as a
// head, in order, with the same request line; it may go on after the reference stopped (net/http
// closes the connection there).
func FuzzHeadWatch(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nhi\r\n\r\nPOST /b HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nxGET /c HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /a HTTP/1.1\nHost: a\nContent-Length: 3\n\nabcGET /b HTTP/1.1\nHost: a\n\n",
		"POST /a HTTP/1.0\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var want []string
		br := bufio.NewReader(bytes.NewReader(in))
		last := ""
		for {
			if last == http.MethodPost {
				peek, _ := br.Peek(4)
				n := 0
				for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
					n++
				}
				_, _ = br.Discard(n)
			}
			req, err := http.ReadRequest(br)
			if err != nil {
				break
			}
			want = append(want, req.Method+" "+req.RequestURI+" "+req.Proto)
			last = req.Method
			if _, err := io.Copy(io.Discard, req.Body); err != nil || req.ProtoMajor != 1 {
				break
			}
		}

		// As a connection delivers it: in pieces of 7 bytes, and in pieces cut after every empty
		// line (one read per head: the watch frames a whole head without a body where it arrives).
		for _, pieces := range [][][]byte{sevens(in), afterEmptyLines(in)} {
			var mu sync.Mutex
			var got []string
			w := startHeadWatch(func(head []byte) {
				line, _, _ := bytes.Cut(head, []byte("\n"))
				mu.Lock()
				got = append(got, string(bytes.TrimSuffix(line, []byte("\r"))))
				mu.Unlock()
			})
			for _, p := range pieces {
				w.feed(p)
			}
			w.sawBoth() // waits until the watch parsed everything it was given
			w.stop()
			mu.Lock()
			if len(got) < len(want) {
				t.Fatalf("for %q net/http reads the requests %q; the watch frames only %q", in, want, got)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("for %q net/http reads the requests %q; the watch frames %q", in, want, got)
				}
			}
			mu.Unlock()
		}
	})
}

// sevens cuts b in pieces of 7 bytes.
func sevens(b []byte) [][]byte {
	var out [][]byte
	for len(b) > 0 {
		n := min(len(b), 7)
		out = append(out, b[:n])
		b = b[n:]
	}
	return out
}

// afterEmptyLines cuts b after every empty line ("\n\n" or "\n\r\n").
func afterEmptyLines(b []byte) [][]byte {
	var out [][]byte
	start := 0
	for i := 0; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			out, start = append(out, b[start:i+2]), i+2
			i++
		} else if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			out, start = append(out, b[start:i+3]), i+3
			i += 2
		}
	}
	if start < len(b) {
		out = append(out, b[start:])
	}
	return out
}

// Between requests the watch's parser ends once it has parsed what it was given (an idle keep-alive
// connection holds no goroutine or buffer for it), and starts again with the next bytes.
func TestHeadWatchParksBetweenRequests(t *testing.T) {
	w := newHeadWatch()
	running := func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.running
	}
	for i, req := range []string{
		"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
		"GET /b HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
	} {
		w.feed([]byte(req))
		if w.sawBoth() {
			t.Fatalf("request %d: both lengths reported for %q", i, req)
		}
		for deadline := time.Now().Add(5 * time.Second); running(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("request %d: the parser still runs after a whole request", i)
			}
		}
	}
	w.feed([]byte("POST /d HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"))
	if !w.sawBoth() {
		t.Error("a head with both lengths after parked runs was not seen")
	}
	w.stop()
}

// A large head costs the watch what its framing lines cost, not a copy of the head: 3,000
// connections sending 100 KiB heads at once had the watch allocate 1.2 GB for its copies of them,
// a third of what the interceptor allocated, and kept the collector running back to back while
// the event loops waited on it (docs/benchmarks.md#held-requests-under-a-flood). The head is fed
// as net/http reads it, 4 KiB at a time, each piece parsed before the next (so the pending copy
// stays one piece); the watch must still see the request line and the framing.
func TestHeadWatchDoesNotCopyLargeHeads(t *testing.T) {
	var head bytes.Buffer
	head.WriteString("POST /flood HTTP/1.1\r\nHost: a\r\n")
	for i := range 12 {
		fmt.Fprintf(&head, "X-Pad-%d: %s\r\n", i, bytes.Repeat([]byte("a"), 8<<10))
	}
	head.WriteString("Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	in := head.Bytes()
	var seen []string
	w := startHeadWatch(func(h []byte) {
		line, _, _ := bytes.Cut(h, []byte("\r\n"))
		seen = append(seen, string(line))
	})
	defer w.stop()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for p := range slices.Chunk(in, 4<<10) {
		w.feed(p)
		w.sawBoth() // parsed before the next piece
	}
	both := w.sawBoth()
	runtime.ReadMemStats(&after)
	if !both || len(seen) != 1 || seen[0] != "POST /flood HTTP/1.1" {
		t.Fatalf("the watch saw heads %q, both lengths %v; want the one POST with both", seen, both)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 32<<10 {
		t.Errorf("watching a %d-byte head allocated %d bytes; want at most 32 KiB (no copy of the head)", len(in), got)
	}
}
