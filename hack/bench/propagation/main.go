// Command propagation measures how long one new HTTPScaledObject takes to become routable when N
// objects already exist: it starts a real kube-apiserver (envtest, with httpscale's and KEDA's CRDs),
// runs the real operator binary (--kubeconfig, no leader election, no webhook) and one real
// interceptor binary, creates N HTTPScaledObjects and waits until the interceptor serves all of them,
// then, S times, creates one more object and measures:
//
//   - shard: object created → a watch of this process sees the new table's shard ConfigMap created
//     (the operator's reconcile, TableWriter.Set, building and encoding the table, the create);
//   - head: … sees the head ConfigMap with the new version (the update that publishes the table);
//   - routed: object created → the interceptor's admin /status shows the table with the new entry
//     (polled every -poll, 2 ms by default: the watch event, fetching shards, decoding, the swap).
//
// Objects share one Deployment and Service per namespace (the operator only needs them to exist).
// Sizes are cumulative: -n 1000,10000 creates 1,000 objects, measures, then 9,000 more.
//
// With -burst B it then creates B plain ConfigMaps with the same client and parallelism (the API
// server's own write throughput: the floor), then B objects at once, and reports when the
// interceptor routed all of them, counted from the last create. It prints the operator's and the
// interceptor's resident memory after each size and after the burst.
//
//	go run ./hack/bench/propagation -n 1000,10000 -samples 10 -burst 10000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

const installNS = "httpscale-system"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "propagation:", err)
		os.Exit(1)
	}
}

type config struct {
	sizes      []int
	samples    int
	namespaces int
	workers    int
	poll       time.Duration
	gap        time.Duration
	settle     time.Duration
	fillWait   time.Duration
	burst      int
	burstWork  int
}

