package engine

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
)

// harness runs an Engine for a fakeLogic behind a real Server on loopback: the event loops (two by
// default) with net/http for what they leave to it, or net/http alone (FastHTTP1 off). When the
// test ends it drains the server and fails the test if the engine called an exchange out of the
// contract's order.
type harness struct {
	t       *testing.T
	src     *fakeLogic
	eng     *Engine
	srv     *Server
	url     string
	stop    context.CancelFunc
	stopped chan error
	client  *http.Client

	leftover, unsolicited fakeCounter
}

func newHarness(t *testing.T, routes []route, mod func(*Options, *Server)) *harness {
	t.Helper()
	h := &harness{t: t, src: newFakeLogic(routes...)}
	opts := Options{Log: testr.New(t), DialTimeout: 2 * time.Second, MaxConnsPerEndpoint: 512,
		Discarded: DiscardCounters{Leftover: &h.leftover, Unsolicited: &h.unsolicited}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.srv = &Server{Name: "proxy", Listener: ln, H2C: true, FastHTTP1: true, EventLoops: 2, DrainTimeout: 10 * time.Second, Log: testr.New(t)}
	if mod != nil {
		mod(&opts, h.srv)
	}
	h.eng = New(h.src, opts)
	h.srv.Engine = h.eng
	h.srv.WaitIdle = h.eng.WaitUpgrades
	h.url = "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	h.stopped = make(chan error, 1)
	go func() { h.stopped <- h.srv.Start(ctx) }()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	h.client = &http.Client{Transport: tr, Timeout: 30 * time.Second}
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.stopped:
		case <-time.After(20 * time.Second):
			t.Error("proxy server did not stop")
		}
		tr.CloseIdleConnections()
		h.src.mu.Lock()
		defer h.src.mu.Unlock()
		for _, v := range h.src.violations {
			t.Errorf("Exchange contract: %s", v)
		}
	})
	return h
}

// get sends GET path with the given Host and returns status, body and headers.
func (h *harness) get(ctx context.Context, host, path string) (int, string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.url+path, nil)
	if err != nil {
		return 0, "", nil, err
	}
	req.Host = host
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

func (h *harness) mustGet(host, path string) (int, string, http.Header) {
	h.t.Helper()
	code, body, hdr, err := h.get(context.Background(), host, path)
	if err != nil {
		h.t.Fatalf("GET %s%s: %v", host, path, err)
	}
	return code, body, hdr
}

// dial opens a raw TCP connection to the proxy, closed when the test ends, with a deadline of
// timeout from now unless timeout is 0.
func (h *harness) dial(t *testing.T, timeout time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if timeout > 0 {
		_ = c.SetDeadline(time.Now().Add(timeout))
	}
	return c
}

func (h *harness) count(app string) (inFlight, held int64, requests uint64) { return h.src.count(app) }

// metric is what the interceptor's metric name{labels} would show for what the engine told the
// fake logic and its discard counters.
func (h *harness) metric(name string, labels map[string]string) float64 {
	h.t.Helper()
	switch name {
	case discardedMetric:
		switch labels["reason"] {
		case "leftover":
			return float64(h.leftover.n.Load())
		case "unsolicited":
			return float64(h.unsolicited.n.Load())
		}
	case "httpscale_interceptor_responses_total":
		return float64(h.src.codes(labels["app"], labels["code"]))
	case "httpscale_interceptor_upstream_errors_total":
		if app := labels["app"]; app != "" {
			return float64(h.src.fails(app))
		}
		h.src.mu.Lock()
		defer h.src.mu.Unlock()
		n := 0
		for _, a := range h.src.apps {
			n += a.fails
		}
		return float64(n)
	}
	h.t.Fatalf("no metric %s%v in the engine's tests", name, labels)
	return 0
}

const discardedMetric = "httpscale_interceptor_upstream_conns_discarded_total"

// endpointOf returns the address of a server URL.
func endpointOf(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func backendFunc(t *testing.T, f http.HandlerFunc) (*httptest.Server, string) {
	t.Helper()
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s, endpointOf(t, s.URL)
}
