package coldstart

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
)

func TestPlanFor(t *testing.T) {
	http8000 := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}
	container := func(name string, rp *corev1.Probe) corev1.Container {
		return corev1.Container{Name: name, ReadinessProbe: rp,
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8000}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}}
	}
	for _, tc := range []struct {
		name       string
		containers []corev1.Container
		sidecars   []corev1.Container
		override   *routing.Probe
		want       plan
		err        string
	}{
		{
			name:       "an HTTP probe on a named port",
			containers: []corev1.Container{container("app", &corev1.Probe{ProbeHandler: http8000})},
			want:       plan{checks: []check{{port: 8000, path: "/ready"}}, threshold: 1, timeout: time.Second, desc: "httpGet :8000/ready (the pod's readiness probe)"},
		},
		{
			name: "HTTPS, headers, a path without a slash, threshold and timeout; the probe's host is ignored",
			containers: []corev1.Container{container("app", &corev1.Probe{
				ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Host: "10.0.0.1", Path: "healthz", Port: intstr.FromInt32(8443), Scheme: corev1.URISchemeHTTPS,
					HTTPHeaders: []corev1.HTTPHeader{{Name: "X-Probe", Value: "1"}},
				}},
				SuccessThreshold: 2, TimeoutSeconds: 3,
			})},
			want: plan{checks: []check{{https: true, port: 8443, path: "/healthz", headers: [][2]string{{"X-Probe", "1"}}}}, threshold: 2, timeout: time.Second,
				desc: "httpGet https :8443/healthz (the pod's readiness probe)"},
		},
		{
			name: "every container's probe, sidecars too; containers without one are skipped",
			containers: []corev1.Container{
				container("app", &corev1.Probe{ProbeHandler: http8000}),
				container("plain", nil),
			},
			sidecars: []corev1.Container{{Name: "proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(15000)}}}}},
			want: plan{checks: []check{{port: 8000, path: "/ready"}, {tcp: true, port: 15000}}, threshold: 1, timeout: time.Second,
				desc: "httpGet :8000/ready, tcpSocket :15000 (the pod's readiness probe)"},
		},
		{
			name:       "the object's probe replaces the pod's",
			containers: []corev1.Container{container("app", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{}}})},
			override:   &routing.Probe{TCP: true, Port: 9000},
			want:       plan{checks: []check{{tcp: true, port: 9000}}, threshold: 1, timeout: time.Second, desc: "tcpSocket :9000 (spec.coldStart.probe)"},
		},
		{
			name:       "no readiness probe: nothing to gain",
			containers: []corev1.Container{container("app", nil)},
			err:        "no container has a readiness probe",
		},
		{
			name:       "a gRPC probe",
			containers: []corev1.Container{container("app", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{GRPC: &corev1.GRPCAction{Port: 9000}}})},
			err:        "container app: a gRPC readiness probe",
		},
		{
			name: "a port name the container does not declare (or a UDP one)",
			containers: []corev1.Container{container("app", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{
				TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromString("dns")}}})},
			err: `port "dns" is not a TCP port`,
		},
		{
			name: "too many headers",
			containers: []corev1.Container{container("app", &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Port: intstr.FromInt32(80), HTTPHeaders: make([]corev1.HTTPHeader, 17)}}})},
			err: "more than 16 headers",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: tc.containers, InitContainers: tc.sidecars}}
			got, err := planFor(pod, tc.override, time.Second)
			if tc.err != "" {
				if !errors.Is(err, errNoProbe) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got, cmp.AllowUnexported(plan{}, check{})); d != "" {
				t.Errorf("plan (-want +got):\n%s", d)
			}
		})
	}
}

func TestCheckPod(t *testing.T) {
	pod := appPod("ns", "a", "198.18.0.7", time.Now())
	pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: "2001:db8::7"})
	ep := endpointOf(pod)
	if err := checkPod(pod, ep); err != nil {
		t.Fatal(err)
	}
	v6 := ep
	v6.IP = "2001:db8::7"
	if err := checkPod(pod, v6); err != nil {
		t.Errorf("second pod IP: %v", err)
	}
	for name, change := range map[string]func(*corev1.Pod, *endpoints.Endpoint){
		"terminating":  func(p *corev1.Pod, _ *endpoints.Endpoint) { p.DeletionTimestamp = ptr.To(metav1.Now()) },
		"host network": func(p *corev1.Pod, _ *endpoints.Endpoint) { p.Spec.HostNetwork = true },
		"elsewhere":    func(_ *corev1.Pod, e *endpoints.Endpoint) { e.IP = "169.254.169.254" },
		"no IP yet":    func(p *corev1.Pod, _ *endpoints.Endpoint) { p.Status.PodIP, p.Status.PodIPs = "", nil },
		"another UID":  func(_ *corev1.Pod, e *endpoints.Endpoint) { e.PodUID = "x" },
	} {
		p, e := pod.DeepCopy(), ep
		change(p, &e)
		if err := checkPod(p, e); !errors.Is(err, errNoProbe) {
			t.Errorf("%s: checkPod = %v, want a refusal", name, err)
		}
	}
}

// A real HTTP probe on loopback: it goes to the address it was given with the pod's Host, follows
// no redirect, ignores the environment's proxy, passes on 200-399 and fails otherwise.
func TestProbeClient(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1") // must not be used
	var last atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		last.Store(r.Host + " " + r.URL.Path + " " + r.Header.Get("X-Probe") + " " + r.UserAgent())
		switch r.URL.Path {
		case "/ok":
		case "/redirect":
			http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
		case "/slow":
			time.Sleep(2 * time.Second)
		default:
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	host, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	pc := newProbeClient(nil)
	ctx := context.Background()
	hdr := [][2]string{{"X-Probe", "yes"}}
	if err := pc.run(ctx, host, check{port: int32(port), path: "/ok", headers: hdr}, time.Second); err != nil {
		t.Fatalf("probe of /ok: %v", err)
	}
	if got, want := last.Load(), srv.Listener.Addr().String()+" /ok yes httpscale-coldstart-probe"; got != want {
		t.Errorf("server saw %q, want %q", got, want)
	}
	if err := pc.run(ctx, host, check{port: int32(port), path: "/redirect"}, time.Second); err != nil {
		t.Errorf("a redirect is a pass (not followed): %v", err)
	}
	if err := pc.run(ctx, host, check{port: int32(port), path: "/warming"}, time.Second); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("503: %v", err)
	}
	start := time.Now()
	if err := pc.run(ctx, host, check{port: int32(port), path: "/slow"}, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("slow: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a probe with a 200ms timeout took %v", d)
	}
	if err := pc.run(ctx, host, check{tcp: true, port: int32(port)}, time.Second); err != nil {
		t.Errorf("tcp: %v", err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := pc.run(ctx, host, check{tcp: true, port: int32(closed)}, time.Second); err == nil {
		t.Error("tcp probe of a closed port passed")
	}
}

// BenchmarkProbe is one probe of a pod on loopback: a new connection, GET, answer (HTTP), or a
// connection opened and closed (TCP).
func BenchmarkProbe(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	host, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	pc := newProbeClient(nil)
	for _, c := range []check{{port: int32(port), path: "/ready"}, {tcp: true, port: int32(port)}} {
		b.Run(strings.Fields(c.String())[0], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := pc.run(context.Background(), host, c, time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
