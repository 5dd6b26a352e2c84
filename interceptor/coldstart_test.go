package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// TestColdStartProbeAgainstAPIServer runs the interceptor binary against a real kube-apiserver: a
// request held for an app whose pod is listed but not ready is answered as soon as the pod's own
// readiness probe passes, not when its EndpointSlice says ready; the cold start is then on the admin
// port, step by step.
func TestColdStartProbeAgainstAPIServer(t *testing.T) {
	env, cs := apiServer(t)
	ctx := context.Background()
	var listening atomic.Bool
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !listening.Load() {
			w.WriteHeader(http.StatusServiceUnavailable) // the app is still loading
			return
		}
		fmt.Fprintf(w, "web answered %s", r.URL.Path)
	}))
	defer backend.Close()
	const podIP = "198.18.0.20"
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != podIP+":8080" {
			return nil, fmt.Errorf("test dialer: no route to %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, backend.Listener.Addr().String())
	}
	writeTable(t, cs, []routing.Entry{{Namespace: "shop", Name: "web", Hosts: []string{"web.example.com"}, Service: "web", Port: 80, PortName: "http"}})
	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	startRun(t, []string{
		"--kubeconfig=" + kubeconfig, "--health-probe-bind-address=" + testenv.FreeAddr(t),
		"--proxy-bind-address=" + proxyAddr, "--admin-bind-address=" + adminAddr,
		"--namespace=" + installNS, "--drain-delay=0", "--drain-timeout=5s",
	}, runOptions{dial: dial})
	testenv.Eventually(t, 60*time.Second, "the interceptor is ready", func() bool {
		resp, err := http.Get("http://" + adminAddr + admin.PathReadyz)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "web", Image: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
	}}}}
	pod, err = cs.CoreV1().Pods("shop").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.PodIP, pod.Status.PodIPs = podIP, []corev1.PodIP{{IP: podIP}}
	if pod, err = cs.CoreV1().Pods("shop").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	held := getAsync(proxyAddr, "web.example.com", "/cart")
	testenv.Eventually(t, 10*time.Second, "the request is held", func() bool { return appCount(adminAddr, "shop/web").Held == 1 })
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "web-1", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{podIP}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: pod.Name, UID: pod.UID}}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if slice, err = cs.DiscoveryV1().EndpointSlices("shop").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-held:
		t.Fatalf("answered while the app answered its probe 503: %d %q", r.code, r.body)
	case <-time.After(time.Second):
	}
	listening.Store(true)
	start := time.Now()
	select {
	case r := <-held:
		if r.code != http.StatusOK || r.body != "web answered /cart" || r.hdr.Get(proxy.HeaderColdStart) != "true" {
			t.Fatalf("held request: %d %q %v", r.code, r.body, r.hdr)
		}
		t.Logf("held request answered %s after the app started answering its readiness probe", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("held request not answered after the app answered its readiness probe (the slice still says not ready)")
	}

	// The kubelet's readiness arrives: the cold start is complete and on the admin port.
	slice.Endpoints[0].Conditions.Ready = ptr.To(true)
	if _, err := cs.DiscoveryV1().EndpointSlices("shop").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got admin.ColdStarts
	testenv.Eventually(t, 20*time.Second, "the cold start on /coldstarts", func() bool {
		resp, err := http.Get("http://" + adminAddr + admin.PathColdStarts)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&got) == nil && len(got.ColdStarts) == 1
	})
	rec := got.ColdStarts[0]
	if rec.App != "shop/web" || rec.Pod != "web-1" || rec.Outcome != admin.OutcomeForwarded || rec.Step(admin.StepAppAnswered).IsZero() ||
		!rec.Step(admin.StepForwarded).Before(rec.Step(admin.StepEndpointReady)) {
		t.Errorf("cold start %+v: want web-1 answered, forwarded before ready", rec)
	}
	var st admin.Status
	resp, err := http.Get("http://" + adminAddr + admin.PathStatus)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.ColdStartSeq != got.Seq || st.ColdStartEpoch != got.Epoch {
		t.Errorf("status %+v (%v), want the cold starts' epoch %s and seq %d", st, err, got.Epoch, got.Seq)
	}

	// The step histograms are the fleet's with the default --per-app-metrics (counters): by step,
	// with no app label.
	mresp, err := http.Get("http://" + adminAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer mresp.Body.Close()
	body, err := io.ReadAll(mresp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for line := range strings.Lines(string(body)) {
		if strings.HasPrefix(line, "httpscale_interceptor_cold_start_step_seconds_count{") {
			steps = append(steps, strings.TrimSpace(line))
		}
	}
	if len(steps) == 0 || slices.ContainsFunc(steps, func(l string) bool { return strings.Contains(l, "app=") }) {
		t.Errorf("cold-start step series %q: want some, none with an app label", steps)
	}
}
