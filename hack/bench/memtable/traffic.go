package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// Traffic to every app (-traffic): each app gets a ready endpoint of its own (one address per app
// from -endpoint-cidr, which must be local to the network namespace the command runs in; the
// API server refuses loopback addresses in EndpointSlices) and one request through the
// interceptor, answered 200 by a backend in this process listening on every address of the range.

// trafficMode is how the apps answer: "keepalive" leaves connections open, so the interceptor pools
// one idle upstream connection per app (until its idle timeout); "close" answers with Connection:
// close, so what remains is the per-app state that outlives the request; "cold" gives the apps no
// endpoint at all, so each request is held and answered 504 at the readiness timeout (pass a short
// --readiness-timeout in -args), as for apps at zero whose wake fails.
type trafficMode string

// want is the status every request gets in mode m.
func (m trafficMode) want() int {
	if m == "cold" {
		return http.StatusGatewayTimeout
	}
	return http.StatusOK
}

// backendPort is where the backend listens on every address (and the EndpointSlices' port).
const backendPort = 8080

// startBackend serves 200 on 0.0.0.0:backendPort until ctx ends.
func startBackend(ctx context.Context, mode trafficMode) (func(), error) {
	ln, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", backendPort))
	if err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if mode == "close" {
			w.Header().Set("Connection", "close")
		}
		_, _ = io.WriteString(w, "ok\n")
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Shutdown(ctx) }, nil
}

// endpointIP is the address of app i in cidr.
func endpointIP(cidr netip.Prefix, i int) netip.Addr {
	a := cidr.Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v += uint32(i) + 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// createEndpoints gives every app of entries(n, k) one ready endpoint at endpointIP(cidr, i).
func createEndpoints(ctx context.Context, cs kubernetes.Interface, n, k int, cidr netip.Prefix) error {
	if n+2 > 1<<(32-cidr.Bits()) {
		return fmt.Errorf("-endpoint-cidr %s has too few addresses for %d apps", cidr, n)
	}
	for i := range k {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("app-%d", i)}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	work := make(chan int)
	errc := make(chan error, 1)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range work {
				es := &discoveryv1.EndpointSlice{
					ObjectMeta: metav1.ObjectMeta{
						Name: fmt.Sprintf("web-%d-bench", i), Namespace: fmt.Sprintf("app-%d", i%k),
						Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("web-%d", i)},
					},
					AddressType: discoveryv1.AddressTypeIPv4,
					Endpoints: []discoveryv1.Endpoint{{
						Addresses:  []string{endpointIP(cidr, i).String()},
						Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
					}},
					Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](backendPort)}},
				}
				_, err := cs.DiscoveryV1().EndpointSlices(es.Namespace).Create(ctx, es, metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					select {
					case errc <- fmt.Errorf("creating EndpointSlice of app %d: %w", i, err):
					default:
					}
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// requestEvery sends one GET to every app of entries(n, k) through the interceptor at proxyAddr,
// 64 at a time (256 for cold apps, whose requests wait for the readiness timeout), and fails unless
// every one is answered want.
func requestEvery(proxyAddr string, n, want int) (time.Duration, error) {
	conc := 64
	if want != http.StatusOK {
		conc = 256
	}
	hc := &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: conc}}
	defer hc.CloseIdleConnections()
	start := time.Now()
	var failed atomic.Int64
	var first atomic.Value
	work := make(chan int)
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for i := range work {
				req, _ := http.NewRequest(http.MethodGet, "http://"+proxyAddr+"/", nil)
				req.Host = fmt.Sprintf("web-%d.example.com", i)
				resp, err := hc.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != want {
						err = fmt.Errorf("app %d: %s", i, resp.Status)
					}
				}
				if err != nil {
					failed.Add(1)
					first.CompareAndSwap(nil, err.Error())
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return 0, fmt.Errorf("%d of %d requests failed, first: %v", f, n, first.Load())
	}
	return time.Since(start), nil
}

// scrape reads the admin port's /metrics and returns its size and its number of series, and those
// of httpscale_interceptor_ with an app label.
func scrape(adminAddr string) (bytes, series, appSeries int, err error) {
	text, err := getText("http://" + adminAddr + "/metrics")
	if err != nil {
		return 0, 0, 0, err
	}
	for _, l := range strings.Split(text, "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		series++
		if strings.HasPrefix(l, "httpscale_interceptor_") && strings.Contains(l, `app="`) {
			appSeries++
		}
	}
	return len(text), series, appSeries, nil
}
