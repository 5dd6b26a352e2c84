package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/pkg/routing"
)

// refTable is the base name of the one-route table the reference interceptor reads.
const refTable = "bench-one-route"

// clockTicks is USER_HZ (getconf CLK_TCK), 100 on every Linux architecture Go supports.
const clockTicks = 100

// throughput compares wrk's throughput through ic, which routes all n apps of the operator's table,
// with a reference interceptor of the same binary that routes one of them (web-0: the same entry,
// copied from the operator's table into a table of its own), both to one backend listening on
// c.endpointIP, in interleaved rounds. The backend's address is in an EndpointSlice, which the API
// server refuses for loopback addresses: run the bench in a network namespace with another address
// on its loopback device (see the package comment).
func throughput(ctx context.Context, k8s client.Client, c config, bins binaries, kubeconfig string, ic *interceptor) error {
	l, err := net.Listen("tcp", net.JoinHostPort(c.endpointIP, "0"))
	if err != nil {
		return fmt.Errorf("-endpoint-ip %s: %w", c.endpointIP, err)
	}
	backendAddr := l.Addr().(*net.TCPAddr)
	l.Close()
	be, err := startProc("backend", bins.backend, []string{"-listen", backendAddr.String()})
	if err != nil {
		return err
	}
	defer be.stop()

	// The Service "app" of namespace app-0 (every app there targets it) gets the backend as its
	// one ready endpoint.
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "app-bench", Namespace: nsName(0), Labels: map[string]string{discoveryv1.LabelServiceName: "app"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{c.endpointIP},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			Zone:       ptr.To("zone-a"),
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(backendAddr.Port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if err := k8s.Create(ctx, es); err != nil {
		return fmt.Errorf("creating the backend's EndpointSlice: %w", err)
	}
	entry, err := operatorEntry(ctx, k8s, nsName(0), "web-0")
	if err != nil {
		return err
	}
	if err := writeOneRouteTable(ctx, k8s, entry); err != nil {
		return err
	}
	ref, err := startInterceptor("interceptor-ref", bins.interceptorBin(0), kubeconfig, "--routing-table-name", refTable)
	if err != nil {
		return err
	}
	defer ref.stop()
	if err := waitEntries(ctx, ref.statusURL(), 1, time.Minute, 100*time.Millisecond, ref.proc); err != nil {
		return fmt.Errorf("reference interceptor: %w", err)
	}
	host := entry.Hosts[0]
	for _, x := range []*interceptor{ic, ref} {
		if err := waitAnswer(ctx, x, host, time.Minute); err != nil {
			return err
		}
	}

	l0, _ := readLoad()
	fmt.Printf("\n# throughput: wrk -t2 -c%d -d%s, Host %s, through %s (%d routes) and %s (1 route, the same entry), backend %s; load %s\n",
		c.conns, c.tput, host, ic.name, c.tputRoutes, ref.name, backendAddr, l0)
	fmt.Printf("%-6s %-14s %12s %10s %12s %10s %8s\n", "round", "first", "N req/s", "N µs/req", "1 req/s", "1 µs/req", "N / 1")
	var ratios []float64
	var sumN, sum1 float64
	for r := 0; r < c.rounds; r++ {
		order := []*interceptor{ic, ref}
		if r%2 == 1 {
			order = []*interceptor{ref, ic}
		}
		res := map[*interceptor]wrkResult{}
		for _, x := range order {
			w, err := wrkRound(ctx, x, host, c)
			if err != nil {
				return err
			}
			res[x] = w
		}
		n, one := res[ic], res[ref]
		ratio := n.rps / one.rps
		ratios = append(ratios, ratio)
		sumN += n.rps
		sum1 += one.rps
		fmt.Printf("%-6d %-14s %12.0f %10.1f %12.0f %10.1f %8.3f\n", r, order[0].name, n.rps, n.cpuMicros, one.rps, one.cpuMicros, ratio)
	}
	slices.Sort(ratios)
	l1, _ := readLoad()
	fmt.Printf("# throughput with %d routes / with 1 route: median %.3f, min %.3f, max %.3f, all rounds' requests %.3f; load %s\n",
		c.tputRoutes, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], sumN/sum1, l1)
	return nil
}

// operatorEntry returns the routing entry of namespace/name in the operator's stored table.
func operatorEntry(ctx context.Context, k8s client.Client, namespace, name string) (routing.Entry, error) {
	var list corev1.ConfigMapList
	if err := k8s.List(ctx, &list, client.InNamespace(installNS), client.MatchingLabels{routing.LabelTable: routing.DefaultBaseName}); err != nil {
		return routing.Entry{}, err
	}
	var head *corev1.ConfigMap
	var shards []*corev1.ConfigMap
	for i := range list.Items {
		if cm := &list.Items[i]; cm.Name == routing.DefaultBaseName {
			head = cm
		} else {
			shards = append(shards, cm)
		}
	}
	t, err := routing.FromConfigMaps(head, shards)
	if err != nil {
		return routing.Entry{}, fmt.Errorf("reading the operator's table: %w", err)
	}
	for e := range t.All() {
		if e.Namespace == namespace && e.Name == name {
			return *e, nil
		}
	}
	return routing.Entry{}, fmt.Errorf("the operator's table has no entry %s/%s", namespace, name)
}

// writeOneRouteTable stores a table holding only e under refTable.
func writeOneRouteTable(ctx context.Context, k8s client.Client, e routing.Entry) error {
	t, err := routing.NewTable([]routing.Entry{e})
	if err != nil {
		return err
	}
	m, shards, err := routing.Encode(t, routing.DefaultMaxShardBytes)
	if err != nil {
		return err
	}
	head, cms := routing.ToConfigMaps(installNS, refTable, m, shards)
	for _, cm := range append(cms, head) {
		if err := k8s.Create(ctx, cm); err != nil {
			return fmt.Errorf("writing the one-route table: %w", err)
		}
	}
	return nil
}

// waitAnswer waits until x answers a GET for host with 200.
func waitAnswer(ctx context.Context, x *interceptor, host string, bound time.Duration) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(bound)
	last := ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+x.proxy+"/", nil)
		req.Host = host
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("%s does not answer %s with 200 after %s: %s (log %s)", x.name, host, bound, last, x.log)
}

