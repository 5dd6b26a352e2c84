// Command soak runs httpscale on the local cluster with real nodes (hack/cluster, the chart's pods as
// the e2e suite installs them) for a long time under steady traffic and churn, and samples every
// component's resident memory, goroutines, open file descriptors and routing-table version:
//
//   - steady traffic: -rate requests a second, spread over -warm warm apps through the interceptor
//     Service, each on a new connection (so kube-proxy spreads them over the interceptors);
//   - waves: every -wave-every, an app at zero gets -wave-concurrency requests in flight for
//     -wave-for (0 → N through KEDA and the HPA), then nothing (N → 0 after its scaledown period);
//   - object churn: every -churn-every, a new HTTPScaledObject (with its Deployment at zero and its
//     Service) is created, routed, woken by one request (0 → 1), changed (a second host), and deleted
//     with its workload a while later;
//   - samples: every -sample-every, each pod of the chart (process_resident_memory_bytes,
//     go_goroutines, process_open_fds from its /metrics; the table version from the interceptors'
//     admin /status and the operator's routing-table head), and KEDA's operator and kube-apiserver
//     processes (from /proc).
//
// Every request must be answered 200. At the end it writes samples.csv, requests.csv and soak.png
// (the samples over time) to -out and prints a summary: requests and failures per kind, and per
// component the first, last and largest values after the warm-up and the resident memory's slope.
// The cluster is started (or reused) as the e2e suite does it, under its name (-cluster). It uses the
// machine's real nodes as the e2e suite does, so never run both at once (one cluster at a time per
// machine; with flock, pass -o so the cluster's processes do not inherit the lock):
//
//	flock -o "$E2E_LOCK" go run ./hack/bench/soak -cluster soak -duration 2h -out /tmp/soak
//
// See docs/benchmarks.md#soak.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/httpscale/httpscale/e2e/framework"
)

type options struct {
	cluster               string
	duration, warmup      time.Duration
	out                   string
	warm                  int
	rate                  int
	waveEvery, waveFor    time.Duration
	waveConcurrency       int
	churnEvery, churnLife time.Duration
	sampleEvery           time.Duration
	keep                  bool
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run() error {
	var o options
	flag.StringVar(&o.cluster, "cluster", "soak", "name of the local cluster (started, or reused when healthy)")
	flag.DurationVar(&o.duration, "duration", 2*time.Hour, "how long traffic and churn run")
	flag.DurationVar(&o.warmup, "warmup", 10*time.Minute, "samples before this are left out of the flatness figures")
	flag.StringVar(&o.out, "out", "soak-out", "directory for samples.csv, requests.csv and soak.png")
	flag.IntVar(&o.warm, "warm", 3, "warm apps (one replica each, never at zero)")
	flag.IntVar(&o.rate, "rate", 20, "requests a second to the warm apps")
	flag.DurationVar(&o.waveEvery, "wave-every", 6*time.Minute, "period of the 0 → N → 0 waves")
	flag.DurationVar(&o.waveFor, "wave-for", 90*time.Second, "how long a wave's load lasts")
	flag.IntVar(&o.waveConcurrency, "wave-concurrency", 24, "requests in flight during a wave (1 s each at the app; target 8 per replica)")
	flag.DurationVar(&o.churnEvery, "churn-every", 30*time.Second, "a new HTTPScaledObject this often")
	flag.DurationVar(&o.churnLife, "churn-life", 2*time.Minute, "how long a churned object lives")
	flag.DurationVar(&o.sampleEvery, "sample-every", 30*time.Second, "sampling period")
	flag.BoolVar(&o.keep, "keep", false, "leave the cluster running afterwards")
	flag.Parse()
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Setenv(framework.EnvCluster, o.cluster)
	if o.keep {
		os.Setenv(framework.EnvKeep, "1")
	}
	log := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[soak %s] %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	log("starting or reusing cluster %s, installing the chart", o.cluster)
	f, err := framework.Start(ctx, os.Stderr)
	if err != nil {
		return err
	}
	defer func() {
		if err := f.Stop(os.Stderr); err != nil {
			log("stopping the cluster: %v", err)
		}
	}()

	w, err := newWorkload(ctx, f, o, log)
	if err != nil {
		return err
	}
	defer w.cleanup()
	s := newSampler(f, log)
	res, err := w.run(ctx, s)
	if err != nil {
		return err
	}
	samples := s.all()
	if err := writeCSV(filepath.Join(o.out, "samples.csv"), samples); err != nil {
		return err
	}
	if err := writeRequests(filepath.Join(o.out, "requests.csv"), res); err != nil {
		return err
	}
	if err := plotSamples(filepath.Join(o.out, "soak.png"), samples, res.start); err != nil {
		return err
	}
	fmt.Print(summarize(samples, res, o.warmup))
	if res.failed() > 0 {
		return fmt.Errorf("%d requests failed (see %s)", res.failed(), filepath.Join(o.out, "requests.csv"))
	}
	return nil
}
