// Command propagation measures how long one new HTTPScaledObject takes to become routable when N
// objects already exist: it starts a real kube-apiserver (envtest, with httpscale's and KEDA's CRDs),
// runs the real operator binary (--kubeconfig, no leader election, its webhooks with -webhooks) and -interceptors K
// real interceptor binaries, creates N HTTPScaledObjects and waits until every interceptor serves
// all of them, then, S times, creates one more object and measures:
//
//   - shard: object created → a watch of this process sees the new table's shard ConfigMap created
//     (the operator's reconcile, TableWriter.Set, building and encoding the table, the create);
//   - head: … sees the head ConfigMap with the new version (the update that publishes the table);
//   - routed: object created → each interceptor's admin /status shows the table with the new entry
//     (polled every -poll, 2 ms by default: the watch event, fetching shards, decoding, the swap);
//     "all" is when the last of them did: a sample counts as routed only then;
//   - shards: the table's ConfigMaps listed (metadata, resourceVersions) before and after the
//     sample: shard ConfigMaps created (+), deleted (-), rewritten in place (~, never expected) and
//     whether the head was rewritten. One change should cost "+1 -1 head".
//
// Objects share one Deployment and Service per namespace (the operator only needs them to exist).
// Sizes are cumulative: -n 1000,10000 creates 1,000 objects, measures, then 9,000 more. After each
// size is routed it waits until the operator is quiet (nothing queued or running in its controllers,
// from its /metrics) and every object shows status.routing.tableVersion, then prints the API
// server's writes during that step per object created (apiserver_request_total of POST, PUT, PATCH,
// DELETE), and the operator's and every interceptor's resident memory.
//
// With -prefill the first size is created before the operator starts (the API server's own pace for
// HTTPScaledObjects: no operator writes compete with the creates), so the first step measures an
// operator starting with N objects it has never seen, as after an install into a busy cluster.
//
// With -throughput D it then compares throughput with N routes against 1 route (see throughput.go):
// wrk through the first interceptor vs through a reference interceptor that routes only one of the
// apps, same backend, interleaved rounds. The backend's address goes into an EndpointSlice, which
// the API server refuses for loopback addresses, so run it in a network namespace of its own:
//
//	unshare -n sh -c 'ip link set lo up && ip addr add 10.255.0.1/32 dev lo &&
//	  exec go run ./hack/bench/propagation -n 50000 -samples 10 -interceptors 2 -throughput 10s -endpoint-ip 10.255.0.1'
//
// With -burst B it then creates B plain ConfigMaps with the same client and parallelism (the API
// server's own write throughput: the floor), then B objects at once, and reports when every
// interceptor routed all of them, counted from the last create.
//
//	go run ./hack/bench/propagation -n 1000,10000 -samples 10 -burst 10000
package main

import (
	"context"
	"encoding/json"
	"errors"
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
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/admin"
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
	sizes        []int
	samples      int
	namespaces   int
	workers      int
	interceptors int
	prefill      bool
	poll         time.Duration
	gap          time.Duration
	settle       time.Duration
	fillWait     time.Duration
	quietWait    time.Duration
	burst        int
	burstWork    int
	tput         time.Duration
	tputRoutes   int
	rounds       int
	conns        int
	endpointIP   string
	profiles     string
	webhooks     string
}

type binaries struct{ operator, interceptor, backend string }

// interceptorBin is the binary interceptor i runs: -interceptor may list several.
func (b binaries) interceptorBin(i int) string {
	list := strings.Split(b.interceptor, ",")
	return list[i%len(list)]
}