func run() error {
	var c config
	ns := flag.String("n", "1000,10000", "comma-separated numbers of existing objects (cumulative, ascending)")
	flag.IntVar(&c.samples, "samples", 10, "new objects measured per N")
	flag.IntVar(&c.namespaces, "namespaces", 10, "objects are spread over this many namespaces")
	flag.IntVar(&c.workers, "workers", 8, "parallel creates while filling to N")
	flag.DurationVar(&c.poll, "poll", 2*time.Millisecond, "interval of the interceptor /status poll")
	flag.DurationVar(&c.gap, "gap", time.Second, "pause between samples (the writer is idle again after its debounce)")
	flag.DurationVar(&c.settle, "settle", 5*time.Second, "pause after N objects are routed, before the first sample")
	flag.DurationVar(&c.fillWait, "fill-timeout", 20*time.Minute, "bound for routing N objects")
	flag.IntVar(&c.burst, "burst", 0, "after the samples, create this many objects at once and time until all are routed (0: no burst)")
	flag.IntVar(&c.burstWork, "burst-workers", 16, "parallel creates of the burst (and of its ConfigMap floor)")
	opBin := flag.String("operator", "", "operator binary (built from this tree when empty)")
	icBin := flag.String("interceptor", "", "interceptor binary (built from this tree when empty)")
	opArgs := flag.String("operator-args", "", "extra operator flags, space-separated")
	flag.Parse()
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(c.sizes) > 0 && n < c.sizes[len(c.sizes)-1]) {
			return fmt.Errorf("bad -n %q (positive, ascending)", f)
		}
		c.sizes = append(c.sizes, n)
	}

	dir, err := os.MkdirTemp("", "propagation")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, b := range []struct {
		bin *string
		pkg string
	}{{opBin, "./operator"}, {icBin, "./interceptor"}} {
		if *b.bin != "" {
			continue
		}
		*b.bin = filepath.Join(dir, filepath.Base(b.pkg))
		cmd := exec.Command("go", "build", "-o", *b.bin, b.pkg)
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}

	env, err := testenv.New()
	if err != nil {
		return err
	}
	env.ControlPlaneStartTimeout = 5 * time.Minute
	env.CRDInstallOptions.MaxTime = 5 * time.Minute
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	defer func() { _ = env.Stop() }()
	cfg.QPS, cfg.Burst = 2000, 4000
	kubeconfig, err := testenv.WriteKubeconfig(env, dir)
	if err != nil {
		return err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1.AddToScheme(scheme); err != nil {
		return err
	}
	k8s, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := prepare(ctx, k8s, c.namespaces); err != nil {
		return err
	}

	heads := &tableWatch{}
	if err := heads.start(ctx, cs); err != nil {
		return err
	}

	// The operator watches the objects' namespaces only, so that the burst's floor of
	// HTTPScaledObjects (in burstFloorNS) costs the API server alone.
	watched := make([]string, c.namespaces)
	for i := range watched {
		watched[i] = nsName(i)
	}
	op, err := startProc(dir, "operator", *opBin, append([]string{
		"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--namespace=" + installNS,
		"--webhook-bind-address=0", "--metrics-bind-address=0", "--health-probe-bind-address=" + freeAddr(),
		"--zap-log-level=error", "--watch-namespaces=" + strings.Join(watched, ","),
	}, strings.Fields(*opArgs)...))
	if err != nil {
		return err
	}
	defer op.stop()
	adminAddr := freeAddr()
	ic, err := startProc(dir, "interceptor", *icBin, []string{
		"--kubeconfig", kubeconfig, "--namespace", installNS, "--zone", "zone-a",
		"--proxy-bind-address", freeAddr(), "--admin-bind-address", adminAddr,
		"--health-probe-bind-address", freeAddr(), "--pprof-bind-address", freeAddr(),
	})
	if err != nil {
		return err
	}
	defer ic.stop()
	status := "http://" + adminAddr + admin.PathStatus

	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("# %s, load average at start: %s", time.Now().UTC().Format(time.RFC3339), load)
	fmt.Printf("%-7s %-6s %10s %10s %10s %10s\n", "N", "sample", "shard", "head", "routed", "head→routed")
	created := 0
	type row struct {
		n                           int
		shard, written, routed, lag []time.Duration
		load                        string
	}
	var rows []row
	for _, n := range c.sizes {
		t0 := time.Now()
		if err := fill(ctx, k8s, created, n, c); err != nil {
			return err
		}
		created = n
		if err := waitEntries(ctx, status, n, c.fillWait, 200*time.Millisecond, op, ic); err != nil {
			return fmt.Errorf("routing %d objects: %w", n, err)
		}
		fmt.Printf("# %d objects routed by the interceptor %s after the first of this step was created\n", n, time.Since(t0).Round(time.Millisecond))
		// The operator still patches statuses after the interceptor routes everything; a sample
		// taken then waits behind that backlog (seen: 5.3 s at N=1,000). Measure from a quiet operator.
		if err := waitStatuses(ctx, k8s, n, c.fillWait); err != nil {
			return err
		}
		fmt.Printf("# %d objects show status.routing.tableVersion %s after the first of this step was created\n", n, time.Since(t0).Round(time.Millisecond))
		time.Sleep(c.settle)
		r := row{n: n}
		for s := 0; s < c.samples; s++ {
			before := heads.headVersion()
			start := time.Now()
			if err := create(ctx, k8s, created, c.namespaces); err != nil {
				return err
			}
			created++
			if err := waitEntries(ctx, status, created, time.Minute, c.poll, op, ic); err != nil {
				return fmt.Errorf("sample %d at N=%d: %w", s, n, err)
			}
			routed := time.Since(start)
			// This process's watch may see the write after the interceptor routed it.
			sh, wr, ok := heads.after(start, before)
			for wait := time.Now().Add(5 * time.Second); !ok && time.Now().Before(wait); sh, wr, ok = heads.after(start, before) {
				time.Sleep(time.Millisecond)
			}
			written := wr.Sub(start)
			lag := routed - written // negative when this process's watch saw the write after the interceptor routed
			shard := sh.Sub(start)
			if !ok {
				written, lag = missing, missing
			}
			if sh.IsZero() {
				shard = missing
			}
			fmt.Printf("%-7d %-6d %10s %10s %10s %10s\n", n, s, ms(shard), ms(written), ms(routed), ms(lag))
			r.shard = append(r.shard, shard)
			r.written = append(r.written, written)
			r.routed = append(r.routed, routed)
			r.lag = append(r.lag, lag)
			time.Sleep(c.gap)
		}
		l, _ := os.ReadFile("/proc/loadavg")
		r.load = strings.Join(strings.Fields(string(l))[:3], " ")
		rows = append(rows, r)
		fmt.Printf("# at %d objects: operator RSS %s, interceptor RSS %s\n", created, op.rss(), ic.rss())
	}
	fmt.Printf("\nms, p50/p99/max; shard and head: this process's watch saw the new shard / the head with the new version\n")
	fmt.Printf("%-7s %-8s %-15s %-15s %-15s %-15s %s\n", "N", "samples", "shard", "head", "routed", "head→routed", "load (1/5/15 min) at the end")
	for _, r := range rows {
		fmt.Printf("%-7d %-8d %-15s %-15s %-15s %-15s %s\n", r.n, len(r.routed), stats(r.shard), stats(r.written), stats(r.routed), stats(r.lag), r.load)
	}
	if c.burst > 0 {
		return burst(ctx, k8s, heads, status, created, c, op, ic)
	}
	return nil
}

// burstFloorNS holds the floor's objects; the operator does not watch it.
const burstFloorNS = "burst-floor"

