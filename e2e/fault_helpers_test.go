//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// What the fault scenarios (fault_*_test.go) share: a client that sends requests at a steady rate and
// records what each one got, and a way to time and report the fault.

// shot is one request of a steadyLoad and what came of it.
type shot struct {
	rid        int
	sent, done time.Time
	status     int
	body       string // the start of the body of an answer that is not 200 (the interceptor's reason)
	coldStart  bool   // X-Httpscale-Cold-Start: true
	err        error
}

func (s shot) ok() bool { return s.err == nil && s.status == http.StatusOK }

func (s shot) String() string {
	what := fmt.Sprintf("%d %q", s.status, s.body)
	if s.err != nil {
		what = s.err.Error()
	}
	return fmt.Sprintf("rid %d sent %s took %s: %s", s.rid, s.sent.Format("15:04:05.000"), s.done.Sub(s.sent).Round(time.Millisecond), what)
}

// steadyLoad sends GET url (Host: host) every interval, each request on a new connection (so
// kube-proxy picks an endpoint of a Service for every one, as for independent clients) and bounded by
// timeout, and records every outcome. Requests carry ?rid=<n> so the sample app counts them.
type steadyLoad struct {
	mu    sync.Mutex
	shots []shot
	stop  context.CancelFunc
	done  chan struct{}
}

// startSteady starts a steadyLoad; stopSteady ends it and returns every request's outcome once the
// last one has finished.
func startSteady(ctx context.Context, url, host string, interval, timeout time.Duration) *steadyLoad {
	ctx, cancel := context.WithCancel(ctx)
	l := &steadyLoad{stop: cancel, done: make(chan struct{})}
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true,
	}}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	go func() {
		defer GinkgoRecover()
		defer close(l.done)
		var wg sync.WaitGroup
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for rid := 0; ctx.Err() == nil; rid++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// The request outlives a stop: what it gets is recorded, not cut off.
				s := getShot(context.WithoutCancel(ctx), hc, fmt.Sprintf("%s%srid=%d", url, sep, rid), host)
				s.rid = rid
				l.mu.Lock()
				l.shots = append(l.shots, s)
				l.mu.Unlock()
			}()
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		wg.Wait()
	}()
	return l
}

// stopSteady stops sending, waits for the requests still out and returns every outcome by rid.
func (l *steadyLoad) stopSteady() []shot {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	shots := slices.Clone(l.shots)
	slices.SortFunc(shots, func(a, b shot) int { return a.rid - b.rid })
	return shots
}

// getShot sends one GET and records its outcome.
func getShot(ctx context.Context, hc *http.Client, url, host string) shot {
	s := shot{sent: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		s.err, s.done = err, time.Now()
		return s
	}
	req.Host = host
	resp, err := hc.Do(req)
	if err == nil {
		var body []byte
		body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		s.status = resp.StatusCode
		s.coldStart = resp.Header.Get("X-Httpscale-Cold-Start") == "true"
		if s.status != http.StatusOK {
			s.body = strings.TrimSpace(string(body[:min(len(body), 120)]))
		}
	}
	s.err, s.done = err, time.Now()
	return s
}

// loadReport summarises shots: how many, how many failed (and the first failures), latency.
func loadReport(shots []shot) (failed []shot, summary string) {
	var lat []time.Duration
	for _, s := range shots {
		if !s.ok() {
			failed = append(failed, s)
		}
		lat = append(lat, s.done.Sub(s.sent))
	}
	if len(lat) == 0 {
		return failed, "no requests"
	}
	summary = fmt.Sprintf("%d requests, %d failed; latency p50 %s, p99 %s, max %s", len(shots), len(failed),
		percentile(lat, 50).Round(time.Millisecond), percentile(lat, 99).Round(time.Millisecond), slices.Max(lat).Round(time.Millisecond))
	return failed, summary
}

// firstShots lists at most n shots, one per line.
func firstShots(shots []shot, n int) string {
	var b strings.Builder
	for i, s := range shots {
		if i == n {
			fmt.Fprintf(&b, "... and %d more\n", len(shots)-n)
			break
		}
		b.WriteString(s.String() + "\n")
	}
	return b.String()
}

// report records a figure of a fault scenario in the spec's report and its output.
func report(name, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	AddReportEntry(name, text)
	fmt.Fprintf(GinkgoWriter, "[figure] %s: %s\n", name, text)
}

// serviceURL is the URL of path on the interceptor Service's ClusterIP.
func serviceURL(ip, path string) string {
	return fmt.Sprintf("http://%s:%d%s", ip, localcluster.ProxyPort, path)
}

// expectShotsOK fails with the failed shots listed.
func expectShotsOK(what string, shots []shot) {
	GinkgoHelper()
	failed, summary := loadReport(shots)
	Expect(failed).To(BeEmpty(), "%s: %s\n%s", what, summary, firstShots(failed, 20))
}

// statusOf returns a function that GETs url with Host host and returns the status code (for
// Eventually).
func statusOf(ctx context.Context, url, host string) func() (int, error) {
	return func() (int, error) {
		resp, err := f.Get(ctx, url, host)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
}

// heldApps is a set-up step for an outage: two apps at zero routed on short.<host> and long.<host>,
// whose readiness timeouts end during and after the outage, and one on after.<host> woken once it
// is over.
func heldApps(short, long time.Duration) func(SpecContext, *scenarioEnv) {
	return func(ctx SpecContext, e *scenarioEnv) {
		for name, ready := range map[string]time.Duration{"short": short, "long": long, "after": 0} {
			routedApp(ctx, e.ns, name, 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
				s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(name + "." + e.host)}
				s.ScaledownPeriod = ptr.To[int32](300)
				if ready > 0 {
					s.Timeouts = &httpscalev1alpha1.Timeouts{Readiness: ptr.To(httpscalev1alpha1.Duration(ready.String()))}
				}
			})
		}
	}
}

// sendHeld sends one request to each of the heldApps at zero through the interceptor Service, and
// returns where each one's outcome arrives.
func sendHeld(ctx context.Context, svc, host string) (short, long <-chan shot) {
	hc := &http.Client{Timeout: 4 * time.Minute, Transport: &http.Transport{DialContext: localcluster.DialContext(f.Cluster.NetNS)}}
	send := func(name string) <-chan shot {
		ch := make(chan shot, 1)
		go func() { ch <- getShot(ctx, hc, serviceURL(svc, "/held"), name+"."+host) }()
		return ch
	}
	return send("short"), send("long")
}

// expectHeld checks the heldApps' requests of an outage that ended at back: the short one answered
// 504 readiness_timeout at its timeout, the long one answered by the woken app after back.
func expectHeld(what string, short, long <-chan shot, shortReady, longReady time.Duration, back time.Time) {
	GinkgoHelper()
	s := <-short
	report(what+": held request, readiness timeout "+shortReady.String(), "%s", s)
	Expect(s.err).NotTo(HaveOccurred())
	Expect(s.status).To(Equal(http.StatusGatewayTimeout))
	Expect(s.body).To(ContainSubstring("readiness_timeout"))
	Expect(s.done.Sub(s.sent)).To(BeNumerically("~", shortReady, 3*time.Second), "answered at its readiness timeout")
	var l shot
	Eventually(long).WithTimeout(longReady).Should(Receive(&l))
	report(what+": held request, readiness timeout "+longReady.String(), "%s; answered %s after the fault ended", l, l.done.Sub(back).Round(time.Millisecond))
	Expect(l.ok()).To(BeTrue(), "%s", l)
	Expect(l.coldStart).To(BeTrue())
	Expect(l.done).To(BeTemporally(">", back), "woken only once the fault was over")
}