func run() error {
	var c config
	var bins binaries
	ns := flag.String("n", "1000,10000", "comma-separated numbers of existing objects (cumulative, ascending)")
	flag.IntVar(&c.samples, "samples", 10, "new objects measured per N")
	flag.IntVar(&c.namespaces, "namespaces", 10, "objects are spread over this many namespaces")
	flag.IntVar(&c.workers, "workers", 32, "parallel creates while filling to N")
	flag.IntVar(&c.interceptors, "interceptors", 1, "interceptor processes; a sample is routed when every one routes it")
	flag.BoolVar(&c.prefill, "prefill", false, "create the first size's objects before the operator starts")
	flag.DurationVar(&c.poll, "poll", 2*time.Millisecond, "interval of the interceptors' /status polls")
	flag.DurationVar(&c.gap, "gap", time.Second, "pause between samples (the writer is idle again after its debounce)")
	flag.DurationVar(&c.settle, "settle", 5*time.Second, "pause after N objects are routed and the operator is quiet, before the first sample")
	flag.DurationVar(&c.fillWait, "fill-timeout", 20*time.Minute, "bound for routing N objects")
	flag.DurationVar(&c.quietWait, "quiet-timeout", 20*time.Minute, "bound for the operator's backlog after N are routed (then it samples anyway and says so)")
	flag.IntVar(&c.burst, "burst", 0, "after the samples, create this many objects at once and time until all are routed (0: no burst)")
	flag.IntVar(&c.burstWork, "burst-workers", 16, "parallel creates of the burst (and of its ConfigMap floor)")
	flag.DurationVar(&c.tput, "throughput", 0, "after the samples, wrk rounds of this length through an interceptor with N routes and one with 1 route (0: none; needs -endpoint-ip)")
	flag.IntVar(&c.rounds, "rounds", 6, "wrk rounds per interceptor, alternating which goes first")
	flag.IntVar(&c.conns, "connections", 64, "wrk connections")
	flag.StringVar(&c.endpointIP, "endpoint-ip", "", "non-loopback address of this host (or network namespace) the backend listens on")
	flag.StringVar(&c.profiles, "profiles", "", "directory for heap profiles of the operator and every interceptor at each N, taken after the memory readings, and their CPU profiles over the samples (none when empty)")
	flag.StringVar(&bins.operator, "operator", "", "operator binary (built from this tree when empty)")
	flag.StringVar(&bins.interceptor, "interceptor", "", "interceptor binary (built from this tree when empty); a comma-separated list runs interceptor i from binary i mod the list's length, to compare builds in one run (the throughput rounds use the first)")
	flag.StringVar(&bins.backend, "backend", "", "hack/bench/backend binary for -throughput (built from this tree when empty)")
	flag.StringVar(&c.webhooks, "webhooks", "", `serve the operator's admission webhooks as the chart installs them once it runs: "validating" (webhook.finalizers.enabled=false), "all" (validating, and mutating to put the finalizer on at create); objects prefilled before it started met none`)
	opArgs := flag.String("operator-args", "", "extra operator flags, space-separated")
	flag.Parse()
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || (len(c.sizes) > 0 && n < c.sizes[len(c.sizes)-1]) {
			return fmt.Errorf("bad -n %q (positive, ascending)", f)
		}
		c.sizes = append(c.sizes, n)
	}
	if c.interceptors < 1 {
		return fmt.Errorf("-interceptors %d: want at least 1", c.interceptors)
	}
	if c.tput > 0 {
		if ip := net.ParseIP(c.endpointIP); ip == nil || ip.IsLoopback() || ip.To4() == nil {
			return fmt.Errorf("-throughput needs -endpoint-ip: an IPv4 address of this host that is not loopback (the API server refuses those in EndpointSlices), got %q", c.endpointIP)
		}
		if _, err := exec.LookPath("wrk"); err != nil {
			return fmt.Errorf("-throughput needs wrk: %w", err)
		}
	}

	dir, err := os.MkdirTemp("", "propagation")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := build(dir, &bins, c.tput > 0); err != nil {
		return err
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
	// The bench's own client must not be the limit: client-go's default (5/s, burst 10) would be.
	cfg.QPS, cfg.Burst = 5000, 10000
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
	writes, err := readWrites(ctx, cs)
	if err != nil {
		return err
	}

	created := 0
	if c.prefill {
		t0 := time.Now()
		if err := fill(ctx, k8s, 0, c.sizes[0], c.workers, c.namespaces); err != nil {
			return err
		}
		created = c.sizes[0]
		d := time.Since(t0)
		fmt.Printf("# prefill: %d objects created before the operator started, in %s (%.0f/s, %d client goroutines)\n", created, d.Round(time.Millisecond), float64(created)/d.Seconds(), c.workers)
	}

	// The operator watches the objects' namespaces only, so that the burst's floor of
	// HTTPScaledObjects (in burstFloorNS) costs the API server alone.
	watched := make([]string, c.namespaces)
	for i := range watched {
		watched[i] = nsName(i)
	}
	opMetrics, opPprof, opHealth := freeAddr(), freeAddr(), freeAddr()
	webhookArgs := []string{"--webhook-bind-address=0"}
	var hook *benchWebhook
	switch c.webhooks {
	case "":
	case "validating", "all":
		if hook, err = newBenchWebhook(c.webhooks == "all"); err != nil {
			return err
		}
		defer hook.cleanup()
		webhookArgs = hook.args()
	default:
		return fmt.Errorf("-webhooks %q: want validating or all", c.webhooks)
	}
	op, err := startProc("operator", bins.operator, append(append([]string{
		"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--namespace=" + installNS, "--pprof-bind-address=" + opPprof,
		"--metrics-bind-address=" + opMetrics, "--health-probe-bind-address=" + opHealth,
		"--zap-log-level=error", "--watch-namespaces=" + strings.Join(watched, ","),
	}, webhookArgs...), strings.Fields(*opArgs)...))
	if err != nil {
		return err
	}
	defer op.stop()
	if hook != nil {
		if err := hook.register(ctx, k8s, opHealth, watched); err != nil {
			return err
		}
		fmt.Printf("# webhooks served by the operator at %s: validating (Fail)%s\n", hook.addr, map[bool]string{true: " and mutating (finalizer at create, Ignore)"}[hook.mutating])
	}
	opStart := time.Now()
	var ics []*interceptor
	defer func() {
		for _, ic := range ics {
			ic.stop()
		}
	}()
	for i := range c.interceptors {
		bin := bins.interceptorBin(i)
		ic, err := startInterceptor(fmt.Sprintf("interceptor-%d", i), bin, kubeconfig)
		if err != nil {
			return err
		}
		ics = append(ics, ic)
		fmt.Printf("# %s: pid %d, admin %s, pprof %s, log %s, binary %s\n", ic.name, ic.cmd.Process.Pid, ic.admin, ic.pprof, ic.log, bin)
	}
	fmt.Printf("# operator: pid %d, metrics %s, pprof %s, log %s\n", op.cmd.Process.Pid, opMetrics, opPprof, op.log)
	procs := []*proc{op}
	for _, ic := range ics {
		procs = append(procs, ic.proc)
	}

	load, _ := readLoad()
	fmt.Printf("# %s, load average at start: %s\n", time.Now().UTC().Format(time.RFC3339), load)
	type row struct {
		n                           int
		shard, written, all, lag    []time.Duration
		routed                      [][]time.Duration // per interceptor
		created, deleted, rewritten []int
		heads                       int
		load                        string
	}
	var rows []row
	for step, n := range c.sizes {
		t0 := time.Now()
		before := created
		if step == 0 && c.prefill {
			t0, before = opStart, 0
		} else {
			if err := fill(ctx, k8s, created, n, c.workers, c.namespaces); err != nil {
				return err
			}
			d := time.Since(t0)
			fmt.Printf("# %d objects created in %s (%.0f/s, %d client goroutines, the operator working meanwhile)\n", n-created, d.Round(time.Millisecond), float64(n-created)/d.Seconds(), c.workers)
		}
		created = n
		times, err := routedBy(ctx, ics, n, t0, c.fillWait, 200*time.Millisecond, op)
		if err != nil {
			return fmt.Errorf("routing %d objects: %w", n, err)
		}
		fmt.Printf("# %d objects routed by every interceptor %s after %s (each: %s)\n", n, ms(slices.Max(times)), since(step == 0 && c.prefill), list(times))
		// The operator still creates ScaledObjects and patches statuses after the interceptors route
		// everything; a sample taken then waits behind that backlog (seen: 5.3 s at N=1,000).
		// Measure from a quiet operator.
		ok, shown, err := waitQuiet(ctx, k8s, "http://"+opMetrics+"/metrics", n, c.quietWait)
		if err != nil {
			return err
		}
		if ok {
			fmt.Printf("# operator quiet, %d objects show status.routing.tableVersion, %s after %s\n", shown, time.Since(t0).Round(time.Millisecond), since(step == 0 && c.prefill))
		} else {
			fmt.Printf("# operator NOT quiet after %s more (%d of %d statuses show a table version): sampling anyway\n", c.quietWait, shown, n)
		}
		w, err := readWrites(ctx, cs)
		if err != nil {
			return err
		}
		fmt.Printf("# API server writes while %d objects were created and reconciled: %s\n", n-before, perObject(writes, w, n-before))
		writes = w
		fmt.Printf("# at %d objects: %s\n", n, memories(op, ics))
		if c.profiles != "" {
			targets := map[string]string{"operator": opPprof}
			for _, ic := range ics {
				targets[ic.name] = ic.pprof
			}
			if err := saveHeaps(c.profiles, n, targets); err != nil {
				return err
			}
		}
		time.Sleep(c.settle)

		r := row{n: n, routed: make([][]time.Duration, len(ics))}
		state, err := readTableState(ctx, k8s)
		if err != nil {
			return err
		}
		fmt.Printf("%-7s %-6s %10s %10s", "N", "sample", "shard", "head")
		for i := range ics {
			fmt.Printf(" %10s", fmt.Sprintf("routed-%d", i))
		}
		fmt.Printf(" %10s %10s  %s\n", "all", "head→all", "shards")
		var cpu func() error
		if c.profiles != "" {
			targets := map[string]string{"operator": opPprof}
			for _, ic := range ics {
				targets[ic.name] = ic.pprof
			}
			// The samples take about a gap and a few hundred ms each.
			cpu = saveCPU(c.profiles, n, targets, time.Duration(c.samples)*(c.gap+300*time.Millisecond))
		}
		for s := 0; s < c.samples; s++ {
			prev := heads.headVersion()
			start := time.Now()
			if err := create(ctx, k8s, created, c.namespaces); err != nil {
				return err
			}
			created++
			routed, err := routedBy(ctx, ics, created, start, time.Minute, c.poll, op)
			if err != nil {
				return fmt.Errorf("sample %d at N=%d: %w", s, n, err)
			}
			all := slices.Max(routed)
			// This process's watch may see the write after the interceptors routed it.
			sh, wr, ok := heads.after(start, prev)
			for wait := time.Now().Add(5 * time.Second); !ok && time.Now().Before(wait); sh, wr, ok = heads.after(start, prev) {
				time.Sleep(time.Millisecond)
			}
			written := wr.Sub(start)
			lag := all - written // negative when this process's watch saw the write after the interceptors routed
			shard := sh.Sub(start)
			if !ok {
				written, lag = missing, missing
			}
			if sh.IsZero() {
				shard = missing
			}
			time.Sleep(c.gap) // the old shard is deleted after the head is written
			next, err := readTableState(ctx, k8s)
			if err != nil {
				return err
			}
			d := diffTable(state, next)
			state = next
			fmt.Printf("%-7d %-6d %10s %10s", n, s, ms(shard), ms(written))
			for i, t := range routed {
				fmt.Printf(" %10s", ms(t))
				r.routed[i] = append(r.routed[i], t)
			}
			fmt.Printf(" %10s %10s  %s\n", ms(all), ms(lag), d)
			r.shard = append(r.shard, shard)
			r.written = append(r.written, written)
			r.all = append(r.all, all)
			r.lag = append(r.lag, lag)
			r.created = append(r.created, d.created)
			r.deleted = append(r.deleted, d.deleted)
			r.rewritten = append(r.rewritten, d.rewritten)
			if d.head {
				r.heads++
			}
		}
		if cpu != nil {
			if err := cpu(); err != nil {
				return err
			}
		}
		r.load, _ = readLoad()
		rows = append(rows, r)
		fmt.Printf("# after the samples at %d objects: %s; %d shard ConfigMaps\n", created, memories(op, ics), len(state)-1)
	}
	fmt.Printf("\nms, p50/p99/max; shard and head: this process's watch saw the new shard / the head with the new version;\n")
	fmt.Printf("routed-i: interceptor i routes the new object; all: every interceptor does; shards per change: created/deleted/rewritten min–max, head rewrites\n")
	fmt.Printf("%-7s %-8s %-15s %-15s", "N", "samples", "shard", "head")
	for i := range ics {
		fmt.Printf(" %-15s", fmt.Sprintf("routed-%d", i))
	}
	fmt.Printf(" %-15s %-15s %-22s %s\n", "all", "head→all", "shards per change", "load (1/5/15 min) at the end")
	for _, r := range rows {
		fmt.Printf("%-7d %-8d %-15s %-15s", r.n, len(r.all), stats(r.shard), stats(r.written))
		for _, t := range r.routed {
			fmt.Printf(" %-15s", stats(t))
		}
		fmt.Printf(" %-15s %-15s %-22s %s\n", stats(r.all), stats(r.lag),
			fmt.Sprintf("%s/%s/%s, %d/%d", span(r.created), span(r.deleted), span(r.rewritten), r.heads, len(r.all)), r.load)
	}
	if c.tput > 0 {
		c.tputRoutes = created
		if err := throughput(ctx, k8s, c, bins, kubeconfig, ics[0]); err != nil {
			return err
		}
		fmt.Printf("# after the throughput rounds: %s\n", memories(op, ics))
	}
	if c.burst > 0 {
		return burst(ctx, k8s, heads, created, c, op, ics)
	}
	return nil
}