// burst measures the API server's own write throughput as the floor (c.burst plain ConfigMaps, then
// c.burst HTTPScaledObjects in a namespace the operator does not watch: the same objects with their
// CEL validation but without the operator's writes, both created with the same client and
// parallelism), then creates c.burst objects at once and times until the interceptor routes every
// one of them.
func burst(ctx context.Context, k8s client.Client, heads *tableWatch, status string, created int, c config, op, ic *proc) error {
	l, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("\n# burst of %d, %d client goroutines; load average at start: %s", c.burst, c.burstWork, l)
	floorNS := burstFloorNS
	if err := k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNS}}); err != nil {
		return err
	}
	t0 := time.Now()
	if err := parallel(c.burst, c.burstWork, func(i int) error {
		return k8s.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Namespace: floorNS},
			Data: map[string]string{"k": "v"}})
	}); err != nil {
		return err
	}
	floor := time.Since(t0)
	fmt.Printf("# floor: %d ConfigMaps created in %s (%.0f/s)\n", c.burst, floor.Round(time.Millisecond), float64(c.burst)/floor.Seconds())
	t0 = time.Now()
	if err := parallel(c.burst, c.burstWork, func(i int) error {
		h := newObject(created+i, floorNS)
		return k8s.Create(ctx, h)
	}); err != nil {
		return err
	}
	floor = time.Since(t0)
	fmt.Printf("# floor: %d HTTPScaledObjects nobody reconciles created in %s (%.0f/s)\n", c.burst, floor.Round(time.Millisecond), float64(c.burst)/floor.Seconds())
	time.Sleep(c.settle)

	heads.mu.Lock()
	events0 := len(heads.events)
	heads.mu.Unlock()
	t0 = time.Now()
	if err := parallel(c.burst, c.burstWork, func(i int) error { return create(ctx, k8s, created+i, c.namespaces) }); err != nil {
		return err
	}
	createdIn := time.Since(t0)
	lastCreate := time.Now()
	if err := waitEntries(ctx, status, created+c.burst, c.fillWait, 10*time.Millisecond, op, ic); err != nil {
		return fmt.Errorf("burst: %w", err)
	}
	routedAt := time.Now()
	heads.mu.Lock()
	versions := 0
	for _, e := range heads.events[events0:] {
		if e.name == routing.DefaultBaseName && e.typ != watch.Deleted {
			versions++
		}
	}
	heads.mu.Unlock()
	l, _ = os.ReadFile("/proc/loadavg")
	fmt.Printf("# burst: %d objects created in %s (%.0f/s); all routed %s after the first create, %s after the last; %d table versions (head writes seen); load %s",
		c.burst, createdIn.Round(time.Millisecond), float64(c.burst)/createdIn.Seconds(), routedAt.Sub(t0).Round(time.Millisecond),
		routedAt.Sub(lastCreate).Round(time.Millisecond), versions, l)
	fmt.Printf("# at %d objects: operator RSS %s, interceptor RSS %s\n", created+c.burst, op.rss(), ic.rss())
	return nil
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(int) error) error {
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range workers {
		wg.Go(func() {
			for i := range work {
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// prepare creates the install namespace and, per app namespace, the Deployment and Service every
// object there targets.
func prepare(ctx context.Context, k8s client.Client, k int) error {
	objs := []client.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNS}}}
	for i := 0; i < k; i++ {
		ns := nsName(i)
		objs = append(objs, testenv.AppObjects(ns)...)
	}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

func nsName(i int) string { return fmt.Sprintf("app-%d", i) }

// create creates object i: web-<i> in namespace app-<i mod k>, host web-<i>.example.com.
func create(ctx context.Context, k8s client.Client, i, k int) error {
	return k8s.Create(ctx, newObject(i, nsName(i%k)))
}

// newObject is the i-th object of the benchmark in namespace ns.
func newObject(i int, ns string) *v1.HTTPScaledObject {
	return &v1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: ns},
		Spec: v1.HTTPScaledObjectSpec{
			Hosts:          []v1.Host{v1.Host(fmt.Sprintf("web-%d.example.com", i))},
			ScaleTargetRef: v1.ScaleTargetRef{Name: "app", Service: "app", Port: ptr.To[int32](80)},
		},
	}
}

// fill creates objects from..to-1 with c.workers parallel clients.
func fill(ctx context.Context, k8s client.Client, from, to int, c config) error {
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for range c.workers {
		wg.Go(func() {
			for i := range work {
				if err := create(ctx, k8s, i, c.namespaces); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := from; i < to; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	return first
}

// waitStatuses lists the objects every 2 s until n show a routing-table version in their status.
func waitStatuses(ctx context.Context, k8s client.Client, n int, bound time.Duration) error {
	deadline := time.Now().Add(bound)
	for {
		var list v1.HTTPScaledObjectList
		if err := k8s.List(ctx, &list); err != nil {
			return err
		}
		done := 0
		for _, h := range list.Items {
			if h.Status.Routing != nil && h.Status.Routing.TableVersion != "" {
				done++
			}
		}
		if done >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d objects show a routing-table version after %s", done, n, bound)
		}
		time.Sleep(2 * time.Second)
	}
}

// waitEntries polls the interceptor's /status until its table holds n entries.
func waitEntries(ctx context.Context, url string, n int, bound, every time.Duration, procs ...*proc) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(bound)
	last := -1
	for {
		var s admin.Status
		if err := getJSON(hc, url, &s); err == nil {
			last = s.TableEntries
			if s.TableEntries >= n {
				return nil
			}
		}
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("%s exited (log %s)", p.name, p.log)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("interceptor serves %d entries, want %d, after %s", last, n, bound)
		}
		time.Sleep(every)
	}
}

// tableWatch records when each routing-table ConfigMap event was seen: the operator creates the new
// shard (after building and encoding the table), then updates the head.
type tableWatch struct {
	mu     sync.Mutex
	events []tableEvent
}

type tableEvent struct {
	at      time.Time
	typ     watch.EventType
	name    string
	version string // the head's version annotation
}

func (h *tableWatch) start(ctx context.Context, cs kubernetes.Interface) error {
	cms := cs.CoreV1().ConfigMaps(installNS)
	opts := metav1.ListOptions{LabelSelector: routing.LabelTable + "=" + routing.DefaultBaseName}
	w, err := cms.Watch(ctx, opts)
	if err != nil {
		return err
	}
	go func() {
		for {
			for ev := range w.ResultChan() {
				at := time.Now()
				cm, ok := ev.Object.(*corev1.ConfigMap)
				if !ok {
					continue
				}
				opts.ResourceVersion = cm.ResourceVersion
				h.mu.Lock()
				h.events = append(h.events, tableEvent{at: at, typ: ev.Type, name: cm.Name, version: cm.Annotations[routing.AnnotationVersion]})
				h.mu.Unlock()
			}
			// The API server ends watches after a while: watch again from the last version seen.
			for ctx.Err() == nil {
				if w, err = cms.Watch(ctx, opts); err == nil {
					break
				}
				opts.ResourceVersion = ""
				time.Sleep(100 * time.Millisecond)
			}
			if ctx.Err() != nil {
				return
			}
		}
	}()
	return nil
}

// headVersion returns the head's last version seen.
func (h *tableWatch) headVersion() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.events) - 1; i >= 0; i-- {
		if e := h.events[i]; e.name == routing.DefaultBaseName && e.typ != watch.Deleted {
			return e.version
		}
	}
	return ""
}

