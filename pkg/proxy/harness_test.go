package proxy_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/queue"
	"github.com/httpscale/httpscale/pkg/routing"
)

// harness runs a Proxy behind a real Server on loopback.
type harness struct {
	t       *testing.T
	src     *proxytest.Source
	reg     *queue.Registry
	prom    *prometheus.Registry
	perApp  proxy.PerApp
	proxy   *proxy.Proxy
	srv     *proxy.Server
	url     string
	table   atomic.Pointer[routing.Table]
	stop    context.CancelFunc
	stopped chan error
	client  *http.Client
	pool    *queue.Pool // Options.Pool, when the test set one
}

func newHarness(t *testing.T, entries []routing.Entry, mod func(*proxy.Options, *proxy.Server)) *harness {
	t.Helper()
	return newHarnessPerApp(t, proxy.PerAppCounters, entries, mod)
}

// newHarnessPerApp is newHarness with the given per-app metrics.
func newHarnessPerApp(t *testing.T, perApp proxy.PerApp, entries []routing.Entry, mod func(*proxy.Options, *proxy.Server)) *harness {
	t.Helper()
	h := &harness{t: t, src: proxytest.NewSource(), reg: queue.NewRegistry(nil), prom: prometheus.NewRegistry(), perApp: perApp}
	h.setTable(entries...)
	m, err := proxy.NewMetrics(h.prom, h.reg, h.perApp)
	if err != nil {
		t.Fatal(err)
	}
	opts := proxy.Options{
		Tables:    proxy.TableFunc(h.table.Load),
		Endpoints: h.src,
		Registry:  h.reg,
		Metrics:   m,
		Log:       testr.New(t),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.srv = &proxy.Server{Name: "proxy", Listener: ln, H2C: true, FastHTTP1: true, EventLoops: 2, DrainTimeout: 10 * time.Second, Log: testr.New(t)}
	if mod != nil {
		mod(&opts, h.srv)
	}
	if h.pool = opts.Pool; h.pool != nil {
		if err := proxy.RegisterPoolMetrics(h.prom, h.pool); err != nil {
			t.Fatal(err)
		}
	}
	h.proxy, err = proxy.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	h.srv.Handler, h.srv.Engine = h.proxy, h.proxy.Engine()
	h.srv.WaitIdle = h.proxy.WaitUpgrades
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
	})
	return h
}

func (h *harness) setTable(entries ...routing.Entry) {
	h.t.Helper()
	tb, err := routing.NewTable(entries)
	if err != nil {
		h.t.Fatal(err)
	}
	h.table.Store(tb)
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

// metric returns the value of the series name{labels}, or 0 when absent.
func (h *harness) metric(name string, labels map[string]string) float64 {
	h.t.Helper()
	mfs, err := h.prom.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
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

func (h *harness) count(key string) (inFlight, held int64, requests uint64) {
	for _, a := range h.reg.Snapshot() {
		if a.Key == key {
			return a.InFlight, a.Held, a.Requests
		}
	}
	return 0, 0, 0
}

// backend is a loopback HTTP server that says who it is.
func backend(t *testing.T, name string) (*httptest.Server, endpoints.Endpoint) {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", name)
		w.Header().Set("X-Seen-Host", r.Host)
		w.Header().Set("X-Seen-Forwarded-For", r.Header.Get("X-Forwarded-For"))
		w.Header().Set("X-Seen-Forwarded-Host", r.Header.Get("X-Forwarded-Host"))
		w.Header().Set("X-Seen-Forwarded-Proto", r.Header.Get("X-Forwarded-Proto"))
		_, _ = io.WriteString(w, name+" "+r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return s, endpointOf(t, s.URL, "")
}

func endpointOf(t *testing.T, rawURL, zone string) endpoints.Endpoint {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(u.Host)
	n, _ := strconv.Atoi(port)
	return endpoints.Endpoint{IP: host, Port: int32(n), Zone: zone}
}

func entry(name, host, svc string) routing.Entry {
	return routing.Entry{Namespace: "ns", Name: name, Hosts: []string{host}, Service: svc, Port: 80}
}

func key(svc string) endpoints.ServiceKey { return endpoints.ServiceKey{Namespace: "ns", Service: svc} }

func backendFunc(t *testing.T, f http.HandlerFunc) (*httptest.Server, endpoints.Endpoint) {
	t.Helper()
	s := httptest.NewServer(f)
	t.Cleanup(s.Close)
	return s, endpointOf(t, s.URL, "")
}

// onBothPaths runs f as subtests with a harness routing app.example.com to the app "ns/app"
// (Service app), served by the event loops (fast=true) and by net/http alone (fast=false).
func onBothPaths(t *testing.T, f func(t *testing.T, h *harness, fast bool)) {
	onBothPathsWith(t, nil, f)
}

// onBothPathsWith is onBothPaths with the options and the server changed by mod (when set).
func onBothPathsWith(t *testing.T, mod func(*proxy.Options, *proxy.Server), f func(t *testing.T, h *harness, fast bool)) {
	for _, fast := range []bool{true, false} {
		t.Run(fmt.Sprintf("fast=%v", fast), func(t *testing.T) {
			h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, func(o *proxy.Options, s *proxy.Server) {
				s.FastHTTP1 = fast
				if mod != nil {
					mod(o, s)
				}
			})
			f(t, h, fast)
		})
	}
}
