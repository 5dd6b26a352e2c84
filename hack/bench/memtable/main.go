// Command memtable measures the interceptor's memory against the number of routed apps: it starts a
// real kube-apiserver (envtest), writes a routing table of N apps the way the operator does
// (routing.Encode + routing.ToConfigMaps, shards before the head, old shards deleted after), starts
// the interceptor binary against it, waits until the binary serves all N entries and its endpoint
// watches are ready, and then reports the process's resident memory (VmRSS, VmHWM from
// /proc/PID/status), the Go heap (from the admin port's /metrics) and saves a heap profile taken from
// --pprof-bind-address. It also reports the heap left by a collection forced after the reading (the
// live heap, whenever the last collection before the reading ran) and the resident memory backed by
// files (the binary's own pages).
//
// With -traffic every app also gets a ready endpoint of its own and one request through the
// interceptor before the settle period (see traffic.go), and the scrape of the admin port's /metrics
// is measured too. The endpoints' addresses (-endpoint-cidr) must be local to the network
// namespace the command runs in:
//
//	go build -o /tmp/interceptor ./interceptor
//	go run ./hack/bench/memtable -interceptor /tmp/interceptor -n 1,1000,10000,50000 -out /tmp/mem
//	unshare -n sh -c 'ip link set lo up && ip route add local 10.255.0.0/16 dev lo &&
//	  exec /tmp/memtable -interceptor /tmp/interceptor -n 10000,50000 -traffic close'
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

const installNS = "httpscale-system"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "memtable:", err)
		os.Exit(1)
	}
}

func run() error {
	bin := flag.String("interceptor", "", "interceptor binary (go build -o ... ./interceptor)")
	ns := flag.String("n", "1,1000,10000,50000", "comma-separated numbers of apps")
	namespaces := flag.Int("namespaces", 100, "apps are spread over this many namespaces")
	settle := flag.Duration("settle", 20*time.Second, "wait after the table is served before reading memory")
	repeat := flag.Int("repeat", 1, "interceptor runs per N")
	out := flag.String("out", "", "directory for heap profiles (none when empty)")
	extra := flag.String("args", "", "extra interceptor flags, space-separated")
	traffic := flag.String("traffic", "", `send one request to every app before the settle period: "keepalive" (the backend keeps connections open, so the interceptor pools one per app), "close" (it closes them) or "cold" (no endpoints: each request is held until the readiness timeout, pass a short --readiness-timeout in -args); empty: no traffic`)
	cidrFlag := flag.String("endpoint-cidr", "10.255.0.0/16", "with -traffic, the apps' endpoint addresses; must be local to this network namespace")
	flag.Parse()
	if *bin == "" {
		return fmt.Errorf("-interceptor is required")
	}
	var sizes []int
	for _, f := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad -n %q", f)
		}
		sizes = append(sizes, n)
	}
	if *out != "" {
		if err := os.MkdirAll(*out, 0o755); err != nil {
			return err
		}
	}
	mode := trafficMode(*traffic)
	if mode != "" && mode != "keepalive" && mode != "close" && mode != "cold" {
		return fmt.Errorf("-traffic %q: want keepalive, close or cold", *traffic)
	}
	cidr, err := netip.ParsePrefix(*cidrFlag)
	if err != nil || !cidr.Addr().Is4() || cidr.Addr().IsLoopback() {
		return fmt.Errorf("-endpoint-cidr %q: want an IPv4 CIDR outside 127.0.0.0/8", *cidrFlag)
	}

	// No CRDs: the interceptor reads ConfigMaps and EndpointSlices only, and installing them can time
	// out on a loaded machine.
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: 5 * time.Minute}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	defer func() { _ = env.Stop() }()
	dir, err := os.MkdirTemp("", "memtable")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubeconfig, err := testenv.WriteKubeconfig(env, dir)
	if err != nil {
		return err
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: installNS}}, metav1.CreateOptions{}); err != nil {
		return err
	}

	if mode == "keepalive" || mode == "close" {
		stop, err := startBackend(ctx, mode)
		if err != nil {
			return err
		}
		defer stop()
	}
	fmt.Printf("%-7s %-4s %10s %10s %12s %12s %12s %12s %12s %12s %10s %12s %10s %10s\n", "apps", "run", "VmRSS_MiB", "VmHWM_MiB", "heapInuse_MiB", "heapAlloc_MiB", "heapGoal_MiB", "liveHeap_MiB", "RssFile_MiB", "goroutines", "requests_s", "scrape_KiB", "series", "app_series")
	for _, n := range sizes {
		version, err := writeTable(ctx, cs, n, *namespaces)
		if err != nil {
			return fmt.Errorf("writing table of %d: %w", n, err)
		}
		if mode == "keepalive" || mode == "close" {
			if err := createEndpoints(ctx, cs, n, *namespaces, cidr); err != nil {
				return err
			}
		}
		for r := 1; r <= *repeat; r++ {
			prof := ""
			if *out != "" {
				prof = filepath.Join(*out, fmt.Sprintf("heap-%d-%d.pb.gz", n, r))
			}
			m, err := measure(*bin, kubeconfig, version, n, *settle, prof, strings.Fields(*extra), mode)
			if err != nil {
				return fmt.Errorf("measuring %d apps: %w", n, err)
			}
			fmt.Printf("%-7d %-4d %10.1f %10.1f %12.1f %12.1f %12.1f %12.1f %12.1f %12.0f %10.1f %12.1f %10d %10d\n", n, r, m.rss, m.hwm, m.heapInuse, m.heapAlloc, m.heapGoal, m.liveHeap, m.rssFile, m.goroutines,
				m.requests.Seconds(), float64(m.scrapeBytes)/1024, m.series, m.appSeries)
		}
	}
	return nil
}

