package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/operator/controller"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

const (
	installNS   = "httpscale-system"
	tableName   = routing.DefaultBaseName
	scalerAddr  = "httpscale-scaler.httpscale-system.svc.cluster.local:9090"
	adminSvc    = "httpscale-interceptor-admin"
	serviceName = "kubernetes.io/service-name"
	adminPort   = 9090
)

var (
	env     *envtest.Environment
	restCfg *rest.Config
	k8s     client.Client
	scheme  = runtime.NewScheme()
	// dialer maps EndpointSlice addresses (which may not be loopback) to fake interceptors on loopback.
	dialer = &addrMap{m: map[string]string{}}
	// op is the operator the suite runs against.
	op *operator
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Operator controller (real kube-apiserver)")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1.AddToScheme, kedav1alpha1.AddToScheme} {
		Expect(add(scheme)).To(Succeed())
	}
	var err error
	env, restCfg, err = testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8s, err = client.New(restCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNS}})).To(Succeed())
	op = startOperator(defaultOptions())
})

var _ = AfterSuite(func() {
	if op != nil {
		op.stop()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// defaultOptions are the operator's production defaults, except a faster probe interval.
func defaultOptions() controller.Options {
	sel := labels.SelectorFromSet(labels.Set{serviceName: adminSvc})
	return controller.Options{
		Namespace:               installNS,
		TableName:               tableName,
		ScalerAddress:           scalerAddr,
		InterceptorSelector:     sel,
		InterceptorAdminPort:    "admin",
		ProbeInterval:           300 * time.Millisecond,
		ProbeTimeout:            time.Second,
		ProbeTransport:          &http.Transport{DialContext: dialer.DialContext},
		TableDebounce:           250 * time.Millisecond,
		TableMaxDelay:           2 * time.Second,
		MaxConcurrentReconciles: reconcilers(),
		ClusterDomain:           "cluster.local",
		// The chart's ServiceAccount; it need not exist for Roles to name it.
		InterceptorServiceAccount: interceptorSA,
		HostClaimRetention:        suiteClaimRetention,
		ClaimSweepInterval:        250 * time.Millisecond,
	}
}

// suiteClaimRetention is how long the suite's operator keeps a host nobody routes any more.
const suiteClaimRetention = 10 * time.Second

// reconcilers is the production default (4) unless HTTPSCALE_MAX_CONCURRENT_RECONCILES, the operator's
// own environment variable, says otherwise (the burst benchmark compares settings).
func reconcilers() int {
	if n, err := strconv.Atoi(os.Getenv("HTTPSCALE_MAX_CONCURRENT_RECONCILES")); err == nil && n > 0 {
		return n
	}
	return 4
}

// operator is one running manager with the operator's controllers.
type operator struct {
	writer *controller.TableWriter
	cancel context.CancelFunc
	done   chan error
}

func startOperator(o controller.Options) *operator {
	GinkgoHelper()
	cfg := rest.CopyConfig(restCfg)
	cfg.Wrap(operatorRequests.wrap)
	return startOperatorAs(cfg, o, false)
}

// operatorRequests runs the specs' hooks on every API request of the operators startOperator starts,
// in the operator's goroutine as the request is sent: a hook sees what the API server holds at that
// moment, and the request waits for it.
var operatorRequests requestHooks

type requestHooks struct {
	mu    sync.Mutex
	next  int
	hooks map[int]func(*http.Request)
}

// add runs hook on each request until the spec ends.
func (h *requestHooks) add(hook func(*http.Request)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.hooks == nil {
		h.hooks = map[int]func(*http.Request){}
	}
	id := h.next
	h.next++
	h.hooks[id] = hook
	DeferCleanup(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.hooks, id)
	})
}

func (h *requestHooks) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		h.mu.Lock()
		hooks := slices.Collect(maps.Values(h.hooks))
		h.mu.Unlock()
		for _, hook := range hooks {
			hook(req)
		}
		return rt.RoundTrip(req)
	})
}

// requestBody returns a copy of req's body, leaving the body to be sent.
func requestBody(req *http.Request) []byte {
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	if req.GetBody != nil {
		if b, err := req.GetBody(); err == nil {
			defer b.Close()
			data, _ := io.ReadAll(b)
			return data
		}
	}
	data, _ := io.ReadAll(req.Body)
	req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(data))
	return data
}