// build builds the binaries not given, from this tree.
func build(dir string, bins *binaries, backend bool) error {
	todo := []struct {
		bin *string
		pkg string
	}{{&bins.operator, "./operator"}, {&bins.interceptor, "./interceptor"}}
	if backend {
		todo = append(todo, struct {
			bin *string
			pkg string
		}{&bins.backend, "./hack/bench/backend"})
	}
	for _, b := range todo {
		if *b.bin != "" {
			continue
		}
		*b.bin = filepath.Join(dir, filepath.Base(b.pkg))
		// Built as hack/images builds what users run: static and stripped, so that the resident
		// memory reported is the shipped binary's (a cgo build maps libc and resolves through it).
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", *b.bin, b.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return nil
}

// interceptor is one interceptor process and its addresses.
type interceptor struct {
	*proc
	admin, proxy, pprof string
}

func startInterceptor(name, bin, kubeconfig string, extra ...string) (*interceptor, error) {
	ic := &interceptor{admin: freeAddr(), proxy: freeAddr(), pprof: freeAddr()}
	p, err := startProc(name, bin, append([]string{
		"--kubeconfig", kubeconfig, "--namespace", installNS, "--zone", "zone-a",
		"--proxy-bind-address", ic.proxy, "--admin-bind-address", ic.admin,
		"--health-probe-bind-address", freeAddr(), "--pprof-bind-address", ic.pprof,
	}, extra...))
	if err != nil {
		return nil, err
	}
	ic.proc = p
	return ic, nil
}

func (ic *interceptor) statusURL() string { return "http://" + ic.admin + admin.PathStatus }

// memories reports the operator's and every interceptor's resident memory.
func memories(op *proc, ics []*interceptor) string {
	parts := []string{"operator RSS " + op.memory()}
	for _, ic := range ics {
		parts = append(parts, ic.name+" RSS "+ic.memory()+" ["+goMemory(ic.pprof)+"]")
	}
	return strings.Join(parts, ", ")
}

// goMemory reports where the Go runtime of the process serving pprof at addr says its memory is
// (runtime.MemStats, from the heap profile's text form): the heap in use, free heap pages not yet
// returned to the OS, goroutine stacks, the runtime's own structures, and the next GC's heap goal.
func goMemory(addr string) string {
	hc := &http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		return "go: " + err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "go: " + err.Error()
	}
	return memStatsSummary(string(b))
}

