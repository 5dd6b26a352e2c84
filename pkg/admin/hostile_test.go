package admin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// rawReplica is a misbehaving replica on a loopback listener: it reads each request's header block
// and then hands the connection to serve, which writes whatever bytes the test wants.
type rawReplica struct {
	lis   net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex
	conns []net.Conn
}

func startRaw(t *testing.T, serve func(conn net.Conn)) *rawReplica {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &rawReplica{lis: lis}
	r.wg.Go(func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, conn)
			r.mu.Unlock()
			r.wg.Go(func() {
				defer conn.Close()
				if _, err := http.ReadRequest(bufio.NewReader(conn)); err != nil {
					return
				}
				serve(conn)
			})
		}
	})
	t.Cleanup(func() {
		lis.Close()
		r.mu.Lock()
		for _, c := range r.conns {
			c.Close()
		}
		r.mu.Unlock()
		r.wg.Wait()
	})
	return r
}

func (r *rawReplica) url() string { return "http://" + r.lis.Addr().String() }

// reply writes a complete HTTP/1.1 response with the given status, content type and body.
func reply(status int, contentType, body string) func(net.Conn) {
	return func(conn net.Conn) {
		fmt.Fprintf(conn, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			status, http.StatusText(status), contentType, len(body), body)
	}
}