// startOperatorAs runs the operator with the given credentials, optionally with leader election in the
// install namespace as in production.
func startOperatorAs(cfg *rest.Config, o controller.Options, leaderElect bool) *operator {
	GinkgoHelper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         controller.CacheOptions(o),
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        "0",
		Controller:                    ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
		LeaderElection:                leaderElect,
		LeaderElectionID:              "operator.httpscale.dev",
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
	})
	Expect(err).NotTo(HaveOccurred())
	w, err := controller.Setup(mgr, o, ctrl.Log.WithName("operator"))
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return &operator{writer: w, cancel: cancel, done: done}
}

func (o *operator) stop() {
	o.cancel()
	select {
	case err := <-o.done:
		Expect(err).NotTo(HaveOccurred())
	case <-time.After(25 * time.Second):
		// Show what blocks the shutdown (this is how a queue deadlock was found).
		_ = pprof.Lookup("goroutine").WriteTo(GinkgoWriter, 2)
		Fail("operator did not stop within 25s")
	}
}

// addrMap dials loopback listeners in place of the addresses EndpointSlices hold. An address it does
// not know is an error: the suite never sends traffic anywhere but loopback.
type addrMap struct {
	mu sync.Mutex
	m  map[string]string
}

func (a *addrMap) set(from, to string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.m[from] = to
}

func (a *addrMap) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	a.mu.Lock()
	to, ok := a.m[addr]
	a.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("test dialer: no loopback listener for %s", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, network, to)
}

// fakeInterceptor is an interceptor admin port on loopback (pkg/admin's real handler). By default it
// serves the routing table currently stored in the cluster, as a replica that keeps up would; pin
// freezes the version it reports, as a replica whose watch stalled would.
type fakeInterceptor struct {
	srv    *httptest.Server
	pinned atomic.Pointer[string]
	// ip is the address its EndpointSlice entry carries.
	ip string
	// heldFor is how many requests it says it holds per app key (nil: none).
	heldFor atomic.Pointer[map[string]int64]
	// coldStarts are the cold starts it says it recorded (nil: none).
	coldStarts atomic.Pointer[[]admin.ColdStart]
}

// recordColdStarts adds recs to the cold starts the fake reports, numbered on from the last.
func (f *fakeInterceptor) recordColdStarts(recs ...admin.ColdStart) {
	var all []admin.ColdStart
	if p := f.coldStarts.Load(); p != nil {
		all = append(all, *p...)
	}
	for _, r := range recs {
		r.Seq = uint64(len(all) + 1)
		all = append(all, r)
	}
	f.coldStarts.Store(&all)
}

// ColdStartsSince implements admin.ColdStartSource.
func (f *fakeInterceptor) ColdStartsSince(since uint64, epoch string) admin.ColdStarts {
	out := admin.ColdStarts{Epoch: f.Epoch(), ColdStarts: []admin.ColdStart{}}
	if epoch != f.Epoch() {
		since = 0
	}
	if p := f.coldStarts.Load(); p != nil {
		for _, c := range *p {
			out.Seq = c.Seq
			if c.Seq > since {
				out.ColdStarts = append(out.ColdStarts, c)
			}
		}
	}
	return out
}

// hold makes the fake report n requests held for app key (0: none).
func (f *fakeInterceptor) hold(key string, n int64) {
	m := map[string]int64{key: n}
	f.heldFor.Store(&m)
}

// Epoch implements admin.CountsSource.
func (f *fakeInterceptor) Epoch() string { return "fake-" + f.ip }

// CountsSince implements admin.CountsSource: always a full snapshot of the held counts.
func (f *fakeInterceptor) CountsSince(uint64) admin.Counts {
	c := admin.Counts{Epoch: f.Epoch(), Seq: 1, Full: true, Apps: []admin.AppCount{}}
	if m := f.heldFor.Load(); m != nil {
		for k, n := range *m {
			if n > 0 {
				c.Apps = append(c.Apps, admin.AppCount{Key: k, Held: n})
			}
		}
	}
	return c
}

func newFakeInterceptor(ip string) *fakeInterceptor {
	f := &fakeInterceptor{ip: ip}
	f.srv = httptest.NewServer(admin.NewHandler(admin.HandlerOptions{Status: f.status, Counts: f, ColdStarts: f}))
	dialer.set(net.JoinHostPort(ip, fmt.Sprint(adminPort)), f.srv.Listener.Addr().String())
	DeferCleanup(f.srv.Close)
	return f
}

func (f *fakeInterceptor) pin(version string) { f.pinned.Store(&version) }
func (f *fakeInterceptor) follow()            { f.pinned.Store(nil) }

