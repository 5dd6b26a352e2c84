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
