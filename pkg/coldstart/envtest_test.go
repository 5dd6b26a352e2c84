package coldstart_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/coldstart"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// dialLog maps the test's pod addresses to loopback servers and records every address dialled;
// anything not mapped is refused.
type dialLog struct {
	mu     sync.Mutex
	routes map[string]string
	dials  []string
}

func (d *dialLog) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, addr)
	to, ok := d.routes[addr]
	d.mu.Unlock()
	if !ok {
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.ErrPermission}
	}
	return (&net.Dialer{}).DialContext(ctx, network, to)
}

func (d *dialLog) dialled() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.dials)
}

// bindGenerated grants user the interceptor's roles as `make manifests` generates them.
func bindGenerated(t *testing.T, ctx context.Context, cs kubernetes.Interface, user string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "interceptor", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---\n") {
		if strings.TrimSpace(strings.Trim(doc, "-")) == "" {
			continue
		}
		subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
		if strings.Contains(doc, "kind: ClusterRole") {
			var cr rbacv1.ClusterRole
			if err := yaml.Unmarshal([]byte(doc), &cr); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &cr, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
				Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// tenantUser is a user who may manage Services, EndpointSlices and Pods in namespace ns only.
func tenantUser(t *testing.T, ctx context.Context, env *envtest.Environment, cs kubernetes.Interface, ns string) kubernetes.Interface {
	t.Helper()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "services"}, Verbs: []string{"*"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"*"}},
	}}
	if _, err := cs.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "tenant-" + ns}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u, err := env.AddUser(envtest.User{Name: "tenant-" + ns}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(u.Config())
}

// startingPod creates pod name in ns as its tenant would, with an HTTP readiness probe on port 8000
// at /ready, and gives it ip as the kubelet would once its sandbox runs.
func startingPod(t *testing.T, ctx context.Context, tenant, kubelet kubernetes.Interface, ns, name, ip string) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "app", Image: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}},
		ReadinessProbe: &corev1.Probe{PeriodSeconds: 10, ProbeHandler: corev1.ProbeHandler{
			HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
	}}}}
	pod, err := tenant.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	pod, err = kubelet.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// slice lists endpoints of service in ns on port 8000, ready or not; ref names each one's pod.
func slice(ns, service string, ready bool, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	for i := range eps {
		eps[i].Conditions = discoveryv1.EndpointConditions{Ready: ptr.To(ready)}
	}
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: service, Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8000), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints:   eps,
	}
}

func ref(ns string, pod *corev1.Pod) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID}
}