// after returns when, after t, the first new shard and the first head with a version other than
// prev were seen (ok false until the head was).
func (h *tableWatch) after(t time.Time, prev string) (shard, head time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range h.events {
		if !e.at.After(t) {
			continue
		}
		switch {
		case e.name != routing.DefaultBaseName && e.typ == watch.Added && shard.IsZero():
			shard = e.at
		case e.name == routing.DefaultBaseName && e.typ != watch.Deleted && e.version != prev:
			return shard, e.at, true
		}
	}
	return shard, time.Time{}, false
}

type proc struct {
	name, log string
	cmd       *exec.Cmd
	done      chan struct{}
}

func startProc(dir, name, bin string, args []string) (*proc, error) {
	f, err := os.Create(filepath.Join(os.TempDir(), fmt.Sprintf("propagation-%s-%d.log", name, os.Getpid())))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proc{name: name, log: f.Name(), cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

// rss returns the process's resident set size as /proc reports it ("VmRSS").
func (p *proc) rss() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return fmt.Sprintf("%.0f MiB", float64(kb)/1024)
		}
	}
	return "?"
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// missing marks a sample whose head ConfigMap write this process did not see.
const missing = time.Duration(math.MinInt64)

func ms(d time.Duration) string {
	if d == missing {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// stats returns p50/p99/max in ms (nearest rank; with 10 samples p99 is the maximum).
func stats(ds []time.Duration) string {
	var v []time.Duration
	for _, d := range ds {
		if d != missing {
			v = append(v, d)
		}
	}
	if len(v) == 0 {
		return "-"
	}
	slices.Sort(v)
	rank := func(p float64) time.Duration {
		i := int(p*float64(len(v))+0.999999) - 1
		return v[max(0, min(i, len(v)-1))]
	}
	f := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 0, 64)
	}
	return f(rank(0.5)) + "/" + f(rank(0.99)) + "/" + f(v[len(v)-1])
}

func getJSON(hc *http.Client, url string, v any) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.Unmarshal(b, v)
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}