type wrkResult struct {
	rps       float64
	requests  float64
	cpuMicros float64 // the interceptor's CPU per request
}

// wrkRound runs wrk through x and measures x's CPU time over the run.
func wrkRound(ctx context.Context, x *interceptor, host string, c config) (wrkResult, error) {
	t0, err := x.cpuTicks()
	if err != nil {
		return wrkResult{}, err
	}
	cmd := exec.CommandContext(ctx, "wrk", "-t2", "-c"+strconv.Itoa(c.conns), "-d"+c.tput.String(), "-H", "Host: "+host, "http://"+x.proxy+"/")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("wrk through %s: %w\n%s", x.name, err, out)
	}
	t1, err := x.cpuTicks()
	if err != nil {
		return wrkResult{}, err
	}
	w, err := parseWrk(string(out))
	if err != nil {
		return w, fmt.Errorf("wrk through %s: %w", x.name, err)
	}
	w.cpuMicros = float64(t1-t0) / clockTicks * 1e6 / w.requests
	return w, nil
}

var (
	wrkRPS      = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
	wrkRequests = regexp.MustCompile(`([0-9]+) requests in`)
	wrkBad      = regexp.MustCompile(`(Non-2xx or 3xx responses|Socket errors):[^\n]*`)
)

// parseWrk reads wrk's summary; any non-2xx answer or socket error fails the round.
func parseWrk(out string) (wrkResult, error) {
	if m := wrkBad.FindString(out); m != "" {
		return wrkResult{}, fmt.Errorf("%s", strings.TrimSpace(m))
	}
	rps, reqs := wrkRPS.FindStringSubmatch(out), wrkRequests.FindStringSubmatch(out)
	if rps == nil || reqs == nil {
		return wrkResult{}, fmt.Errorf("no result in wrk's output:\n%s", out)
	}
	r, _ := strconv.ParseFloat(rps[1], 64)
	n, _ := strconv.ParseFloat(reqs[1], 64)
	if n == 0 {
		return wrkResult{}, fmt.Errorf("wrk sent no request:\n%s", out)
	}
	return wrkResult{rps: r, requests: n}, nil
}
