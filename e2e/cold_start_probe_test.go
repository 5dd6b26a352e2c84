//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// listenDelay is how long the sample app waits after its process started before it listens, as an
// app that loads before it serves.
const listenDelay = 1500 * time.Millisecond

// Cold starts at the speed of the pod: an app whose readiness probe keeps Kubernetes' default period
// (10 s) and that listens 1.5 s after its container starts is answered about when it listens, because
// the interceptor probes the starting pod itself; each wake is compared with the pod's own time, from
// the pod's creation to the app listening, and its breakdown is read from the object's status.
var _ = Describe("Cold starts at the speed of the pod", Ordered, func() {
	var (
		h    *framework.HTTPScale
		ns   string
		url  string
		seen *podTimes
	)
	apps := []struct {
		name   string
		period int32 // readiness probe period in seconds; 0 is Kubernetes' default (10)
		probe  *httpscalev1alpha1.ColdStartProbe
		what   string
		// wakes without EnvWakes (each takes KEDA's polling interval to go back to zero), and at
		// most with it.
		wakes, most int
	}{
		{name: "default", what: "readiness period 10 s (default), interceptor probes", wakes: 3},
		{name: "fast", period: 1, what: "readiness period 1 s, interceptor probes", wakes: 2},
		{name: "kubelet", probe: &httpscalev1alpha1.ColdStartProbe{Disabled: true}, what: "readiness period 10 s, probes disabled (the kubelet decides)",
			wakes: 1, most: 3},
	}

	BeforeAll(func(ctx SpecContext) {
		h, ns, _ = scenario(ctx, "probe")
		url = fmt.Sprintf("http://%s:%d/hello", h.InterceptorService, localcluster.ProxyPort)
		for _, a := range apps {
			routedAppOf(ctx, ns, a.name, 0, func(d *appsv1.Deployment) {
				c := &d.Spec.Template.Spec.Containers[0]
				c.Args = append(c.Args, "--listen-delay="+listenDelay.String())
				c.ReadinessProbe.PeriodSeconds = a.period
			}, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
				s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(a.name + "." + ns + ".example")}
				s.ScaledownPeriod = ptr.To[int32](5)
				s.Replicas.Max = ptr.To[int32](1)
				s.ColdStart = &httpscalev1alpha1.ColdStart{Probe: a.probe}
			})
		}
		seen = watchPods(ctx, ns)
	})

	for _, a := range apps {
		It("answers each wake of "+a.what+" as soon as the app listens", func(ctx SpecContext) {
			n := a.wakes
			if os.Getenv(EnvWakes) != "" {
				n = wakesFromEnv()
			}
			if a.most > 0 {
				n = min(n, a.most) // each takes the kubelet's 10 s
			}
			host := a.name + "." + ns + ".example"
			var wakes []wakeTimes
			for range n {
				backToZero(ctx, ns, a.name)
				w := measureWake(ctx, url, host, ns, a.name, seen)
				wakes = append(wakes, w)
				forwarded, ready := w.step("Forwarded"), w.step("EndpointReady")
				if a.probe == nil && a.period == 0 {
					Expect(w.step("AppAnswered")).To(BeNumerically(">", 0), "the interceptor's probe passed: %s", w)
					Expect(forwarded).To(BeNumerically("<", ready), "forwarded before the kubelet's readiness: %s", w)
				}
				if a.probe != nil {
					Expect(w.status.Probe).To(Equal("not probed: spec.coldStart.probe.disabled"))
					Expect(forwarded).To(BeNumerically(">=", ready), "without probes the kubelet decides: %s", w)
				}
			}
			rep := summarize(a.what, wakes)
			AddReportEntry("cold starts: "+a.what, rep)
			fmt.Fprintln(GinkgoWriter, rep)
		})
	}
})

// podTimes records, from a watch, when the test saw each pod of a namespace appear, bound to a node
// and get its IP, and each Deployment's replicas go from 0 to more.
type podTimes struct {
	mu      sync.Mutex
	created map[string]time.Time // by pod name
	bound   map[string]time.Time
	ip      map[string]time.Time
	scaled  map[string][]time.Time // by Deployment name
}

