package engine

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestUpstreamConnectionsAreReusedAndStaleOnesReplaced(t *testing.T) {
	var conns atomic.Int32
	big := strings.Repeat("x", 1<<20)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			_, _ = w.Write([]byte(big))
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, nil)
	h.src.Set(key("app"), endpointOf(t, s.URL))

	for i := range 20 {
		if code, body, _ := h.mustGet("app.example.com", "/"); code != 200 || body != "ok" {
			t.Fatalf("request %d: %d %q", i, code, body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("20 sequential requests opened %d upstream connections, want 1", n)
	}
	if _, body, _ := h.mustGet("app.example.com", "/big"); body != big {
		t.Errorf("1 MiB body arrived with %d bytes", len(body))
	}

	// The upstream closes its idle connections: the next request must not fail.
	s.CloseClientConnections()
	for i := range 3 {
		if code, body, _ := h.mustGet("app.example.com", "/"); code != 200 || body != "ok" {
			t.Fatalf("request %d after the upstream closed idle connections: %d %q", i, code, body)
		}
	}
	if v := h.metric("httpscale_interceptor_upstream_errors_total", nil); v != 0 {
		t.Errorf("upstream errors = %v, want 0", v)
	}
}

func TestPostBodiesStreamThrough(t *testing.T) {
	_, ep := backendFunc(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Len", strconv.FormatInt(n, 10))
	})
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, nil)
	h.src.Set(key("app"), ep)
	req, _ := http.NewRequest(http.MethodPost, h.url+"/", strings.NewReader(strings.Repeat("y", 3<<20)))
	req.Host = "app.example.com"
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("X-Len") != strconv.Itoa(3<<20) {
		t.Errorf("POST of 3 MiB: %d, upstream read %s bytes", resp.StatusCode, resp.Header.Get("X-Len"))
	}
}

func TestReleasedBurstUsesBoundedConnections(t *testing.T) {
	var conns, active, peak atomic.Int32
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		_, _ = w.Write([]byte("ok"))
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	h := newHarness(t, []route{entry("app", "app.example.com", "app")}, func(o *Options, _ *Server) {
		o.MaxConnsPerEndpoint = 2
	})
	const n = 30
	codes := make(chan int, n)
	for range n {
		go func() {
			code, _, _, err := h.get(context.Background(), "app.example.com", "/")
			if err != nil {
				code = 0
			}
			codes <- code
		}()
	}
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(ctx, key("app"), n); err != nil {
		t.Fatal(err)
	}
	h.src.Set(key("app"), endpointOf(t, s.URL))
	for range n {
		if c := <-codes; c != http.StatusOK {
			t.Fatalf("released request answered %d, want 200", c)
		}
	}
	if c, p := conns.Load(), peak.Load(); c > 2 || p > 2 {
		t.Errorf("burst of %d opened %d connections with %d requests at once, want at most 2", n, c, p)
	}
}
