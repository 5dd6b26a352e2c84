// Package coldstart makes a cold start as short as the app allows, and shows where its time went.
// While an interceptor holds requests for an app at zero, a Tracker follows the app's starting pods
// in the EndpointSlices, reads each pod once, runs the pod's own readiness probe against the pod's
// address every Interval, and serves the pod (endpoints.Prober.Answered) the moment it passes, rather
// than at the kubelet's next readiness probe. It records every cold start step by step (held, wake
// sent, pod created, scheduled, started, listed, answered, ready, forwarded), for metrics, the held
// requests' spans, and the admin port (from which the operator puts the latest into status).
package coldstart

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
)

// PodReader reads one pod by name. It is called once per starting pod of a cold start (and once more
// at its end when the pod had not started its containers yet), never to list pods.
type PodReader interface {
	Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
}

// PodsFrom reads pods through cs (RBAC: get on pods).
func PodsFrom(cs kubernetes.Interface) PodReader { return clientPods{cs} }

type clientPods struct{ cs kubernetes.Interface }

func (c clientPods) Pod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return c.cs.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Options configure a Tracker. Zero values take Defaults'.
type Options struct {
	// Endpoints is the proxy's endpoint source. When it is an endpoints.Prober (the EndpointSlice
	// cache), starting pods are probed and their steps recorded; otherwise only the interceptor's
	// own steps (held, wake sent, forwarded) are.
	Endpoints endpoints.Source
	// Pods reads starting pods; nil turns probing and the pods' steps off.
	Pods PodReader
	// Interval is the least time between two probes of one pod.
	Interval time.Duration
	// Timeout bounds one probe; a readiness probe's timeoutSeconds lowers it.
	Timeout time.Duration
	// MaxProbes bounds the probes in flight in the replica. Apps waiting for a slot get them in
	// turn, first come first served.
	MaxProbes int
	// PerApp bounds one app's probes in flight, and MaxEndpoints the starting endpoints of one app
	// that are read and probed (the first ones by address).
	PerApp       int
	MaxEndpoints int
	// Confirm is how long a pod that answered a probe is served while the kubelet has not found it
	// ready; after that it is withdrawn and requests wait for the kubelet again.
	Confirm time.Duration
	// Linger ends a cold start none of whose held requests was forwarded this long after the last
	// one went away.
	Linger time.Duration
	// History is how many finished cold starts the admin port keeps.
	History int
	// Name is this replica's pod name, for the records.
	Name string
	// AppLabel labels the step histograms with the app; false aggregates every app.
	AppLabel bool
	// DialContext replaces the probes' dialer (tests map pod IPs to loopback with it).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	Log logr.Logger
	// Registerer receives the metrics; nil means a private registry.
	Registerer prometheus.Registerer
}

// Defaults are the values of zero Options fields; the interceptor's flags take theirs from here.
var Defaults = Options{
	Interval:     50 * time.Millisecond,
	Timeout:      time.Second,
	MaxProbes:    128,
	PerApp:       2,
	MaxEndpoints: 8,
	Confirm:      30 * time.Second,
	Linger:       5 * time.Second,
	History:      512,
}

// podReadTimeout bounds one read of a pod.
const podReadTimeout = 5 * time.Second

// Tracker follows the cold starts of one interceptor replica. It is a controller-runtime Runnable
// (its probes stop when it does) and an admin.ColdStartSource. Its methods are safe for concurrent use.
type Tracker struct {
	opts    Options
	prober  endpoints.Prober
	client  *probeClient
	slots   chan struct{}
	metrics *metrics
	epoch   string
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex
	stopped bool
	active  map[string]*ColdStart
	history []admin.ColdStart // finished, oldest first
	seq     uint64
}

// New returns a Tracker.
func New(o Options) (*Tracker, error) {
	d := Defaults
	o.Interval = cmp.Or(o.Interval, d.Interval)
	o.Timeout = cmp.Or(o.Timeout, d.Timeout)
	o.MaxProbes = cmp.Or(o.MaxProbes, d.MaxProbes)
	o.PerApp = cmp.Or(o.PerApp, d.PerApp)
	o.MaxEndpoints = cmp.Or(o.MaxEndpoints, d.MaxEndpoints)
	o.Confirm = cmp.Or(o.Confirm, d.Confirm)
	o.Linger = cmp.Or(o.Linger, d.Linger)
	o.History = cmp.Or(o.History, d.History)
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	m, err := newMetrics(o.Registerer, o.AppLabel)
	if err != nil {
		return nil, err
	}
	var epoch [8]byte
	_, _ = rand.Read(epoch[:])
	t := &Tracker{
		opts:    o,
		client:  newProbeClient(o.DialContext),
		slots:   make(chan struct{}, o.MaxProbes),
		metrics: m,
		epoch:   hex.EncodeToString(epoch[:]),
		active:  map[string]*ColdStart{},
	}
	t.prober, _ = o.Endpoints.(endpoints.Prober)
	t.ctx, t.cancel = context.WithCancel(context.Background())
	m.slots = func() float64 { return float64(len(t.slots)) }
	return t, nil
}