func watchPods(ctx context.Context, ns string) *podTimes {
	GinkgoHelper()
	cs := kubernetes.NewForConfigOrDie(f.RESTConfig)
	pt := &podTimes{created: map[string]time.Time{}, bound: map[string]time.Time{}, ip: map[string]time.Time{}, scaled: map[string][]time.Time{}}
	inf := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	pod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		now := time.Now()
		pt.mu.Lock()
		defer pt.mu.Unlock()
		setOnce(pt.created, p.Name, now)
		if p.Spec.NodeName != "" {
			setOnce(pt.bound, p.Name, now)
		}
		if p.Status.PodIP != "" {
			setOnce(pt.ip, p.Name, now)
		}
	}
	_, err := inf.Core().V1().Pods().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: pod, UpdateFunc: func(_, obj any) { pod(obj) },
	})
	Expect(err).NotTo(HaveOccurred())
	_, err = inf.Apps().V1().Deployments().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, obj any) {
			o, ok1 := oldObj.(*appsv1.Deployment)
			d, ok2 := obj.(*appsv1.Deployment)
			if ok1 && ok2 && ptr.Deref(o.Spec.Replicas, 1) == 0 && ptr.Deref(d.Spec.Replicas, 1) > 0 {
				pt.mu.Lock()
				pt.scaled[d.Name] = append(pt.scaled[d.Name], time.Now())
				pt.mu.Unlock()
			}
		},
	})
	Expect(err).NotTo(HaveOccurred())
	stop := make(chan struct{})
	DeferCleanup(func() { close(stop); inf.Shutdown() })
	inf.Start(stop)
	for typ, ok := range inf.WaitForCacheSync(ctx.Done()) {
		Expect(ok).To(BeTrue(), "%v informer synced", typ)
	}
	return pt
}

func setOnce(m map[string]time.Time, k string, t time.Time) {
	if _, ok := m[k]; !ok {
		m[k] = t
	}
}

// wakeTimes is one wake as the test and the object's status saw it, relative to the request.
type wakeTimes struct {
	took time.Duration // request sent -> answer read
	// own is the pod's own time: from the test seeing the pod created to the app listening.
	own time.Duration
	// seen: scaled (Deployment 0 -> 1), created, bound, ip (the pod as the watch saw it), started and
	// listening (as the app says), all after the request was sent.
	scaled, created, bound, ip, started, listening time.Duration
	status                                         *httpscalev1alpha1.ColdStartStatus
}

// step is when the status says a step happened, after the request was held; -1 when it did not.
func (w wakeTimes) step(name string) time.Duration {
	for _, s := range w.status.Steps {
		if s.Name == name {
			d, err := time.ParseDuration(s.After)
			Expect(err).NotTo(HaveOccurred())
			return d
		}
	}
	return -1
}

func (w wakeTimes) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "answered after %s; pod's own %s (overhead %s); seen: scaled %s created %s bound %s ip %s started %s listening %s; status:",
		ms(w.took), ms(w.own), ms(w.took-w.own), ms(w.scaled), ms(w.created), ms(w.bound), ms(w.ip), ms(w.started), ms(w.listening))
	for _, s := range w.status.Steps {
		fmt.Fprintf(&b, " %s %s", s.Name, s.After)
	}
	return b.String()
}

func ms(d time.Duration) string { return d.Round(time.Millisecond).String() }

