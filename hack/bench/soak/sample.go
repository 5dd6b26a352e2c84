package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/routing"
)

// sample is one reading of one process.
type sample struct {
	at         time.Time
	component  string // operator, interceptor, scaler, keda-operator, kube-apiserver
	name       string // the pod's name, or the process's
	rssMiB     float64
	goroutines float64 // -1: not known (a process without /metrics)
	fds        float64
	restarts   int
	table      string // routing-table version served (interceptors) or written (operator)
}

// sampler reads every component's figures.
type sampler struct {
	f   *framework.Framework
	log func(string, ...any)
	hc  *http.Client

	mu      sync.Mutex
	samples []sample
}

// adminGet GETs url from an interceptor's admin port with the fleet's token.
func (s *sampler) adminGet(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	tok, err := s.f.FleetToken(ctx) // the interceptors' admin port answers 401 without it
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	return s.hc.Do(req)
}

func newSampler(f *framework.Framework, log func(string, ...any)) *sampler {
	return &sampler{f: f, log: log, hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true,
	}}}
}

// metricsPorts are where each component serves /metrics (the chart's defaults).
var metricsPorts = map[string]int{"operator": localcluster.OperatorMetrics, "interceptor": localcluster.InterceptorAdmin, "scaler": localcluster.ScalerMetricsPort}

// loop samples every period until ctx ends.
func (s *sampler) loop(ctx context.Context, period time.Duration) {
	for {
		s.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
	}
}

func (s *sampler) sampleOnce(ctx context.Context) {
	now := time.Now()
	head := s.headVersion(ctx)
	var got []sample
	for _, comp := range localcluster.Components {
		pods, err := s.f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component="+comp)
		if err != nil {
			s.log("listing %s pods: %v", comp, err)
			continue
		}
		for _, p := range pods {
			if p.Deleting || p.IP == "" {
				continue
			}
			m, err := s.metrics(ctx, p.IP, metricsPorts[comp], comp == "interceptor")
			if err != nil {
				s.log("reading the metrics of %s: %v", p.Name, err)
				continue
			}
			sm := sample{at: now, component: comp, name: p.Name, rssMiB: m["process_resident_memory_bytes"] / (1 << 20),
				goroutines: m["go_goroutines"], fds: m["process_open_fds"], restarts: p.Restarts}
			switch comp {
			case "interceptor":
				sm.table = s.servedVersion(ctx, p.IP)
			case "operator":
				sm.table = head
			}
			got = append(got, sm)
		}
	}
	for _, name := range []string{"kube-apiserver", "keda-operator"} {
		if p, err := s.f.Cluster.Process(name); err == nil {
			if rss, fds, err := procFigures(p.PID); err == nil {
				got = append(got, sample{at: now, component: name, name: name, rssMiB: rss, goroutines: -1, fds: fds})
			}
		}
	}
	s.mu.Lock()
	s.samples = append(s.samples, got...)
	s.mu.Unlock()
}

// metrics reads the unlabelled series of a /metrics page.
// withToken: the interceptor's admin port, which wants the fleet's token.
func (s *sampler) metrics(ctx context.Context, ip string, port int, withToken bool) (map[string]float64, error) {
	url := fmt.Sprintf("http://%s:%d/metrics", ip, port)
	var resp *http.Response
	var err error
	if withToken {
		resp, err = s.adminGet(ctx, url)
	} else {
		var req *http.Request
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, url, nil); err == nil {
			resp, err = s.hc.Do(req)
		}
	}
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out, sc.Err()
}

// servedVersion is the routing-table version an interceptor serves.
func (s *sampler) servedVersion(ctx context.Context, ip string) string {
	resp, err := s.adminGet(ctx, fmt.Sprintf("http://%s:%d%s", ip, localcluster.InterceptorAdmin, admin.PathStatus))
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st admin.Status
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st) != nil {
		return ""
	}
	return st.TableVersion
}

// headVersion is the version of the routing table the operator last wrote.
func (s *sampler) headVersion(ctx context.Context) string {
	var cm corev1.ConfigMap
	if err := s.f.Client.Get(ctx, client.ObjectKey{Namespace: localcluster.Namespace, Name: routing.DefaultBaseName}, &cm); err != nil {
		return ""
	}
	return cm.Annotations[routing.AnnotationVersion]
}

// procFigures reads a process's resident memory (MiB) and open file descriptors.
func procFigures(pid int) (rssMiB, fds float64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			rssMiB = kb / 1024
		}
	}
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return rssMiB, float64(len(entries)), err
}

func (s *sampler) all() []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sample(nil), s.samples...)
}

// writeCSV writes the samples.
func writeCSV(path string, samples []sample) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	_ = w.Write([]string{"time", "component", "name", "rss_mib", "goroutines", "open_fds", "restarts", "table_version"})
	for _, s := range samples {
		_ = w.Write([]string{s.at.UTC().Format(time.RFC3339), s.component, s.name, fmt.Sprintf("%.1f", s.rssMiB),
			fmt.Sprintf("%.0f", s.goroutines), fmt.Sprintf("%.0f", s.fds), strconv.Itoa(s.restarts), s.table})
	}
	w.Flush()
	return w.Error()
}

// writeRequests writes every failed request and, per minute and kind, the requests and failures.
func writeRequests(path string, r results) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	_ = w.Write([]string{"minute", "kind", "requests", "failed", "max_ms", "failure"})
	type key struct {
		minute int
		kind   string
	}
	counts := map[key][3]int64{}
	var keys []key
	for _, q := range r.reqs {
		k := key{int(q.sent.Sub(r.start).Minutes()), q.kind}
		c, seen := counts[k]
		if !seen {
			keys = append(keys, k)
		}
		c[0]++
		if !q.ok() {
			c[1]++
			_ = w.Write([]string{strconv.Itoa(k.minute), q.kind, "", "", strconv.FormatInt(q.took.Milliseconds(), 10),
				fmt.Sprintf("%s %s at %s: %d %s", q.kind, q.app, q.sent.UTC().Format("15:04:05.000"), q.status, q.err)})
		}
		c[2] = max(c[2], q.took.Milliseconds())
		counts[k] = c
	}
	for _, k := range keys {
		c := counts[k]
		_ = w.Write([]string{strconv.Itoa(k.minute), k.kind, strconv.FormatInt(c[0], 10), strconv.FormatInt(c[1], 10), strconv.FormatInt(c[2], 10), ""})
	}
	w.Flush()
	return w.Error()
}
