package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// workload is the soak's apps and the loops that drive them.
type workload struct {
	f     *framework.Framework
	o     options
	log   func(string, ...any)
	ns    string
	proxy string // the interceptor Service's ClusterIP:port
	hc    *http.Client

	mu   sync.Mutex
	reqs []request
}

// request is one request of the soak and what it got.
type request struct {
	kind   string // steady, wave, churn
	app    string
	sent   time.Time
	took   time.Duration
	status int
	err    string
}

func (r request) ok() bool { return r.err == "" && r.status == http.StatusOK }

// results are the requests of a run.
type results struct {
	start, end time.Time
	reqs       []request
}

func (r results) failed() int {
	n := 0
	for _, q := range r.reqs {
		if !q.ok() {
			n++
		}
	}
	return n
}

const soakDomain = "soak.example"

func newWorkload(ctx context.Context, f *framework.Framework, o options, log func(string, ...any)) (*workload, error) {
	h, err := f.HTTPScale(ctx)
	if err != nil {
		return nil, err
	}
	ns, err := f.CreateNamespace(ctx, "soak")
	if err != nil {
		return nil, err
	}
	w := &workload{
		f: f, o: o, log: log, ns: ns,
		proxy: fmt.Sprintf("%s:%d", h.InterceptorService, localcluster.ProxyPort),
		// A new connection per request: kube-proxy picks an interceptor for each, as for independent
		// clients.
		hc: &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true}},
	}
	for i := range o.warm {
		name := fmt.Sprintf("warm-%d", i)
		if err := w.app(ctx, name, 1, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](1), Max: ptr.To[int32](3)}
			s.ScalingMetric = &httpscalev1alpha1.ScalingMetric{Concurrency: &httpscalev1alpha1.ConcurrencyMetric{TargetValue: 20}}
		}); err != nil {
			return nil, err
		}
	}
	if err := w.app(ctx, "wave", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
		s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](0), Max: ptr.To[int32](3)}
		s.ScaledownPeriod = ptr.To[int32](20)
		s.ScalingMetric = &httpscalev1alpha1.ScalingMetric{Concurrency: &httpscalev1alpha1.ConcurrencyMetric{TargetValue: 8}}
	}); err != nil {
		return nil, err
	}
	for i := range o.warm {
		if err := w.waitAnswer(ctx, fmt.Sprintf("warm-%d", i)); err != nil {
			return nil, err
		}
	}
	log("namespace %s: %d warm apps and the wave app routed and answering", ns, o.warm)
	return w, nil
}

// app creates the sample app name (Deployment with replicas, Service) and its HTTPScaledObject on
// host <name>.soak.example, with spec applied, and waits until every interceptor routes it.
func (w *workload) app(ctx context.Context, name string, replicas int32, spec func(*httpscalev1alpha1.HTTPScaledObjectSpec)) error {
	dep, svc := w.f.SampleApp(w.ns, name, replicas)
	dep.Spec.Template.Spec.TopologySpreadConstraints = nil // churned apps come and go; any node will do
	for _, o := range []client.Object{dep, svc} {
		if err := w.f.Client.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
	}
	hso := &httpscalev1alpha1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
			Hosts: []httpscalev1alpha1.Host{httpscalev1alpha1.Host(name + "." + soakDomain)},
			ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{
				APIVersion: "apps/v1", Kind: "Deployment", Name: name, Service: name, Port: ptr.To[int32](80),
			},
		},
	}
	spec(&hso.Spec)
	if err := w.f.Client.Create(ctx, hso); err != nil {
		return fmt.Errorf("creating HTTPScaledObject %s: %w", name, err)
	}
	return w.waitRouted(ctx, hso)
}

// waitRouted waits (up to 2 minutes) until every interceptor routes hso's current generation.
func (w *workload) waitRouted(ctx context.Context, hso *httpscalev1alpha1.HTTPScaledObject) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := w.f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso)
		if err == nil && hso.Status.ObservedGeneration == hso.Generation && hso.Status.Routing != nil &&
			hso.Status.Routing.InterceptorsTotal > 0 && hso.Status.Routing.InterceptorsReady == hso.Status.Routing.InterceptorsTotal {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("HTTPScaledObject %s not routed by every interceptor within 2 minutes: %+v (%v)", hso.Name, hso.Status.Routing, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitAnswer waits until the app answers 200 (its pod is Ready and routed).
func (w *workload) waitAnswer(ctx context.Context, app string) error {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if r := w.get(ctx, "setup", app, "/ready-check"); r.ok() {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("app %s does not answer: %d %s", app, r.status, r.err)
		}
		time.Sleep(time.Second)
	}
}

// get sends one GET for app through the interceptor Service.
func (w *workload) get(ctx context.Context, kind, app, path string) request {
	r := request{kind: kind, app: app, sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.proxy+path, nil)
	if err == nil {
		req.Host = app + "." + soakDomain
		var resp *http.Response
		if resp, err = w.hc.Do(req); err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.status = resp.StatusCode
		}
	}
	if err != nil {
		r.err = err.Error()
	}
	r.took = time.Since(r.sent)
	return r
}