func TestClientBoundsAnEndlessCountsBody(t *testing.T) {
	var written int64
	done := make(chan struct{})
	rep := startRaw(t, func(conn net.Conn) {
		defer close(done)
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
		io.WriteString(conn, `{"epoch":"e","seq":1,"full":true,"apps":[`)
		chunk := []byte(strings.Repeat(`{"k":"ns/app","i":1},`, 1000))
		for {
			n, err := conn.Write(chunk)
			written += int64(n)
			if err != nil {
				return // the client hung up
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A 1 MiB bound rather than the default 32 MiB: the test is of the bound, and decoding 32 MiB of
	// JSON under -race took longer than the deadline on a loaded 2-core machine.
	_, err := Client{MaxBody: 1 << 20}.Counts(ctx, rep.url(), 0, "")
	if !errors.Is(err, ErrBodyTooLarge) {
		t.Fatalf("Counts from an endless body: %v, want ErrBodyTooLarge", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the client kept the endless body's connection open")
	}
	// What the server managed to write is the limit plus what the sockets buffer, not more.
	if limit := int64(1<<20) + 16<<20; written > limit {
		t.Errorf("replica wrote %d bytes before the client hung up, want at most %d", written, limit)
	}
}

func TestClientGivesUpOnAReplicaThatStalls(t *testing.T) {
	// Each serve returns once the client hung up (gone closes), so that cleanup does not wait.
	for name, serve := range map[string]func(conn net.Conn, gone <-chan struct{}){
		"never answers": func(_ net.Conn, gone <-chan struct{}) { <-gone },
		"stalls after the headers": func(conn net.Conn, gone <-chan struct{}) {
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
			<-gone
		},
		"trickles the body": func(conn net.Conn, gone <-chan struct{}) {
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
			for {
				select {
				case <-gone:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if _, err := io.WriteString(conn, " "); err != nil {
					return
				}
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			rep := startRaw(t, func(conn net.Conn) {
				gone := make(chan struct{})
				go func() { io.Copy(io.Discard, conn); close(gone) }()
				serve(conn, gone)
			})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			start := time.Now()
			_, err := Client{}.Counts(ctx, rep.url(), 0, "")
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Counts: %v, want the context's deadline", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("Counts returned after %s, want about the 300ms deadline", d)
			}
		})
	}
}

func TestClientRejectsMalformedAndAbsurdCounts(t *testing.T) {
	for _, tc := range []struct {
		name, contentType, body, want string
		status                        int
	}{
		{name: "HTML error page with 200", contentType: "text/html", body: "<html><body>502 Bad Gateway</body></html>", want: `Content-Type "text/html"`},
		{name: "truncated JSON", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a`, want: "unexpected EOF"},
		{name: "not JSON numbers", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a","i":NaN}]}`, want: "invalid character"},
		{name: "fractional count", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a","i":1e18}]}`, want: "cannot unmarshal"},
		{name: "count beyond int64", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a","i":99999999999999999999}]}`, want: "cannot unmarshal"},
		{name: "negative in flight", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a","i":-1000000}]}`, want: "app ns/a: in flight -1000000"},
		{name: "negative held", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a","h":-1}]}`, want: "held -1"},
		{name: "absurd in flight", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a","i":1000000000000000000}]}`, want: "in flight 1000000000000000000"},
		{name: "absurd requests", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a","r":18446744073709551615}]}`, want: "requests 18446744073709551615"},
		{name: "empty app key", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"","i":1}]}`, want: "malformed app key"},
		{name: "app key without namespace", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"app","i":1}]}`, want: "malformed app key"},
		{name: "app key longer than Kubernetes allows", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/` + strings.Repeat("x", 400) + `","i":1}]}`, want: "403 bytes, more than 317"},
		{name: "app listed twice", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/a","r":10},{"k":"ns/a","r":10}]}`, want: "listed after ns/a"},
		{name: "apps out of order", body: `{"epoch":"e","seq":1,"full":true,"apps":[{"k":"ns/b"},{"k":"ns/a"}]}`, want: "app ns/a listed after ns/b"},
		{name: "no epoch", body: `{"seq":1,"full":true,"apps":[]}`, want: "no epoch"},
		{name: "delta for another epoch", body: `{"epoch":"other","seq":9,"apps":[{"k":"ns/a","i":1}]}`, want: "delta answer"},
		{name: "error status", status: http.StatusInternalServerError, contentType: "text/plain", body: "boom", want: "status 500: boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.status == 0 {
				tc.status = http.StatusOK
			}
			if tc.contentType == "" {
				tc.contentType = "application/json"
			}
			rep := startRaw(t, reply(tc.status, tc.contentType, tc.body))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := Client{}.Counts(ctx, rep.url(), 3, "mine")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Counts = %+v, %v; want an error containing %q", got, err, tc.want)
			}
			if !strings.Contains(err.Error(), rep.url()) {
				t.Errorf("error %q does not name the replica %s", err, rep.url())
			}
		})
	}
}

func TestClientBoundsAnEndlessStatusBody(t *testing.T) {
	rep := startRaw(t, func(conn net.Conn) {
		io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
		io.WriteString(conn, `{"tableVersion":"`)
		chunk := []byte(strings.Repeat("v", 64<<10))
		for {
			if _, err := conn.Write(chunk); err != nil {
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := (Client{MaxBody: 1 << 20}).Status(ctx, rep.url()); !errors.Is(err, ErrBodyTooLarge) { // 1 MiB: see above
		t.Fatalf("Status from an endless version string: %v, want ErrBodyTooLarge", err)
	}
}

// countingWake counts open subscriptions; with flood set, it feeds each one events as fast as the
// stream takes them until the subscription is cancelled.
type countingWake struct {
	open  atomic.Int64
	flood bool
}

func (c *countingWake) Subscribe(buffer int) (<-chan WakeEvent, func()) {
	c.open.Add(1)
	ch := make(chan WakeEvent, buffer)
	done := make(chan struct{})
	if c.flood {
		go func() {
			key := "ns/" + strings.Repeat("x", 250)
			for {
				select {
				case ch <- WakeEvent{Key: key}:
				case <-done:
					return
				}
			}
		}()
	}
	var once sync.Once
	return ch, func() { once.Do(func() { close(done); c.open.Add(-1) }) }
}

// openWake opens a wake stream on a raw connection, reads the response head and returns the
// status and the connection, which the caller never reads again.
func openWake(t *testing.T, addr string) (int, http.Header, net.Conn) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: admin\r\n\r\n", PathWake)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Time{})
	return resp.StatusCode, resp.Header, conn
}

func TestWakeStreamsAreBoundedAgainstIdleSubscribers(t *testing.T) {
	src := &countingWake{}
	srv := httptest.NewServer(NewHandler(HandlerOptions{Wake: src, MaxWakeStreams: 3, WakeHeartbeat: time.Second}))
	defer func() { srv.CloseClientConnections(); srv.Close() }()
	addr := srv.Listener.Addr().String()

	var conns []net.Conn
	for range 3 {
		code, _, conn := openWake(t, addr)
		if code != http.StatusOK {
			t.Fatalf("stream within the limit: status %d", code)
		}
		conns = append(conns, conn)
	}
	for range 5 {
		code, hdr, _ := openWake(t, addr)
		if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" {
			t.Fatalf("stream beyond the limit: status %d, Retry-After %q; want 503 with Retry-After", code, hdr.Get("Retry-After"))
		}
	}
	if n := src.open.Load(); n != 3 {
		t.Errorf("%d subscriptions open, want 3: a refused stream must not subscribe", n)
	}
	// A subscriber that goes away frees its slot.
	conns[0].Close()
	testenv.Eventually(t, 10*time.Second, "slot freed", func() bool { return src.open.Load() == 2 })
	if code, _, _ := openWake(t, addr); code != http.StatusOK {
		t.Fatalf("stream after one closed: status %d, want 200", code)
	}
}

func TestWakeStreamCutsOffAReaderThatStopsReading(t *testing.T) {
	src := &countingWake{flood: true}
	srv := httptest.NewServer(NewHandler(HandlerOptions{Wake: src, WakeHeartbeat: 200 * time.Millisecond}))
	defer func() { srv.CloseClientConnections(); srv.Close() }()
	code, _, _ := openWake(t, srv.Listener.Addr().String())
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	testenv.Eventually(t, 10*time.Second, "subscribed", func() bool { return src.open.Load() == 1 })
	// The client never reads: once the socket buffers are full, a write misses its deadline and the
	// handler ends the stream and its subscription although the connection is still open.
	start := time.Now()
	testenv.Eventually(t, 10*time.Second, "stalled stream ended", func() bool { return src.open.Load() == 0 })
	t.Logf("stream to a reader that stopped reading ended after %s", time.Since(start))
}

func TestWakeClientCapsTheAnnouncedHeartbeat(t *testing.T) {
	// The replica announces a heartbeat of a thousand hours, then falls silent with the connection
	// open: the client must not believe it.
	rep := startRaw(t, func(conn net.Conn) {
		fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n%s: 1000h\r\nTransfer-Encoding: chunked\r\n\r\n", HeaderWakeHeartbeat)
		io.WriteString(conn, "3\r\n{}\n\r\n")
		io.Copy(io.Discard, conn) // until the client hangs up
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := Client{MaxWakeHeartbeat: 100 * time.Millisecond}.Wake(ctx, rep.url(), func(WakeEvent) {})
	if !errors.Is(err, ErrHeartbeatMissed) {
		t.Fatalf("Wake = %v, want ErrHeartbeatMissed", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("silent stream detected after %s, want about 3 capped heartbeats (300ms)", d)
	}
}

func TestWakeClientSurvivesHostileLines(t *testing.T) {
	for name, tc := range map[string]struct {
		body string
		want string
	}{
		"garbage line":   {"{}\nnot json\n", "decoding wake event"},
		"line too long":  {`{"key":"ns/` + strings.Repeat("x", maxWakeLine) + "\"}\n", "token too long"},
		"HTML with 200":  {"<html><body>oops</body></html>\n", "decoding wake event"},
		"ended mid-line": {`{"key":"ns/a`, "decoding wake event"},
	} {
		t.Run(name, func(t *testing.T) {
			rep := startRaw(t, reply(http.StatusOK, "application/x-ndjson", tc.body))
			var got []WakeEvent
			err := Client{}.Wake(context.Background(), rep.url(), func(ev WakeEvent) { got = append(got, ev) })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Wake = %v, want an error containing %q", err, tc.want)
			}
			if len(got) != 0 {
				t.Errorf("events from a hostile stream reached the caller: %+v", got)
			}
		})
	}
}
