// Command cluster runs httpscale's local control plane inside a network namespace:
//
//	go run ./hack/cluster [flags] up|down|status|env|logs|install-chart|load
//
// See docs/local-cluster.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func run() error {
	name := envOr("HTTPSCALE_CLUSTER_NAME", "demo")
	fs := flag.NewFlagSet("cluster", flag.ContinueOnError)
	fs.StringVar(&name, "name", name, "Cluster name: network namespace httpscale-<name>, state in $TMPDIR/httpscale-cluster-<name>. Env HTTPSCALE_CLUSTER_NAME.")
	pre, err := peekName(os.Args[1:])
	if err != nil {
		return err
	}
	if pre != "" {
		name = pre
	}
	cfg := localcluster.Default(name, repoRoot())
	fs.StringVar(&cfg.Dir, "dir", cfg.Dir, "State directory (pids, logs, pki, kubeconfigs).")
	fs.BoolVar(&cfg.KEDA, "keda", cfg.KEDA, "Run KEDA's operator and metrics adapter.")
	fs.BoolVar(&cfg.DNS, "dns", cfg.DNS, "Run CoreDNS as the cluster DNS (on "+cfg.DNSIP+"; cluster.local only, nothing forwarded).")
	realNodes := fs.Bool("real-nodes", false, "Add two real nodes (kubelet, containerd, runc), a local image registry and kube-proxy; Services move to "+cfg.WithRealNodes().ServiceCIDR+". See docs/local-cluster.md.")
	fs.IntVar(&cfg.APIServerPort, "apiserver-port", cfg.APIServerPort, "kube-apiserver port (on "+cfg.HostIP+" inside the namespace).")
	fs.IntVar(&cfg.EtcdPort, "etcd-port", cfg.EtcdPort, "etcd client port (127.0.0.1 inside the namespace).")
	fs.IntVar(&cfg.EtcdPeerPort, "etcd-peer-port", cfg.EtcdPeerPort, "etcd peer port.")
	fs.IntVar(&cfg.KCMPort, "controller-manager-port", cfg.KCMPort, "kube-controller-manager secure port.")
	fs.IntVar(&cfg.SchedulerPort, "scheduler-port", cfg.SchedulerPort, "kube-scheduler secure port.")
	fs.IntVar(&cfg.KwokPort, "kwok-port", cfg.KwokPort, "kwok server port.")
	fs.IntVar(&cfg.KEDAAdapterPort, "keda-adapter-port", cfg.KEDAAdapterPort, "KEDA metrics adapter port (on "+cfg.KEDAAdapterIP+").")
	fs.IntVar(&cfg.KEDAGRPCPort, "keda-grpc-port", cfg.KEDAGRPCPort, "KEDA operator metrics service (gRPC) port.")
	fs.IntVar(&cfg.KEDAPortBase, "keda-port-base", cfg.KEDAPortBase, "KEDA operator metrics, probes and adapter metrics use this port and the next two.")
	fs.IntVar(&cfg.SampleAppPort, "sample-app-port", cfg.SampleAppPort, "Port of the sample-app process answering on every kwok pod IP; 0 disables it (--real-nodes sets 0: the sample app runs as real pods of its image, pushed by install-chart).")
	fs.DurationVar(&cfg.StopTimeout, "stop-timeout", cfg.StopTimeout, "Time between SIGTERM and SIGKILL when stopping a process.")
	fs.DurationVar(&cfg.ReadyTimeout, "ready-timeout", cfg.ReadyTimeout, "Bound of each readiness wait.")
	loadURL := fs.String("url", "", "load: URL to send GET requests to (inside the namespace).")
	loadHost := fs.String("host", "", "load: Host header.")
	loadConc := fs.Int("c", 50, "load: concurrent requests.")
	loadTotal := fs.Int("n", 200, "load: total requests.")
	loadTimeout := fs.Duration("timeout", 2*time.Minute, "load: timeout of one request.")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: go run ./hack/cluster [flags] up|down|status|env|logs|install-chart|load")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		fs.Usage()
		return errors.New("want a subcommand")
	}
	sub := fs.Arg(0)
	// Flags may also follow the subcommand.
	if err := fs.Parse(fs.Args()[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *realNodes {
		cfg = cfg.WithRealNodes()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// A running cluster's own recorded configuration wins over flags for everything but up.
	state, stateErr := localcluster.LoadState(cfg.Dir)
	switch sub {
	case "up":
		if stateErr == nil {
			if err := state.Healthy(ctx); err == nil {
				fmt.Fprintf(os.Stderr, "[cluster] %s is already up (%s)\n", name, cfg.Dir)
				printEnv(state)
				return nil
			} else {
				fmt.Fprintf(os.Stderr, "[cluster] %s is unhealthy (%v); restarting it\n", name, err)
			}
		}
		if err := cfg.Down(os.Stderr); err != nil {
			return err
		}
		t0 := time.Now()
		if err := cfg.ResolveTools(os.Stderr); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "[cluster] tools ready in %.1fs\n", time.Since(t0).Seconds())
		if err := cfg.Up(ctx, os.Stderr); err != nil {
			return err
		}
		printEnv(cfg)
		return nil
	case "down":
		if stateErr == nil {
			cfg = state
		}
		return cfg.Down(os.Stderr)
	case "status":
		if stateErr != nil {
			ps, _ := cfg.Processes()
			if len(ps) == 0 {
				return fmt.Errorf("cluster %s is not up", name)
			}
		} else {
			cfg = state
		}
		ps, err := cfg.Processes()
		if err != nil {
			return err
		}
		for _, p := range ps {
			st := "running"
			if !p.Alive() {
				st = "DEAD"
			}
			fmt.Printf("%-32s pid %-8d %-8s %s\n", p.Name, p.PID, st, p.LogFile)
		}
		if err := cfg.Healthy(ctx); err != nil {
			return fmt.Errorf("unhealthy: %w", err)
		}
		fmt.Println("healthy")
		return nil
	case "env":
		if stateErr != nil {
			return stateErr
		}
		printEnv(state)
		return nil
	case "logs":
		cfg.DumpLogs(os.Stdout, 60)
		return nil
	case "load":
		if stateErr != nil {
			return stateErr
		}
		if *loadURL == "" {
			return errors.New("load needs --url")
		}
		r := state.Load(ctx, *loadURL, *loadHost, *loadConc, *loadTotal, *loadTimeout)
		fmt.Println(r)
		for _, e := range r.Errors {
			fmt.Println("  error:", e)
		}
		return nil
	case "install-chart":
		if stateErr != nil {
			return stateErr
		}
		_, err := state.InstallHTTPScale(ctx, os.Stderr)
		return err
	default:
		fs.Usage()
		return fmt.Errorf("unknown subcommand %q", sub)
	}
}

// peekName finds --name before the flag set is built, because the defaults depend on it.
func peekName(args []string) (string, error) {
	for i, a := range args {
		switch {
		case a == "--name" || a == "-name":
			if i+1 >= len(args) {
				return "", errors.New("--name needs a value")
			}
			return args[i+1], nil
		case strings.HasPrefix(a, "--name=") || strings.HasPrefix(a, "-name="):
			_, v, _ := strings.Cut(a, "=")
			return v, nil
		}
	}
	return "", nil
}

func printEnv(c localcluster.Config) {
	fmt.Printf("export HTTPSCALE_CLUSTER_DIR=%s\n", c.Dir)
	fmt.Printf("export HTTPSCALE_NETNS=%s\n", c.NetNS)
	fmt.Printf("export KUBECONFIG=%s\n", c.AdminKubeconfig())
	fmt.Printf("export PATH=%s:$PATH\n", filepath.Join(c.Dir, "bin"))
	if c.RealNodes {
		fmt.Printf("export HTTPSCALE_SAMPLEAPP_IMAGE=%s\n", c.SampleAppImage())
	}
	fmt.Printf("# kubectl in that PATH runs inside the namespace; for anything else: netns-exec <command>\n")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
