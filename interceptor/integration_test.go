package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

const installNS = "httpscale-system"

// TestInterceptorAgainstAPIServer runs the interceptor binary against a real kube-apiserver: it reads
// the routing table from real ConfigMaps and ready endpoints from real EndpointSlices, holds a request
// for an app at zero, forwards it the moment the app's EndpointSlice turns ready, rejects requests
// over the app's queue limit, times out held requests, and keeps serving its last good table when the
// stored one is corrupted.
func TestInterceptorAgainstAPIServer(t *testing.T) {
	env, cs := apiServer(t)
	ctx := context.Background()

	// One real backend answers for the pod IP 198.18.0.10:8080.
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "web answered %s %s", r.Host, r.URL.Path)
	}))
	defer backend.Close()
	podAddr := "198.18.0.10:8080"
	var dialed sync.Map
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dialed.Store(addr, true)
		if addr != podAddr {
			return nil, fmt.Errorf("test dialer: no route to %s", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, backend.Listener.Addr().String())
	}

	writeTable(t, cs, []routing.Entry{
		{Namespace: "shop", Name: "web", Hosts: []string{"web.example.com"}, Service: "web", Port: 80, PortName: "http"},
		{Namespace: "shop", Name: "tiny", Hosts: []string{"tiny.example.com"}, Service: "tiny", Port: 80, PortName: "http",
			Timeouts:  routing.Timeouts{Readiness: 1500 * time.Millisecond},
			ColdStart: routing.ColdStart{QueueLimit: 1}},
	})

	kubeconfig, err := testenv.WriteKubeconfig(env, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	proxyAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	startRun(t, []string{
		"--kubeconfig=" + kubeconfig, "--health-probe-bind-address=" + testenv.FreeAddr(t),
		"--proxy-bind-address=" + proxyAddr, "--admin-bind-address=" + adminAddr,
		"--namespace=" + installNS, "--drain-delay=0", "--drain-timeout=5s", "--table-resync=2s",
	}, runOptions{dial: dial})

	status := func() admin.Status {
		var st admin.Status
		resp, err := http.Get("http://" + adminAddr + admin.PathStatus)
		if err != nil {
			return st
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&st)
		return st
	}
	testenv.Eventually(t, 60*time.Second, "the interceptor serves a 2-app table and is ready", func() bool {
		resp, err := http.Get("http://" + adminAddr + admin.PathReadyz)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && status().TableEntries == 2
	})
	version := status().TableVersion

	// Unknown host: 404, nothing dialled.
	if code, body, _ := get(proxyAddr, "nope.example.com", "/"); code != http.StatusNotFound {
		t.Errorf("unknown host: %d %q, want 404", code, body)
	}

	// web is at zero: the request is held, counted, and answered once its EndpointSlice turns ready.
	held := getAsync(proxyAddr, "web.example.com:8080", "/cart")
	testenv.Eventually(t, 10*time.Second, "the held request shows in /counts", func() bool {
		c := appCount(adminAddr, "shop/web")
		return c.Held == 1 && c.Requests == 1
	})
	select {
	case r := <-held:
		t.Fatalf("request answered before the app had an endpoint: %d %q", r.code, r.body)
	case <-time.After(300 * time.Millisecond):
	}
	readyAt := time.Now()
	createSlice(t, cs, "shop", "web", "198.18.0.10", 8080, true)
	select {
	case r := <-held:
		if r.code != http.StatusOK || r.body != "web answered web.example.com:8080 /cart" || r.hdr.Get(proxy.HeaderColdStart) != "true" {
			t.Errorf("held request: %d %q cold=%q, want 200 from the backend with the cold-start header", r.code, r.body, r.hdr.Get(proxy.HeaderColdStart))
		}
		t.Logf("held request answered %s after the EndpointSlice was created", time.Since(readyAt))
	case <-time.After(20 * time.Second):
		t.Fatal("held request not answered within 20s of its endpoint turning ready")
	}
	if code, body, hdr := get(proxyAddr, "WEB.example.com", "/"); code != http.StatusOK || hdr.Get(proxy.HeaderColdStart) != "" {
		t.Errorf("warm request: %d %q cold=%q, want 200 without the cold-start header", code, body, hdr.Get(proxy.HeaderColdStart))
	}

	// tiny holds at most one request; the second gets 503 + Retry-After, the first 504 after 1.5s.
	first := getAsync(proxyAddr, "tiny.example.com", "/")
	testenv.Eventually(t, 10*time.Second, "the first request to tiny is held", func() bool {
		return appCount(adminAddr, "shop/tiny").Held == 1
	})
	code, body, hdr := get(proxyAddr, "tiny.example.com", "/")
	if code != http.StatusServiceUnavailable {
		t.Errorf("request over tiny's queue limit of 1: %d %q, want 503", code, body)
	}
	if hdr.Get("Retry-After") == "" {
		t.Errorf("queue-full 503 has no Retry-After header")
	}
	select {
	case r := <-first:
		if r.code != http.StatusGatewayTimeout {
			t.Errorf("held request past the readiness timeout: %d %q, want 504", r.code, r.body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("held request not answered after the readiness timeout")
	}

	// A corrupt table is not served: the interceptor keeps the last good one and still routes.
	head, err := cs.CoreV1().ConfigMaps(installNS).Get(ctx, routing.DefaultBaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	head.Data[routing.ManifestKey] = "{not json"
	if _, err := cs.CoreV1().ConfigMaps(installNS).Update(ctx, head, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // past a watch event and a timed re-read
	if st := status(); st.TableVersion != version {
		t.Errorf("after a corrupt table: serving %q, want the last good %q", st.TableVersion, version)
	}
	if code, _, _ := get(proxyAddr, "web.example.com", "/"); code != http.StatusOK {
		t.Errorf("after a corrupt table: web answered %d, want 200", code)
	}
	dialed.Range(func(k, _ any) bool {
		if k.(string) != podAddr {
			t.Errorf("dialled %v, which no routing entry names", k)
		}
		return true
	})
}

// apiServer starts an API server for the test with the install namespace and "shop".
func apiServer(t *testing.T) (*envtest.Environment, kubernetes.Interface) {
	t.Helper()
	env, cfg, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs := kubernetes.NewForConfigOrDie(cfg)
	for _, ns := range []string{installNS, "shop"} {
		if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return env, cs
}

func writeTable(t *testing.T, cs kubernetes.Interface, entries []routing.Entry) {
	t.Helper()
	tbl, err := routing.NewTable(entries)
	if err != nil {
		t.Fatal(err)
	}
	m, shards, err := routing.Encode(tbl, 512<<10)
	if err != nil {
		t.Fatal(err)
	}
	head, cms := routing.ToConfigMaps(installNS, routing.DefaultBaseName, m, shards)
	for _, cm := range append(cms, head) {
		if _, err := cs.CoreV1().ConfigMaps(installNS).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func createSlice(t *testing.T, cs kubernetes.Interface, ns, svc, ip string, port int32, ready bool) {
	t.Helper()
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-1", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready)},
			Zone:       ptr.To("zone-a"),
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), es, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func get(proxyAddr, host, path string) (int, string, http.Header) {
	req, _ := http.NewRequest(http.MethodGet, "http://"+proxyAddr+path, nil)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), resp.Header
}

// startRun runs the interceptor with args until the returned stop is called or the test ends; stop
// cancels it like SIGTERM and fails the test unless run returns nil within 30s. stop is idempotent.
func startRun(t *testing.T, args []string, o runOptions) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, o) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("interceptor exited with %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("interceptor did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// response is what get returned.
type response struct {
	code int
	body string
	hdr  http.Header
}

// getAsync sends get in the background (a request that is held) and delivers its response.
func getAsync(proxyAddr, host, path string) <-chan response {
	ch := make(chan response, 1)
	go func() {
		code, body, hdr := get(proxyAddr, host, path)
		ch <- response{code, body, hdr}
	}()
	return ch
}

// appCount reads one app's counters from the admin port (zero when absent or unreachable).
func appCount(adminAddr, key string) admin.AppCount {
	var c admin.Counts
	resp, err := http.Get("http://" + adminAddr + admin.PathCounts)
	if err != nil {
		return admin.AppCount{}
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&c)
	for _, a := range c.Apps {
		if a.Key == key {
			return a
		}
	}
	return admin.AppCount{}
}
