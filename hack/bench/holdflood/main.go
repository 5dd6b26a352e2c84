// Command holdflood is the load run of the interceptor's bound on held requests: an outside client
// holds requests with large heads against apps at zero while another app's warm traffic goes on. It
// starts the interceptor binary in standalone mode on loopback (cold apps without endpoints, one warm
// app served by a backend in this process), measures the warm app's throughput and latency before
// and during the flood, and reports the interceptor's resident memory (VmRSS, sampled every 50 ms,
// and VmHWM), what it holds (/counts) and how the flood's requests were answered.
//
//	go build -o /tmp/interceptor ./interceptor
//	go run ./hack/bench/holdflood -interceptor /tmp/interceptor -apps 3 -conns 3000 -head 100KiB
//	go run ./hack/bench/holdflood -interceptor /tmp/interceptor -args "--max-held-bytes=0 --max-held-requests=0 --max-header-bytes=1MiB"
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "holdflood:", err)
		os.Exit(1)
	}
}

type options struct {
	bin       string
	apps      int
	conns     int
	head      int
	extra     string
	warmConns int
	warmFor   time.Duration
	settle    time.Duration
	dialers   int
	heap      string
	late      int
	unended   bool
}

func run() error {
	var o options
	var head string
	flag.StringVar(&o.bin, "interceptor", "", "interceptor binary (go build -o ... ./interceptor)")
	flag.IntVar(&o.apps, "apps", 3, "cold apps the flood spreads over")
	flag.IntVar(&o.conns, "conns", 3000, "flood connections, each holding one request")
	flag.StringVar(&head, "head", "100KiB", "header bytes per flood request (B, KiB or MiB)")
	flag.StringVar(&o.extra, "args", "", "extra interceptor flags, space-separated")
	flag.IntVar(&o.warmConns, "warm-conns", 8, "keep-alive connections of the warm app's client")
	flag.DurationVar(&o.warmFor, "warm", 5*time.Second, "length of each warm measurement")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "wait after the flood is sent before the memory is read")
	flag.IntVar(&o.dialers, "dialers", 64, "goroutines opening flood connections")
	flag.BoolVar(&o.unended, "unended", false, "send each flood head without its final empty line (a slow client that never finishes its head)")
	flag.IntVar(&o.late, "late", 0, "after the flood, hold this many requests (small heads) for another cold app and report how many it got")
	flag.StringVar(&o.heap, "heap", "", "write a heap profile of the interceptor taken while the flood is held to this file")
	flag.Parse()
	if o.bin == "" {
		return errors.New("-interceptor is required")
	}
	n, err := parseSize(head)
	if err != nil {
		return err
	}
	o.head = n

	backend, err := startBackend()
	if err != nil {
		return err
	}
	defer backend.Close()
	dir, err := os.MkdirTemp("", "holdflood")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	proxyAddr, adminAddr := freeAddr(), freeAddr()
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte(routesFile(o.apps, backend.Addr().String())), 0o600); err != nil {
		return err
	}
	args := []string{"--standalone=" + routes, "--proxy-bind-address=" + proxyAddr, "--admin-bind-address=" + adminAddr,
		"--readiness-timeout=10m", "--drain-delay=0s", "--drain-timeout=1s"}
	pprofAddr := ""
	if o.heap != "" {
		pprofAddr = freeAddr()
		args = append(args, "--pprof-bind-address="+pprofAddr)
	}
	args = append(args, strings.Fields(o.extra)...)
	cmd := exec.Command(o.bin, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", o.bin, err)
	}
	pid := cmd.Process.Pid
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()
	if err := waitReady("http://" + adminAddr); err != nil {
		return err
	}
	fmt.Printf("interceptor pid %d, flags %s\n", pid, strings.Join(args[3:], " "))
	fmt.Printf("flood: %d connections over %d cold apps, %d header bytes each\n", o.conns, o.apps, o.head)
	fmt.Printf("load average at start: %s\n", loadavg())

	cpu0 := cpuTicks(pid)
	base := warm(proxyAddr, o.warmConns, o.warmFor)
	base.cpu = cpuTicks(pid) - cpu0
	rssBefore, _ := rss(pid)
	fmt.Printf("before:  RSS %s  warm %s\n", mib(rssBefore), base)

	f := newFlood(proxyAddr, o)
	peak := &peakRSS{pid: pid}
	stopPeak := peak.run(50 * time.Millisecond)
	sendStart := time.Now()
	var sending warmResult
	sent := make(chan struct{})
	go func() { // the warm app's traffic while the flood's requests arrive
		sending = warm(proxyAddr, o.warmConns, o.warmFor)
		close(sent)
	}()
	f.send()
	sendTook := time.Since(sendStart)
	<-sent
	fmt.Printf("sending: the flood written in %s; warm %s (%.2f x before)\n", sendTook.Round(time.Millisecond), sending, sending.rate/base.rate)
	// Wait until the interceptor has read every head: what it holds plus what it answered stops
	// changing.
	time.Sleep(o.settle)
	held := heldTotal("http://" + adminAddr)
	cpu1 := cpuTicks(pid)
	during := warm(proxyAddr, o.warmConns, o.warmFor)
	during.cpu = cpuTicks(pid) - cpu1
	stopPeak()
	rssDuring, hwm := rss(pid)
	codes := f.codes()
	if o.heap != "" {
		if err := saveHeap("http://"+pprofAddr+"/debug/pprof/heap", o.heap); err != nil {
			return err
		}
	}
	fmt.Printf("held:    RSS %s (peak sampled %s, VmHWM %s)  held %d  answers %s\n",
		mib(rssDuring), mib(peak.max.Load()), mib(hwm), held, codes)
	fmt.Printf("         warm %s (%.2f x before)\n", during, during.rate/base.rate)
	if o.late > 0 {
		lf := newFlood(proxyAddr, options{apps: 1, conns: o.late, head: 512, dialers: 8})
		lf.host = "late.localhost"
		lf.send()
		time.Sleep(o.settle)
		fmt.Printf("late app: %d requests sent; answers %s; the flood's answers now %s; held in all %d\n", o.late, lf.codes(), f.codes(), heldTotal("http://"+adminAddr))
		defer lf.close()
	}
	perHeld := float64(rssDuring-rssBefore) / float64(max(held, 1))
	fmt.Printf("per held request: %.1f KiB resident above the start\n", perHeld/1024)
	f.close()
	time.Sleep(time.Second)
	rssAfter, _ := rss(pid)
	fmt.Printf("after:   RSS %s  held %d\n", mib(rssAfter), heldTotal("http://"+adminAddr))
	fmt.Printf("load average at the end: %s\n", loadavg())
	return nil
}

