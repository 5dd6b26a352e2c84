// Command sampleapp is the stand-in application of the local cluster. It reports which pod IP and zone
// a request reached, taken from the local address of the connection (zones from --zone CIDR=zone).
// The e2e suite and `make demo` run it as real pods of its own image on the real nodes, one process per
// pod; on kwok's fake nodes one process listening on 0.0.0.0 inside the cluster's network namespace
// answers for every pod IP (the node pod CIDRs are local there).
//
//	GET /anything?sleep=200ms&status=503 -> waits, then answers with that status and a JSON report
//
// With --listen-delay the process waits that long after it started before it listens, as an app that
// loads before it serves; every answer says when the process started and when it began to listen
// (startedAt, listeningAt), so a test can tell the app's own start from the time around it.
//
// With --admin, requests carrying ?rid=<id> are counted per id; GET <admin>/requests returns the counts
// of this process as JSON (so a test can prove no request was lost or answered twice, summing over
// pods) and DELETE resets them. GET <admin>/stats returns {"recent": N}, the requests this process
// answered in the last 10 seconds (readiness probes on /ready not counted): a traffic metric a KEDA
// metrics-api trigger can read.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Report is the JSON body of every answer.
type Report struct {
	PodIP  string `json:"podIP"`
	Zone   string `json:"zone"`
	Port   int    `json:"port"`
	Host   string `json:"host"`
	Method string `json:"method"`
	Path   string `json:"path"`
	// Headers are the request headers (first value each), for routing checks.
	Headers map[string]string `json:"headers"`
	// StartedAt is when the process started, ListeningAt when it began to listen (RFC 3339, ns).
	StartedAt   string `json:"startedAt"`
	ListeningAt string `json:"listeningAt"`
}

type zones []struct {
	prefix netip.Prefix
	zone   string
}

func (z *zones) String() string { return fmt.Sprint(*z) }

// Set parses CIDR=zone.
func (z *zones) Set(s string) error {
	cidr, zone, ok := strings.Cut(s, "=")
	if !ok {
		return fmt.Errorf("want CIDR=zone, got %q", s)
	}
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return err
	}
	*z = append(*z, struct {
		prefix netip.Prefix
		zone   string
	}{p, zone})
	return nil
}

func (z zones) lookup(ip netip.Addr) string {
	for _, e := range z {
		if e.prefix.Contains(ip) {
			return e.zone
		}
	}
	return ""
}

type listens []string

// recentWindow is the span of Report's recent count, in seconds.
const recentWindow = 10

// recent counts requests per second over the last recentWindow seconds.
type recent struct {
	mu      sync.Mutex
	buckets [recentWindow]struct{ sec, n int64 }
}

func (r *recent) add(now time.Time) {
	sec := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	b := &r.buckets[sec%recentWindow]
	if b.sec != sec {
		b.sec, b.n = sec, 0
	}
	b.n++
}

// sum is the count of the last recentWindow seconds, the current one included.
func (r *recent) sum(now time.Time) int64 {
	sec := now.Unix()
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, b := range r.buckets {
		if sec-b.sec < recentWindow {
			n += b.n
		}
	}
	return n
}

func (l *listens) String() string     { return strings.Join(*l, ",") }
func (l *listens) Set(s string) error { *l = append(*l, s); return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sampleapp:", err)
		os.Exit(1)
	}
}

func run() error {
	started := time.Now()
	var z zones
	var ls listens
	flag.Var(&ls, "listen", "Address to listen on (repeatable; default 0.0.0.0:8000).")
	flag.Var(&z, "zone", "CIDR=zone: the zone reported for pod IPs in CIDR (repeatable).")
	admin := flag.String("admin", "", "Address serving /requests (counts of requests per ?rid=); empty disables it.")
	listenDelay := flag.Duration("listen-delay", 0, "How long after the process started it begins to listen.")
	flag.Parse()
	var listening time.Time
	var counts sync.Map // rid -> *atomic.Int64
	var last recent
	if len(ls) == 0 {
		ls = listens{"0.0.0.0:8000"}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		ap, _ := netip.ParseAddrPort(local.String())
		rep := Report{
			PodIP: ap.Addr().Unmap().String(), Zone: z.lookup(ap.Addr().Unmap()), Port: int(ap.Port()),
			Host: r.Host, Method: r.Method, Path: r.URL.Path, Headers: map[string]string{},
			StartedAt: started.Format(time.RFC3339Nano), ListeningAt: listening.Format(time.RFC3339Nano),
		}
		for k := range r.Header {
			rep.Headers[k] = r.Header.Get(k)
		}
		if r.URL.Path != "/ready" {
			last.add(time.Now())
		}
		if rid := r.URL.Query().Get("rid"); rid != "" {
			n, _ := counts.LoadOrStore(rid, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		}
		if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil && d > 0 {
			select {
			case <-time.After(d):
			case <-r.Context().Done():
				return
			}
		}
		status := http.StatusOK
		if s, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil && s >= 200 && s < 600 {
			status = s
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Pod-IP", rep.PodIP)
		w.Header().Set("X-Zone", rep.Zone)
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(rep)
	})

	handlers := map[string]http.Handler{}
	for _, addr := range ls {
		handlers[addr] = handler
	}
	if *admin != "" {
		ls = append(ls, *admin)
		handlers[*admin] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/stats" {
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(map[string]int64{"recent": last.sum(time.Now())})
				return
			}
			if r.URL.Path != "/requests" {
				http.NotFound(w, r)
				return
			}
			if r.Method == http.MethodDelete {
				counts.Clear()
				return
			}
			out := map[string]int64{}
			counts.Range(func(k, v any) bool {
				out[k.(string)] = v.(*atomic.Int64).Load()
				return true
			})
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(out)
		})
	}

	select {
	case <-time.After(time.Until(started.Add(*listenDelay))):
	case <-ctx.Done():
		return nil
	}
	listening = time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, len(ls))
	var servers []*http.Server
	for _, addr := range ls {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listening on %s: %w", addr, err)
		}
		srv := &http.Server{Handler: handlers[addr], ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		fmt.Fprintf(os.Stderr, "sampleapp: listening on %s\n", l.Addr())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		_ = s.Shutdown(shutdown)
	}
	wg.Wait()
	return nil
}