func (f *fakeInterceptor) status() admin.Status {
	cs := f.ColdStartsSince(0, "")
	if v := f.pinned.Load(); v != nil {
		return admin.Status{TableVersion: *v, ColdStartEpoch: cs.Epoch, ColdStartSeq: cs.Seq}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t, err := readTable(ctx)
	if err != nil {
		return admin.Status{}
	}
	return admin.Status{TableVersion: t.Version(), TableEntries: t.Len(), ColdStartEpoch: cs.Epoch, ColdStartSeq: cs.Seq}
}

// readTable decodes the routing table the operator stored, as an interceptor does.
func readTable(ctx context.Context) (*routing.Table, error) {
	return testenv.StoredTable(ctx, k8s, installNS, tableName)
}

// tableEntry returns the stored table's entry for key, or nil.
func tableEntry(key string) *routing.Entry {
	GinkgoHelper()
	t, err := readTable(context.Background())
	if err != nil {
		return nil
	}
	e, ok := t.Lookup(key)
	if !ok {
		return nil
	}
	c := e.Clone()
	return &c
}

// publishFleet writes the interceptor admin Service's EndpointSlice with one endpoint per fake; a fake
// listed in notReady is published with ready=false.
func publishFleet(name string, fakes []*fakeInterceptor, notReady ...*fakeInterceptor) {
	GinkgoHelper()
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: installNS, Labels: map[string]string{serviceName: adminSvc}},
	}
	_, err := ctrl.CreateOrUpdate(context.Background(), k8s, slice, func() error {
		slice.AddressType = discoveryv1.AddressTypeIPv4
		slice.Endpoints = nil
		slice.Ports = nil
		for _, f := range fakes {
			ready := true
			for _, n := range notReady {
				if n == f {
					ready = false
				}
			}
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{f.ip},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
			})
		}
		// The slice says what a real one does (port "admin" 9090); the dialer maps ip:9090 to each
		// fake's own loopback port.
		slice.Ports = []discoveryv1.EndpointPort{{Name: ptr.To("admin"), Port: ptr.To[int32](adminPort)}}
		return nil
	})
	Expect(err).NotTo(HaveOccurred())
}

func createService(ns, name string, ports ...corev1.ServicePort) *corev1.Service {
	GinkgoHelper()
	if len(ports) == 0 {
		ports = []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: ports},
	}
	Expect(k8s.Create(context.Background(), svc)).To(Succeed())
	return svc
}

func podTemplate(name string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app:1"}}},
	}
}

func createDeployment(ns, name string) {
	GinkgoHelper()
	Expect(k8s.Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name),
		},
	})).To(Succeed())
}

func createStatefulSet(ns, name string) {
	GinkgoHelper()
	Expect(k8s.Create(context.Background(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: podTemplate(name),
		},
	})).To(Succeed())
}

// app creates a Service and a Deployment named name, and returns an HTTPScaledObject for them (not yet
// created) routing host.
func app(ns, name, host string) *v1.HTTPScaledObject {
	GinkgoHelper()
	createService(ns, name)
	createDeployment(ns, name)
	return hso(ns, name, host)
}

func hso(ns, name, host string) *v1.HTTPScaledObject {
	return &v1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{v1.Host(host)},
			ScaleTargetRef: v1.ScaleTargetRef{Name: name, Service: name, Port: ptr.To[int32](80)},
		},
	}
}

func get(obj client.Object) func() (client.Object, error) {
	return func() (client.Object, error) {
		err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
		return obj, err
	}
}

// condition returns a function for Eventually that yields the object's condition of type typ.
func condition(h *v1.HTTPScaledObject, typ string) func() metav1.Condition {
	return func() metav1.Condition {
		cur := &v1.HTTPScaledObject{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(h), cur); err != nil {
			return metav1.Condition{}
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, typ); c != nil {
			return *c
		}
		return metav1.Condition{}
	}
}

// haveCondition matches a condition's status and reason.
func haveCondition(status metav1.ConditionStatus, reason string) OmegaMatcher {
	return And(HaveField("Status", status), HaveField("Reason", reason))
}

func current(h *v1.HTTPScaledObject) *v1.HTTPScaledObject {
	GinkgoHelper()
	cur := &v1.HTTPScaledObject{}
	Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(h), cur)).To(Succeed())
	return cur
}

func isNotFound(obj client.Object) func() bool {
	return func() bool {
		return apierrors.IsNotFound(k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
	}
}

const (
	timeout = 30 * time.Second
	poll    = 50 * time.Millisecond
)

func init() {
	SetDefaultEventuallyTimeout(timeout)
	SetDefaultEventuallyPollingInterval(poll)
	SetDefaultConsistentlyDuration(2 * time.Second)
	SetDefaultConsistentlyPollingInterval(100 * time.Millisecond)
}