func routesFile(apps int, backend string) string {
	var b strings.Builder
	for i := range apps {
		fmt.Fprintf(&b, `apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata: {name: cold-%d, namespace: tenant-%d}
spec:
  hosts: [cold-%d.localhost]
  scaleTargetRef: {name: cold, service: cold, port: 80}
  coldStart: {queueLimit: 100000}
---
`, i, i, i)
	}
	fmt.Fprintf(&b, `apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata: {name: late, namespace: late}
spec:
  hosts: [late.localhost]
  scaleTargetRef: {name: late, service: late, port: 80}
---
`)
	fmt.Fprintf(&b, `apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata:
  name: warm
  namespace: warm
  annotations:
    standalone.httpscale.dev/endpoints: %q
spec:
  hosts: [warm.localhost]
  scaleTargetRef: {name: warm, service: warm, port: 80}
`, backend)
	return b.String()
}

func startBackend() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "2")
			_, _ = io.WriteString(w, "ok")
		}))
	}()
	return ln, nil
}

// flood holds one request per connection.
type flood struct {
	host  string // Host of every request; "" spreads them over cold-<i>.localhost
	addr  string
	o     options
	mu    sync.Mutex
	conns []net.Conn
	tally map[string]int
	wg    sync.WaitGroup
}

func newFlood(addr string, o options) *flood {
	return &flood{addr: addr, o: o, tally: map[string]int{}}
}