// Against a real API server, as the interceptor runs it (its generated RBAC): a held request is
// forwarded to a starting pod the moment its readiness probe passes, long before the EndpointSlice
// says ready; and a tenant's own EndpointSlice cannot point the probes anywhere else.
func TestProbesAgainstTheAPIServer(t *testing.T) {
	env, cfg := testenv.StartT(t)
	ctx := t.Context()
	admin0 := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{"shop", "evil"} {
		if _, err := admin0.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bindGenerated(t, ctx, admin0, "interceptor")
	u, err := env.AddUser(envtest.User{Name: "interceptor"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	interceptor := kubernetes.NewForConfigOrDie(u.Config())
	if _, err := interceptor.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the interceptor listed pods: %v, want forbidden", err)
	}

	// The app: 503 on /ready until it has "started", then 200.
	var started atomic.Bool
	var probes atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		probes.Add(1)
		if r.URL.Path != "/ready" || !started.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	dials := &dialLog{routes: map[string]string{"198.18.0.7:8000": l.Addr().String()}}

	cache, err := endpoints.NewCache(interceptor, endpoints.CacheOptions{Log: testr.New(t), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	shopKey := endpoints.ServiceKey{Namespace: "shop", Service: "shop", PortName: "http"}
	evilKey := endpoints.ServiceKey{Namespace: "evil", Service: "evil", PortName: "http"}
	cache.Track([]endpoints.ServiceKey{shopKey, evilKey})
	tr, err := coldstart.New(coldstart.Options{Endpoints: cache, Pods: coldstart.PodsFrom(interceptor), DialContext: dials.dial,
		Name: "interceptor-0", Linger: time.Second, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	wg.Go(func() { _ = cache.Start(runCtx) })
	wg.Go(func() { _ = tr.Start(runCtx) })
	for !cache.Synced() {
		time.Sleep(10 * time.Millisecond)
	}

	// The hostile tenant, with its own credentials: an EndpointSlice of its Service lists the shop
	// pod's address, once with its own pod (another IP) as targetRef, once naming the shop pod
	// across namespaces, and the API server's Service address with no pod at all.
	evil := tenantUser(t, ctx, env, admin0, "evil")
	if _, err := evil.CoreV1().Pods("shop").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant listed another namespace's pods: %v, want forbidden", err)
	}
	shop := tenantUser(t, ctx, env, admin0, "shop")
	shopPod := startingPod(t, ctx, shop, admin0, "shop", "shop-1", "198.18.0.7")
	decoy := startingPod(t, ctx, evil, admin0, "evil", "decoy", "198.18.9.9")
	hostile := slice("evil", "evil", false,
		discoveryv1.Endpoint{Addresses: []string{"198.18.0.7"}, TargetRef: ref("evil", decoy)},
		discoveryv1.Endpoint{Addresses: []string{"198.18.0.8"}, TargetRef: ref("shop", shopPod)},
		discoveryv1.Endpoint{Addresses: []string{"10.96.0.1"}})
	if _, err := evil.DiscoveryV1().EndpointSlices("evil").Create(ctx, hostile, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	evilApp := coldstart.App{Key: "evil/evil", Target: evilKey, Hold: time.Minute}
	evilCS := tr.Begin(evilApp, time.Now())
	for len(cache.Listed(evilKey).Pending) < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	if d := dials.dialled(); len(d) > 0 {
		t.Fatalf("the hostile slice made the interceptor dial %v", d)
	}
	if s := cache.Ready(evilKey); s != nil {
		t.Fatalf("the hostile slice's endpoints are served: %+v", s)
	}
	evilCS.Released(false)

	// The shop app starts: listed not ready, its readiness probe fails, then passes.
	held := time.Now()
	cs := tr.Begin(coldstart.App{Key: "shop/shop", Target: shopKey, Hold: time.Minute}, held)
	released := make(chan *endpoints.Set, 1)
	go func() {
		s, _ := cache.WaitReady(ctx, shopKey)
		released <- s
	}()
	listed := slice("shop", "shop", false, discoveryv1.Endpoint{Addresses: []string{"198.18.0.7"}, TargetRef: ref("shop", shopPod)})
	listed, err = admin0.DiscoveryV1().EndpointSlices("shop").Create(ctx, listed, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for probes.Load() < 3 {
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case s := <-released:
		t.Fatalf("released before the app answered: %+v", s)
	default:
	}
	started.Store(true)
	listening := time.Now()
	var set *endpoints.Set
	select {
	case set = <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was not released after the app answered")
	}
	// Well under the 10 s readiness period; the bound is loose for a loaded machine.
	if took := time.Since(listening); !set.Probed || set.Endpoints[0].Pod != "shop-1" || took > time.Second {
		t.Fatalf("released %v after the app answered with %+v", took, set)
	}
	cs.Forwarded(set.Endpoints[0].Addr(), time.Now())
	for _, d := range dials.dialled() {
		if d != "198.18.0.7:8000" {
			t.Fatalf("probe dialled %s", d)
		}
	}

	// The kubelet's readiness arrives; the cold start is complete.
	listed.Endpoints[0].Conditions.Ready = ptr.To(true)
	if _, err := admin0.DiscoveryV1().EndpointSlices("shop").Update(ctx, listed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rec admin.ColdStart
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, r := range tr.ColdStartsSince(0, "").ColdStarts {
			if r.App == "shop/shop" {
				rec = r
			}
		}
		if rec.App != "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if rec.Outcome != admin.OutcomeForwarded || rec.Pod != "shop-1" {
		t.Fatalf("record %+v", rec)
	}
	for _, step := range []string{admin.StepEndpointListed, admin.StepAppAnswered, admin.StepForwarded, admin.StepEndpointReady, admin.StepPodCreated} {
		if rec.Step(step).IsZero() {
			t.Errorf("step %s missing: %+v", step, rec.Steps)
		}
	}
	if !rec.Step(admin.StepAppAnswered).Before(rec.Step(admin.StepEndpointReady)) {
		t.Errorf("answered at %v, ready at %v: want the probe first", rec.Step(admin.StepAppAnswered), rec.Step(admin.StepEndpointReady))
	}
	var evilRec admin.ColdStart
	for _, r := range tr.ColdStartsSince(0, "").ColdStarts {
		if r.App == "evil/evil" {
			evilRec = r
		}
	}
	if !strings.HasPrefix(evilRec.Probe, "not probed") {
		t.Errorf("the hostile app's record says it was probed: %+v", evilRec)
	}
}