// entries returns n apps spread over namespaces "app-0".."app-<k-1>", each with one host and its
// own Service, as the operator builds them from one HTTPScaledObject each.
func entries(n, k int) []routing.Entry {
	out := make([]routing.Entry, n)
	for i := range out {
		out[i] = routing.Entry{
			Namespace: fmt.Sprintf("app-%d", i%k), Name: fmt.Sprintf("web-%d", i), Generation: 1,
			Hosts:   []string{fmt.Sprintf("web-%d.example.com", i)},
			Service: fmt.Sprintf("web-%d", i), Port: 80, PortName: "http", TargetPort: 8080,
		}
	}
	return out
}

// writeTable stores the table of n apps: shards first, then the head, then deletes older shards.
func writeTable(ctx context.Context, cs kubernetes.Interface, n, k int) (string, error) {
	t, err := routing.NewTable(entries(n, k))
	if err != nil {
		return "", err
	}
	m, shards, err := routing.Encode(t, routing.DefaultMaxShardBytes)
	if err != nil {
		return "", err
	}
	head, cms := routing.ToConfigMaps(installNS, routing.DefaultBaseName, m, shards)
	cmc := cs.CoreV1().ConfigMaps(installNS)
	keep := map[string]bool{head.Name: true}
	for _, cm := range cms {
		keep[cm.Name] = true
		if _, err := cmc.Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", err
		}
	}
	cur, err := cmc.Get(ctx, head.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cmc.Create(ctx, head, metav1.CreateOptions{})
	case err == nil:
		head.ResourceVersion = cur.ResourceVersion
		_, err = cmc.Update(ctx, head, metav1.UpdateOptions{})
	}
	if err != nil {
		return "", err
	}
	list, err := cmc.List(ctx, metav1.ListOptions{LabelSelector: routing.LabelTable + "=" + routing.DefaultBaseName})
	if err != nil {
		return "", err
	}
	for _, cm := range list.Items {
		if !keep[cm.Name] {
			if err := cmc.Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
				return "", err
			}
		}
	}
	return m.Version, nil // a stored table's version is its manifest's
}

type mem struct {
	rss, hwm, heapInuse, heapAlloc, heapGoal, goroutines float64
	// liveHeap is the heap allocated right after a forced collection (after everything else was
	// read): what is live, whenever the last collection before the reading ran.
	liveHeap float64
	// rssFile is the resident memory backed by files: the binary's own pages.
	rssFile float64
	// With traffic: how long the requests to every app took, and the scrape of /metrics afterwards.
	requests                       time.Duration
	scrapeBytes, series, appSeries int
}