// memStatsSummary summarizes the "# Name = value" lines a heap profile's text form ends with.
func memStatsSummary(text string) string {
	v := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		name, val, ok := strings.Cut(strings.TrimPrefix(line, "# "), " = ")
		if !ok || !strings.HasPrefix(line, "# ") {
			continue
		}
		val, _, _ = strings.Cut(val, " ") // "Stack = 1234 / 5678": in use / obtained
		if n, err := strconv.ParseFloat(val, 64); err == nil {
			v[name] = n / (1 << 20)
		}
	}
	if len(v) == 0 {
		return "go: no MemStats"
	}
	return fmt.Sprintf("go: heap in use %.0f, free not released %.0f, stacks %.0f, runtime %.0f, next GC %.0f MiB",
		v["HeapInuse"], v["HeapIdle"]-v["HeapReleased"], v["Stack"], v["MSpan"]+v["MCache"]+v["BuckHashSys"]+v["GCSys"]+v["OtherSys"], v["NextGC"])
}

// routedBy waits until every interceptor's table holds n entries and returns, per interceptor, how
// long after start it did (to within every).
func routedBy(ctx context.Context, ics []*interceptor, n int, start time.Time, bound, every time.Duration, op *proc) ([]time.Duration, error) {
	out := make([]time.Duration, len(ics))
	errs := make([]error, len(ics))
	var wg sync.WaitGroup
	for i, ic := range ics {
		wg.Go(func() {
			errs[i] = waitEntries(ctx, ic.statusURL(), n, bound, every, op, ic.proc)
			out[i] = time.Since(start)
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// saveHeaps saves a heap profile (after a GC) of each target (name → pprof address) as
// dir/heap-<name>-<n>.pb.gz.
func saveHeaps(dir string, n int, targets map[string]string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, addr := range targets {
		f := filepath.Join(dir, fmt.Sprintf("heap-%s-%d.pb.gz", name, n))
		if err := fetchProfile(addr, "heap?gc=1", time.Minute, "heap profile of "+name, f); err != nil {
			return err
		}
		fmt.Printf("# heap profile of %s at %d objects: %s\n", name, n, f)
	}
	return nil
}

// saveCPU starts a CPU profile of d of each target (name → pprof address) and returns a function
// that waits for them and saves them as dir/cpu-<name>-<n>.pb.gz.
func saveCPU(dir string, n int, targets map[string]string, d time.Duration) func() error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() error { return err }
	}
	secs := max(1, int(d.Seconds()+0.5))
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	i := 0
	for name, addr := range targets {
		j := i
		wg.Go(func() {
			f := filepath.Join(dir, fmt.Sprintf("cpu-%s-%d.pb.gz", name, n))
			errs[j] = fetchProfile(addr, fmt.Sprintf("profile?seconds=%d", secs), time.Duration(secs)*time.Second+time.Minute, "CPU profile of "+name, f)
			if errs[j] == nil {
				fmt.Printf("# CPU profile of %s over %d s of samples at %d objects: %s\n", name, secs, n, f)
			}
		})
		i++
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// fetchProfile saves the pprof endpoint path of addr ("heap?gc=1") as file.
func fetchProfile(addr, path string, timeout time.Duration, what, file string) error {
	hc := &http.Client{Timeout: timeout}
	resp, err := hc.Get("http://" + addr + "/debug/pprof/" + path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %v", what, resp.Status, err)
	}
	return os.WriteFile(file, b, 0o644)
}

// burstFloorNS holds the floor's objects; the operator does not watch it.
const burstFloorNS = "burst-floor"

// burst measures the API server's own write throughput as the floor (c.burst plain ConfigMaps, then
// c.burst HTTPScaledObjects in a namespace the operator does not watch: the same objects with their
// CEL validation but without the operator's writes, both created with the same client and
// parallelism), then creates c.burst objects at once and times until every interceptor routes every
// one of them.
func burst(ctx context.Context, k8s client.Client, heads *tableWatch, created int, c config, op *proc, ics []*interceptor) error {
	l, _ := readLoad()
	fmt.Printf("\n# burst of %d, %d client goroutines; load average at start: %s\n", c.burst, c.burstWork, l)
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
		return k8s.Create(ctx, newObject(created+i, floorNS))
	}); err != nil {
		return err
	}
	floor = time.Since(t0)
	fmt.Printf("# floor: %d HTTPScaledObjects nobody reconciles created in %s (%.0f/s)\n", c.burst, floor.Round(time.Millisecond), float64(c.burst)/floor.Seconds())
	time.Sleep(c.settle)

	events0 := heads.len()
	t0 = time.Now()
	if err := parallel(c.burst, c.burstWork, func(i int) error { return create(ctx, k8s, created+i, c.namespaces) }); err != nil {
		return err
	}
	createdIn := time.Since(t0)
	lastCreate := time.Now()
	times, err := routedBy(ctx, ics, created+c.burst, lastCreate, c.fillWait, 10*time.Millisecond, op)
	if err != nil {
		return fmt.Errorf("burst: %w", err)
	}
	all := slices.Max(times)
	l, _ = readLoad()
	fmt.Printf("# burst: %d objects created in %s (%.0f/s); all routed by every interceptor %s after the first create, %s after the last (each: %s); %d table versions (head writes seen); load %s\n",
		c.burst, createdIn.Round(time.Millisecond), float64(c.burst)/createdIn.Seconds(), (createdIn + all).Round(time.Millisecond),
		all.Round(time.Millisecond), list(times), heads.headWrites(events0), l)
	fmt.Printf("# at %d objects: %s\n", created+c.burst, memories(op, ics))
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

// fill creates objects from..to-1 with workers parallel creates.
func fill(ctx context.Context, k8s client.Client, from, to, workers, k int) error {
	return parallel(to-from, workers, func(i int) error { return create(ctx, k8s, from+i, k) })
}

// waitEntries polls an interceptor's /status until its table holds n entries.
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
			return fmt.Errorf("%s serves %d entries, want %d, after %s", url, last, n, bound)
		}
		time.Sleep(every)
	}
}

func readLoad() (string, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?", err
	}
	return strings.Join(strings.Fields(string(b))[:3], " "), nil
}

func since(operatorStart bool) string {
	if operatorStart {
		return "the operator started"
	}
	return "the first create of this step"
}

// missing marks a sample whose head ConfigMap write this process did not see.
const missing = time.Duration(math.MinInt64)

func ms(d time.Duration) string {
	if d == missing {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

func list(ds []time.Duration) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = ms(d)
	}
	return strings.Join(s, ", ")
}

// span is "min–max" of v ("a" when they are equal).
func span(v []int) string {
	if len(v) == 0 {
		return "-"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if lo == hi {
		return strconv.Itoa(lo)
	}
	return fmt.Sprintf("%d–%d", lo, hi)
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