// measureWake sends one request to app name (at zero) and returns its times, once the object's
// status shows the cold start through the kubelet's readiness.
func measureWake(ctx context.Context, url, host, ns, name string, seen *podTimes) wakeTimes {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	Expect(err).NotTo(HaveOccurred())
	req.Host = host
	sent := time.Now()
	resp, err := f.HTTP.Do(req)
	Expect(err).NotTo(HaveOccurred())
	a, err := readAnswer(resp)
	took := time.Since(sent)
	Expect(err).NotTo(HaveOccurred())
	Expect(a.Status).To(Equal(http.StatusOK))
	Expect(resp.Header.Get("X-Httpscale-Cold-Start")).To(Equal("true"), "the request was held")
	started, err := time.Parse(time.RFC3339Nano, a.StartedAt)
	Expect(err).NotTo(HaveOccurred())
	listening, err := time.Parse(time.RFC3339Nano, a.ListeningAt)
	Expect(err).NotTo(HaveOccurred())

	var pods corev1.PodList
	Expect(f.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": name})).To(Succeed())
	i := slices.IndexFunc(pods.Items, func(p corev1.Pod) bool { return p.Status.PodIP == a.PodIP })
	Expect(i).To(BeNumerically(">=", 0), "answered by a pod of the app")
	pod := pods.Items[i].Name
	w := wakeTimes{took: took, started: started.Sub(sent), listening: listening.Sub(sent)}
	seen.mu.Lock()
	w.created, w.bound, w.ip = seen.created[pod].Sub(sent), seen.bound[pod].Sub(sent), seen.ip[pod].Sub(sent)
	if s := seen.scaled[name]; len(s) > 0 {
		w.scaled = s[len(s)-1].Sub(sent)
	}
	seen.mu.Unlock()
	w.own = w.listening - w.created

	// The interceptor finishes the record once the kubelet's readiness reached the EndpointSlice.
	Eventually(func(g Gomega) {
		var hso httpscalev1alpha1.HTTPScaledObject
		g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &hso)).To(Succeed())
		st := hso.Status.LastColdStart
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.HeldAt.Time).To(BeTemporally("~", sent, time.Second), "the status shows this wake")
		g.Expect(st.Pod).To(Equal(pod))
		g.Expect(st.Steps).To(ContainElement(HaveField("Name", "EndpointReady")))
		w.status = st
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	fmt.Fprintf(GinkgoWriter, "%s wake: %s\n", name, w)
	return w
}

// summarize reports the wakes' percentiles: the test's view and the status' steps.
func summarize(what string, wakes []wakeTimes) string {
	col := func(get func(wakeTimes) time.Duration) string {
		ds := make([]time.Duration, len(wakes))
		for i, w := range wakes {
			ds[i] = get(w)
		}
		return fmt.Sprintf("%s / %s", ms(percentile(ds, 50)), ms(percentile(ds, 99)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s, %d wakes (p50 / p99, after the request):\n", what, len(wakes))
	fmt.Fprintf(&b, "  request -> answered %s; pod's own (created -> listening) %s; overhead (answered - own) %s\n",
		col(func(w wakeTimes) time.Duration { return w.took }), col(func(w wakeTimes) time.Duration { return w.own }),
		col(func(w wakeTimes) time.Duration { return w.took - w.own }))
	fmt.Fprintf(&b, "  seen by the test: Deployment scaled %s, pod created %s, bound %s, IP %s, process started %s, listening %s\n",
		col(func(w wakeTimes) time.Duration { return w.scaled }), col(func(w wakeTimes) time.Duration { return w.created }),
		col(func(w wakeTimes) time.Duration { return w.bound }), col(func(w wakeTimes) time.Duration { return w.ip }),
		col(func(w wakeTimes) time.Duration { return w.started }), col(func(w wakeTimes) time.Duration { return w.listening }))
	b.WriteString("  status.lastColdStart (after held):")
	for _, name := range []string{"WakeSent", "Scaled", "PodCreated", "PodScheduled", "ContainersStarted", "EndpointListed", "AppAnswered", "Forwarded", "EndpointReady"} {
		var ds []time.Duration
		for _, w := range wakes {
			if d := w.step(name); d >= 0 {
				ds = append(ds, d)
			}
		}
		if len(ds) > 0 {
			fmt.Fprintf(&b, " %s %s / %s (%d);", name, ms(percentile(ds, 50)), ms(percentile(ds, 99)), len(ds))
		}
	}
	return b.String()
}