// measure runs the interceptor until it serves version with n entries and is ready, sends one
// request to every app when traffic is set, waits settle, reads its memory and stops it.
func measure(bin, kubeconfig, version string, n int, settle time.Duration, prof string, extra []string, traffic trafficMode) (mem, error) {
	addrs := make([]string, 4)
	for i := range addrs {
		a, err := freeAddr()
		if err != nil {
			return mem{}, err
		}
		addrs[i] = a
	}
	adminAddr, pprofAddr := addrs[1], addrs[3]
	args := append([]string{
		"--kubeconfig", kubeconfig, "--namespace", installNS, "--zone", "zone-a",
		"--proxy-bind-address", addrs[0], "--admin-bind-address", adminAddr,
		"--health-probe-bind-address", addrs[2], "--pprof-bind-address", pprofAddr,
	}, extra...)
	cmd := exec.Command(bin, args...)
	logf, err := os.CreateTemp("", "memtable-interceptor-*.log")
	if err != nil {
		return mem{}, err
	}
	defer os.Remove(logf.Name())
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return mem{}, err
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}()

	deadline := time.Now().Add(10 * time.Minute)
	for {
		var s admin.Status
		if err := getJSON("http://"+adminAddr+admin.PathStatus, &s); err == nil && s.TableVersion == version && s.TableEntries == n {
			if resp, err := http.Get("http://" + adminAddr + admin.PathReadyz); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
		}
		if time.Now().After(deadline) {
			return mem{}, fmt.Errorf("interceptor did not serve %d entries in time (log %s)", n, logf.Name())
		}
		time.Sleep(200 * time.Millisecond)
	}
	var m mem
	if traffic != "" {
		if m.requests, err = requestEvery(addrs[0], n, traffic.want()); err != nil {
			return m, fmt.Errorf("%w (log %s)", err, logf.Name())
		}
	}
	time.Sleep(settle)
	if m.rss, m.hwm, m.rssFile, err = procStatus(cmd.Process.Pid); err != nil {
		return m, err
	}
	metrics, err := getText("http://" + adminAddr + admin.PathMetrics)
	if err != nil {
		return m, err
	}
	m.heapInuse = metric(metrics, "go_memstats_heap_inuse_bytes") / (1 << 20)
	m.heapAlloc = metric(metrics, "go_memstats_heap_alloc_bytes") / (1 << 20)
	// The heap goal is what the heap grows to before the next collection when requests allocate:
	// it bounds the heap under traffic, which an idle process does not reach.
	m.heapGoal = metric(metrics, "go_memstats_next_gc_bytes") / (1 << 20)
	m.goroutines = metric(metrics, "go_goroutines")
	if traffic != "" {
		if m.scrapeBytes, m.series, m.appSeries, err = scrape(adminAddr); err != nil {
			return m, err
		}
	}
	// After RSS and /metrics were read: a collection, then the heap it left (the text profile ends
	// with runtime.MemStats read after it).
	text, err := getText("http://" + pprofAddr + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return m, err
	}
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, "# HeapAlloc = "); ok {
			b, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			m.liveHeap = b / (1 << 20)
		}
	}
	if prof != "" {
		data, err := getText("http://" + pprofAddr + "/debug/pprof/heap") // the collection above's profile
		if err != nil {
			return m, err
		}
		if err := os.WriteFile(prof, []byte(data), 0o644); err != nil {
			return m, err
		}
	}
	return m, nil
}

// procStatus returns VmRSS, VmHWM and RssFile of pid in MiB.
func procStatus(pid int) (rss, hwm, file float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			hwm = kb / 1024
		case "RssFile:":
			file = kb / 1024
		}
	}
	return rss, hwm, file, sc.Err()
}

func metric(text, name string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, name+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(l[len(name)+1:]), 64)
			return v
		}
	}
	return 0
}

func getJSON(url string, v any) error {
	body, err := getText(url)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(body), v)
}

func getText(url string) (string, error) {
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
