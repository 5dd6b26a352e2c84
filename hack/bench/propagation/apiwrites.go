package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// writeCounts maps "VERB resource[/subresource]" to the API server's count of such requests
// (apiserver_request_total, every response code), for mutating verbs only.
type writeCounts map[string]float64

// readWrites scrapes the API server's /metrics.
func readWrites(ctx context.Context, cs kubernetes.Interface) (writeCounts, error) {
	b, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return parseWrites(string(b)), nil
}

func parseWrites(text string) writeCounts {
	out := writeCounts{}
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		end := strings.LastIndex(rest, "} ")
		if end < 0 {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest[end+2:]), 64)
		if err != nil {
			continue
		}
		l := parseLabels(rest[:end])
		switch l["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		out[key] += v
	}
	return out
}

// parseLabels parses `a="x",b="y"` (Prometheus text format; \" and \\ escapes).
func parseLabels(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 || eq+1 >= len(s) || s[eq+1] != '"' {
			return out
		}
		name := strings.TrimSpace(s[:eq])
		var val strings.Builder
		i := eq + 2
		for ; i < len(s) && s[i] != '"'; i++ {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				if s[i] == 'n' {
					val.WriteByte('\n')
					continue
				}
			}
			val.WriteByte(s[i])
		}
		out[name] = val.String()
		s = strings.TrimPrefix(s[min(i+1, len(s)):], ",")
	}
	return out
}

// perObject formats the writes between two scrapes divided by objects, largest first.
func perObject(before, after writeCounts, objects int) string {
	type kv struct {
		k string
		v float64
	}
	var rows []kv
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			rows = append(rows, kv{k, d})
			total += d
		}
	}
	slices.SortFunc(rows, func(a, b kv) int {
		if a.v != b.v {
			if a.v > b.v {
				return -1
			}
			return 1
		}
		return strings.Compare(a.k, b.k)
	})
	var sb strings.Builder
	fmt.Fprintf(&sb, "%.2f per object in all (%.0f writes)", total/float64(objects), total)
	for _, r := range rows {
		fmt.Fprintf(&sb, "; %s %.2f", r.k, r.v/float64(objects))
	}
	return sb.String()
}

// operatorBusy returns the operator's queued and running reconciles (its controllers' work queues
// and active workers, from its /metrics).
func operatorBusy(hc *http.Client, metricsURL string) (int, error) {
	resp, err := hc.Get(metricsURL)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", metricsURL, resp.Status)
	}
	return busyFrom(string(b)), nil
}

func busyFrom(text string) int {
	busy := 0.0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "workqueue_depth{") && !strings.HasPrefix(line, "controller_runtime_active_workers{") {
			continue
		}
		if i := strings.LastIndexByte(line, ' '); i > 0 {
			v, _ := strconv.ParseFloat(line[i+1:], 64)
			busy += v
		}
	}
	return int(busy)
}

// waitQuiet waits until the operator has nothing queued or running for three polls in a row and
// then until n objects show status.routing.tableVersion (one paginated list per check: at 50,000
// objects a list is tens of MB, so it is not polled). It returns whether that happened within
// bound, and how many statuses the last list showed.
func waitQuiet(ctx context.Context, k8s client.Client, metricsURL string, n int, bound time.Duration) (bool, int, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(bound)
	quiet, shown := 0, -1
	for time.Now().Before(deadline) && ctx.Err() == nil {
		busy, err := operatorBusy(hc, metricsURL)
		if err != nil || busy > 0 {
			quiet = 0
			time.Sleep(time.Second)
			continue
		}
		if quiet++; quiet < 3 {
			time.Sleep(time.Second)
			continue
		}
		if shown, err = countStatuses(ctx, k8s); err != nil {
			return false, shown, err
		}
		if shown >= n {
			return true, shown, nil
		}
		quiet = 0
		time.Sleep(5 * time.Second)
	}
	return false, shown, ctx.Err()
}

// countStatuses counts the objects whose status shows a routing-table version.
func countStatuses(ctx context.Context, k8s client.Client) (int, error) {
	done, cont := 0, ""
	for {
		var list v1.HTTPScaledObjectList
		if err := k8s.List(ctx, &list, client.Limit(1000), client.Continue(cont)); err != nil {
			return done, fmt.Errorf("listing HTTPScaledObjects: %w", err)
		}
		for _, h := range list.Items {
			if h.Status.Routing != nil && h.Status.Routing.TableVersion != "" {
				done++
			}
		}
		if cont = list.Continue; cont == "" {
			return done, nil
		}
	}
}
