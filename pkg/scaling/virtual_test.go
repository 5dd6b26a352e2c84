package scaling

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-logr/logr"
	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"
	"google.golang.org/grpc"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/scaling/scalingtest"
)

// The scaler's default flags, which the tests in virtual time run with.
const (
	vInterval = 200 * time.Millisecond
	vTimeout  = time.Second
	vGrace    = 15 * time.Second
)

// vharness runs a Collector against fake interceptor replicas (real pkg/admin handlers, reached in
// memory) and answers through the Service KEDA's gRPC calls reach, all inside a testing/synctest
// bubble: time is virtual, so a poll, a wake notice or a grace period takes what the scaler and the
// replicas make it take, never what a loaded machine adds. The gRPC transport itself is the subject
// of the tests on the real-socket harness (startHarness).
//
// startVirtual must be called inside synctest.Test.
type vharness struct {
	t     *testing.T
	net   *memNet
	ics   []*scalingtest.Interceptor
	reps  atomic.Pointer[[]Replica]
	state *State
	svc   *Service
}

type virtualOptions struct {
	replicas int
	// wakeRate and wakeBurst: see CollectorOptions.
	wakeRate  float64
	wakeBurst int
	// log, when set, receives the collector's and service's logs instead of the test log.
	log logr.Logger
	// before runs after the replicas were made and before the collector's first poll.
	before func(ics []*scalingtest.Interceptor)
}

func startVirtual(t *testing.T, o virtualOptions) *vharness {
	t.Helper()
	h := &vharness{t: t, net: &memNet{}, state: NewState(30 * time.Second)}
	var reps []Replica
	for i := range o.replicas {
		ic := scalingtest.New(scalingtest.Options{})
		t.Cleanup(ic.Close)
		h.ics = append(h.ics, ic)
		key := string(rune('a' + i))
		reps = append(reps, Replica{Key: key, URL: h.net.serve(key, ic.Handler())})
	}
	h.reps.Store(&reps)
	if o.before != nil {
		o.before(h.ics)
	}
	log := o.log
	if log.GetSink() == nil {
		log = testLog(t)
	}
	client := admin.Client{HTTP: &http.Client{Transport: h.net}}
	collector := NewCollector(CollectorOptions{
		Discovery:  DiscoverFunc(func(context.Context) ([]Replica, error) { return *h.reps.Load(), nil }),
		Counts:     client,
		Wake:       client,
		Interval:   vInterval,
		Timeout:    vTimeout,
		StaleGrace: vGrace,
		WakeRate:   o.wakeRate,
		WakeBurst:  o.wakeBurst,
		Log:        log.WithName("collector"),
	}, h.state)
	stop := make(chan struct{})
	h.svc = NewService(h.state, nil, log.WithName("service"), stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- collector.Start(ctx) }()
	t.Cleanup(func() {
		close(stop)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("collector returned %v on shutdown", err)
		}
	})
	<-h.state.Ready() // the first cycle, at once in virtual time
	return h
}

// addReplica serves handle as /counts of a new replica named key (every other path is 404, the wake
// stream too) and adds it to the discovered set.
func (h *vharness) addReplica(key string, handle http.HandlerFunc) {
	url := h.net.serve(key, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != admin.PathCounts {
			http.NotFound(w, r)
			return
		}
		handle(w, r)
	}))
	h.addURL(key, url)
}

// addURL adds a replica served by h.net to the discovered set.
func (h *vharness) addURL(key, url string) {
	reps := append(append([]Replica(nil), *h.reps.Load()...), Replica{Key: key, URL: url})
	h.reps.Store(&reps)
}

func (h *vharness) metric(md map[string]string, name string) float64 {
	h.t.Helper()
	resp, err := h.svc.GetMetrics(context.Background(), &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: name})
	if err != nil {
		h.t.Fatalf("GetMetrics %s: %v", name, err)
	}
	return resp.MetricValues[0].MetricValueFloat
}

func (h *vharness) isActive(md map[string]string) bool {
	h.t.Helper()
	resp, err := h.svc.IsActive(context.Background(), ref(md))
	if err != nil {
		h.t.Fatalf("IsActive: %v", err)
	}
	return resp.Result
}