// Start runs until ctx ends, then stops every probe and cold start (recording them as they stand).
func (t *Tracker) Start(ctx context.Context) error {
	<-ctx.Done()
	t.mu.Lock()
	t.stopped = true // no new run loop from now on
	var parked []*ColdStart
	for _, c := range t.active {
		c.mu.Lock()
		if c.unpark() {
			parked = append(parked, c)
		}
		c.mu.Unlock()
	}
	t.mu.Unlock()
	t.cancel()
	for _, c := range parked { // recorded as they stand, as the run loops record theirs
		c.finish(nil, nil)
		t.wg.Done() // the stopped timer's
	}
	t.wg.Wait()
	return nil
}

// NeedLeaderElection reports false: every replica probes for the requests it holds.
func (t *Tracker) NeedLeaderElection() bool { return false }

// App is what a cold start needs to know of the app.
type App struct {
	// Key is the HTTPScaledObject's "namespace/name".
	Key string
	// Target is the Service port the requests go to.
	Target endpoints.ServiceKey
	// Probe is the object's cold-start probe (routing.ColdStart.Probe); nil runs the pods'.
	Probe *routing.Probe
	// NoProbe, when set, says why the app's pods are not probed (the cold start is still recorded).
	NoProbe string
	// Hold is how long a request may be held (the readiness timeout); it bounds the cold start.
	Hold time.Duration
}

// Begin records a request of app held at at, and returns the app's cold start: the running one, or
// a new one that starts following the app's pods. End the hold with Forwarded or Released.
func (t *Tracker) Begin(app App, at time.Time) *ColdStart {
	return t.begin(app, at, true)
}

// Woken records a request of app that woke it without being held (a waiting page), at at, and
// returns the app's cold start; nil when the endpoint source cannot be followed (without held
// requests nothing would end the cold start).
func (t *Tracker) Woken(app App, at time.Time) *ColdStart {
	if t.prober == nil {
		return nil
	}
	return t.begin(app, at, false)
}

func (t *Tracker) begin(app App, at time.Time, held bool) *ColdStart {
	t.mu.Lock()
	c := t.active[app.Key]
	if c == nil {
		c = &ColdStart{t: t, app: app, kick: make(chan struct{}, 1), lastBegin: at,
			steps: []admin.ColdStartStep{{Name: admin.StepHeld, At: at}}}
		t.active[app.Key] = c
		if t.prober != nil && !t.stopped {
			c.followed = true
			c.running = true
			t.wg.Add(1)
			go c.follow()
		}
	}
	c.mu.Lock()
	if held {
		c.holders++
		c.everHeld = true
	}
	if c.followed && !c.running && !c.finished && !t.stopped {
		// Parked (see ColdStart.park): follow the app again for the request held now.
		if !c.unpark() {
			t.wg.Add(1) // the timer had fired; lingered leaves a running cold start alone
		}
		c.running = true
		go c.follow()
	}
	t.mu.Unlock()
	if at.After(c.lastBegin) {
		c.lastBegin = at
	}
	c.mu.Unlock()
	c.poke()
	return c
}

// follow runs the cold start's run loop; it holds a count in t.wg.
func (c *ColdStart) follow() {
	defer c.t.wg.Done()
	c.run(c.t.ctx)
}

// Active returns the running cold start of app, nil when none.
func (t *Tracker) Active(app string) *ColdStart {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active[app]
}

// ColdStartsSince implements admin.ColdStartSource.
func (t *Tracker) ColdStartsSince(since uint64, epoch string) admin.ColdStarts {
	t.mu.Lock()
	defer t.mu.Unlock()
	if epoch != t.epoch {
		since = 0
	}
	out := admin.ColdStarts{Epoch: t.epoch, Seq: t.seq, ColdStarts: []admin.ColdStart{}}
	for _, c := range t.history {
		if c.Seq > since {
			out.ColdStarts = append(out.ColdStarts, c)
		}
	}
	return out
}

// Seq returns the epoch and the sequence of the latest finished cold start, for admin.Status.
func (t *Tracker) Seq() (epoch string, seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch, t.seq
}

// record keeps a finished cold start. t.mu held.
func (t *Tracker) record(rec admin.ColdStart) {
	t.seq++
	rec.Seq = t.seq
	if len(t.history) == t.opts.History {
		copy(t.history, t.history[1:])
		t.history = t.history[:len(t.history)-1]
	}
	t.history = append(t.history, rec)
}