// record keeps r unless the run is stopping (a request cut off by the end is no failure).
func (w *workload) record(ctx context.Context, r request) {
	if ctx.Err() != nil && !r.ok() {
		return
	}
	w.mu.Lock()
	w.reqs = append(w.reqs, r)
	w.mu.Unlock()
	if !r.ok() {
		w.log("FAILED %s request to %s sent %s: %d %s", r.kind, r.app, r.sent.UTC().Format("15:04:05.000"), r.status, r.err)
	}
}

// run drives the steady load, the waves and the churn for the duration, sampling meanwhile.
func (w *workload) run(ctx context.Context, s *sampler) (results, error) {
	ctx, cancel := context.WithTimeout(ctx, w.o.duration)
	defer cancel()
	res := results{start: time.Now()}
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	fail := func(err error) {
		select {
		case errc <- err:
		default:
		}
		cancel()
	}
	wg.Go(func() { w.steady(ctx) })
	wg.Go(func() { w.waves(ctx) })
	wg.Go(func() {
		if err := w.churn(ctx); err != nil && ctx.Err() == nil {
			fail(err)
		}
	})
	wg.Go(func() { s.loop(ctx, w.o.sampleEvery) })
	wg.Wait()
	res.end = time.Now()
	w.mu.Lock()
	res.reqs = w.reqs
	w.mu.Unlock()
	select {
	case err := <-errc:
		return res, err
	default:
		return res, nil
	}
}

// steady sends rate requests a second, round robin over the warm apps, each in flight 50 ms at the app.
func (w *workload) steady(ctx context.Context) {
	tick := time.NewTicker(time.Second / time.Duration(w.o.rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		app := fmt.Sprintf("warm-%d", i%w.o.warm)
		wg.Go(func() { w.record(ctx, w.get(ctx, "steady", app, "/steady?sleep=50ms")) })
	}
}

// waves loads the wave app every waveEvery: waveConcurrency requests in flight, each 1 s at the
// app, for waveFor; the app goes from 0 to several replicas and back to 0 in between.
func (w *workload) waves(ctx context.Context) {
	for n := 1; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.o.waveEvery - w.o.waveFor):
		}
		w.log("wave %d: %d requests in flight for %s", n, w.o.waveConcurrency, w.o.waveFor)
		wctx, cancel := context.WithTimeout(ctx, w.o.waveFor)
		var wg sync.WaitGroup
		for range w.o.waveConcurrency {
			wg.Go(func() {
				for wctx.Err() == nil {
					w.record(ctx, w.get(ctx, "wave", "wave", "/wave?sleep=1s"))
				}
			})
		}
		wg.Wait()
		cancel()
	}
}

// churn creates an object every churnEvery, wakes it with one request, changes it, and deletes it
// (with its workload) churnLife after its creation.
func (w *workload) churn(ctx context.Context) error {
	tick := time.NewTicker(w.o.churnEvery)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	errc := make(chan error, 1)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-tick.C:
		}
		name := fmt.Sprintf("churn-%d", i)
		wg.Go(func() {
			if err := w.churnOne(ctx, name); err != nil && ctx.Err() == nil {
				select {
				case errc <- err:
				default:
				}
			}
		})
	}
}

func (w *workload) churnOne(ctx context.Context, name string) error {
	born := time.Now()
	if err := w.app(ctx, name, 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
		s.Replicas = &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](0), Max: ptr.To[int32](1)}
		s.ScaledownPeriod = ptr.To[int32](30)
	}); err != nil {
		return err
	}
	w.record(ctx, w.get(ctx, "churn", name, "/wake"))
	var hso httpscalev1alpha1.HTTPScaledObject
	key := client.ObjectKey{Namespace: w.ns, Name: name}
	if err := w.f.Client.Get(ctx, key, &hso); err != nil {
		return err
	}
	hso.Spec.Hosts = append(hso.Spec.Hosts, httpscalev1alpha1.Host("also-"+name+"."+soakDomain))
	if err := w.f.Client.Update(ctx, &hso); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("changing %s: %w", name, err)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(time.Until(born.Add(w.o.churnLife))):
	}
	return w.remove(context.WithoutCancel(ctx), name)
}

// remove deletes the object name and its Deployment and Service.
func (w *workload) remove(ctx context.Context, name string) error {
	var errs []error
	for _, o := range []client.Object{
		&httpscalev1alpha1.HTTPScaledObject{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}},
	} {
		if err := w.f.Client.Delete(ctx, o); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// cleanup deletes the soak's namespace.
func (w *workload) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = w.f.DeleteNamespace(ctx, w.ns)
}