// after lets d of virtual time pass and returns once every goroutine of the bubble is blocked again.
func after(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// activityStream is the server side of one StreamIsActive call, as the gRPC server hands it to the
// Service: what the Service sends is what KEDA would receive, in order.
type activityStream struct {
	grpc.ServerStream // not used by the Service
	ctx               context.Context
	msgs              chan bool
}

func (s *activityStream) Context() context.Context { return s.ctx }

func (s *activityStream) Send(r *externalscaler.IsActiveResponse) error {
	select {
	case s.msgs <- r.GetResult():
		return nil
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
}

// streamIsActive opens a StreamIsActive call for md that ends with the test.
func (h *vharness) streamIsActive(md map[string]string) *activityStream {
	ctx, cancel := context.WithCancel(context.Background())
	s := &activityStream{ctx: ctx, msgs: make(chan bool, 64)}
	done := make(chan error, 1)
	go func() { done <- h.svc.StreamIsActive(ref(md), s) }()
	h.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			h.t.Errorf("StreamIsActive returned %v", err)
		}
	})
	return s
}

// recvWithin returns the stream's next message and the virtual time it took to come, failing the
// test if none comes within d.
func (s *activityStream) recvWithin(t *testing.T, d time.Duration) (bool, time.Duration) {
	t.Helper()
	start := time.Now()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case v := <-s.msgs:
		return v, time.Since(start)
	case <-timer.C:
		t.Fatalf("no StreamIsActive message within %s", d)
		return false, 0
	}
}

// expectEnd expects the end of activity within d: true (KEDA starts its cooldown from the last
// "active" it hears, and ignores "inactive"), then false at the same moment. It returns the time
// the first came after.
func (s *activityStream) expectEnd(t *testing.T, d time.Duration, what string) time.Duration {
	t.Helper()
	v, took := s.recvWithin(t, d)
	if !v {
		t.Fatalf("%s: first message at the end of activity is false, want true (KEDA's last active)", what)
	}
	select {
	case v := <-s.msgs:
		if v {
			t.Fatalf("%s: second message at the end of activity is true, want false", what)
		}
	default:
		synctest.Wait()
		select {
		case v := <-s.msgs:
			if v {
				t.Fatalf("%s: second message at the end of activity is true, want false", what)
			}
		default:
			t.Fatalf("%s: no false right after the last true", what)
		}
	}
	return took
}

// memNet serves requests for http://<key> with the handler registered for key, in memory: no
// socket, so that the Collector and the replicas can share a synctest bubble. A response streams
// through a pipe from the moment its header is written (the wake stream), the handler's request
// context ends when the client's does or the client closes the body, and a handler that never
// writes keeps the client waiting until its context ends (a hung replica).
type memNet struct {
	mu       sync.Mutex
	handlers map[string]http.Handler
}

// serve registers h as key and returns its base URL.
func (n *memNet) serve(key string, h http.Handler) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.handlers == nil {
		n.handlers = map[string]http.Handler{}
	}
	n.handlers[key] = h
	return "http://" + key
}

func (n *memNet) RoundTrip(req *http.Request) (*http.Response, error) {
	n.mu.Lock()
	h := n.handlers[req.URL.Host]
	n.mu.Unlock()
	if h == nil {
		return nil, fmt.Errorf("dial %s: connection refused", req.URL.Host)
	}
	ctx, cancel := context.WithCancel(req.Context())
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, body: pw, sent: make(chan struct{})}
	go func() {
		defer cancel()
		h.ServeHTTP(w, req.WithContext(ctx))
		w.WriteHeader(http.StatusOK) // for a handler that wrote nothing
		if err := ctx.Err(); err != nil {
			pw.CloseWithError(err)
		} else {
			pw.Close()
		}
	}()
	select {
	case <-w.sent:
	case <-req.Context().Done():
	}
	if err := req.Context().Err(); err != nil {
		cancel()
		pr.CloseWithError(err)
		return nil, err
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)), StatusCode: w.code,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sentHeader, Body: memBody{pr, cancel}, ContentLength: -1, Request: req,
	}, nil
}

// pipeResponse is the handler's side of a memNet response. It is used by the handler's goroutine
// only; the header it sent is read after sent is closed.
type pipeResponse struct {
	header     http.Header
	body       *io.PipeWriter
	once       sync.Once
	sent       chan struct{}
	code       int
	sentHeader http.Header
}

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	w.once.Do(func() {
		w.code, w.sentHeader = code, w.header.Clone()
		close(w.sent)
	})
}

func (w *pipeResponse) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush has nothing to do: every Write waits until the client has read it.
func (w *pipeResponse) Flush() {}

// memBody is a memNet response body; closing it ends the handler's request context, as closing a
// connection would.
type memBody struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b memBody) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}