// request returns a GET to app i whose head is about size bytes: header lines of at most 8 KiB.
func request(i, size int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "GET /flood HTTP/1.1\r\nHost: cold-%d.localhost\r\nUser-Agent: holdflood\r\n", i)
	for n := 0; b.Len()+4 < size; n++ {
		line := min(8<<10, size-b.Len()-4)
		name := "X-Pad-" + strconv.Itoa(n) + ": "
		if line <= len(name)+3 {
			break
		}
		b.WriteString(name)
		b.WriteString(strings.Repeat("a", line-len(name)-2))
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

func (f *flood) send() {
	reqs := make([][]byte, f.o.apps)
	for i := range reqs {
		reqs[i] = request(i, f.o.head)
		if f.host != "" {
			reqs[i] = []byte(strings.Replace(string(reqs[i]), fmt.Sprintf("cold-%d.localhost", i), f.host, 1))
		}
		if f.o.unended {
			reqs[i] = reqs[i][:len(reqs[i])-2]
		}
	}
	next := atomic.Int64{}
	var wg sync.WaitGroup
	for range f.o.dialers {
		wg.Go(func() {
			for {
				k := int(next.Add(1)) - 1
				if k >= f.o.conns {
					return
				}
				c, err := net.Dial("tcp", f.addr)
				if err != nil {
					f.record("dial error")
					continue
				}
				if _, err := c.Write(reqs[k%f.o.apps]); err != nil {
					f.record("write error")
					_ = c.Close()
					continue
				}
				f.mu.Lock()
				f.conns = append(f.conns, c)
				f.mu.Unlock()
				f.wg.Go(func() { f.await(c) })
			}
		})
	}
	wg.Wait()
}

// await records the status the connection's request is answered with, if any before close.
func (f *flood) await(c net.Conn) {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return // closed by close() while held, or by the interceptor
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	_ = resp.Body.Close()
	what := strconv.Itoa(resp.StatusCode)
	if _, reason, ok := strings.Cut(strings.TrimSpace(string(body)), ": "); ok && resp.StatusCode >= 500 {
		what += " " + reason
	}
	f.record(what)
}

func (f *flood) record(what string) {
	f.mu.Lock()
	f.tally[what]++
	f.mu.Unlock()
}

func (f *flood) codes() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.tally))
	for k := range f.tally {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, f.tally[k]))
	}
	if len(parts) == 0 {
		return "none yet"
	}
	return strings.Join(parts, " ")
}

func (f *flood) close() {
	f.mu.Lock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// warmResult is one warm measurement.
type warmResult struct {
	n, errs  int
	cpu      int64 // the interceptor's CPU clock ticks during the measurement
	rate     float64
	p50, p99 time.Duration
}

func (w warmResult) String() string {
	s := fmt.Sprintf("%.0f req/s, p50 %s, p99 %s, %d errors", w.rate, w.p50.Round(10*time.Microsecond), w.p99.Round(10*time.Microsecond), w.errs)
	if w.cpu > 0 && w.n > 0 {
		s += fmt.Sprintf(", interceptor CPU %.0f µs/request", float64(w.cpu)*1e4/float64(w.n)) // 100 ticks a second
	}
	return s
}

// warm sends requests to the warm app on conns keep-alive connections for d.
func warm(addr string, conns int, d time.Duration) warmResult {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			var mine []time.Duration
			bad := 0
			for time.Now().Before(end) {
				req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/", nil)
				req.Host = "warm.localhost"
				t := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					bad++
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					bad++
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lat)
	r := warmResult{n: len(lat), errs: errs, rate: float64(len(lat)) / d.Seconds()}
	if len(lat) > 0 {
		r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return r
}

// peakRSS samples a process's VmRSS.
type peakRSS struct {
	pid int
	max atomic.Int64
}

func (p *peakRSS) run(every time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v, _ := rss(p.pid); v > p.max.Load() {
				p.max.Store(v)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// rss returns VmRSS and VmHWM of pid in bytes.
func rss(pid int) (cur, hwm int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = v << 10
		case "VmHWM:":
			hwm = v << 10
		}
	}
	return cur, hwm
}

// cpuTicks returns the user and system clock ticks pid used so far.
func cpuTicks(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return u + k
}

func heldTotal(adminURL string) int64 {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := admin.Client{}.Counts(ctx, adminURL, 0, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "reading the held count:", err)
		return -1
	}
	var n int64
	for _, a := range c.Apps {
		n += a.Held
	}
	return n
}

func waitReady(adminURL string) error {
	for range 200 {
		resp, err := http.Get(adminURL + admin.PathReadyz)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return errors.New("interceptor never became ready")
}

func saveHeap(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("heap profile: %w", err)
	}
	return os.WriteFile(file, b, 0o600)
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func parseSize(s string) (int, error) {
	mult := 1
	switch {
	case strings.HasSuffix(s, "MiB"):
		mult, s = 1<<20, strings.TrimSuffix(s, "MiB")
	case strings.HasSuffix(s, "KiB"):
		mult, s = 1<<10, strings.TrimSuffix(s, "KiB")
	case strings.HasSuffix(s, "B"):
		s = strings.TrimSuffix(s, "B")
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("size %q: want a number of B, KiB or MiB", s)
	}
	return n * mult, nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
