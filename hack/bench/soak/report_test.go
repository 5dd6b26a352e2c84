package main

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSlopeIsMiBPerHour(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var s []sample
	for i := range 13 { // 2 hours, every 10 minutes, +3 MiB an hour
		s = append(s, sample{at: t0.Add(time.Duration(i) * 10 * time.Minute), rssMiB: 80 + 3*float64(i)/6})
	}
	if got := slope(s); math.Abs(got-3) > 1e-9 {
		t.Errorf("slope = %v MiB/hour, want 3", got)
	}
}

func TestReportAndPlot(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var samples []sample
	for i := range 20 {
		at := t0.Add(time.Duration(i) * time.Minute)
		samples = append(samples,
			sample{at: at, component: "interceptor", name: "httpscale-interceptor-5c9f-abcde", rssMiB: 90, goroutines: 100, fds: 30, table: "v1"},
			sample{at: at, component: "kube-apiserver", name: "kube-apiserver", rssMiB: 400, goroutines: -1, fds: 200})
	}
	r := results{start: t0, end: t0.Add(20 * time.Minute), reqs: []request{
		{kind: "steady", status: 200}, {kind: "steady", status: 502, sent: t0.Add(time.Minute)}, {kind: "wave", status: 200},
	}}
	out := summarize(samples, r, 5*time.Minute)
	for _, want := range []string{"requests steady        2, failed 1", "requests wave          1, failed 0", "interceptor …abcde", "kube-apiserver"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	png := filepath.Join(t.TempDir(), "soak.png")
	if err := plotSamples(png, samples, t0); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Fatalf("plot is not a PNG: %v, %d bytes", err, len(data))
	}
}

func TestProcFiguresOfThisProcess(t *testing.T) {
	rss, fds, err := procFigures(os.Getpid())
	if err != nil || rss <= 0 || fds < 3 {
		t.Errorf("procFigures(self) = %v MiB, %v fds, %v", rss, fds, err)
	}
}

// The summary's figures are of the samples after the warm-up only: a start-up spike does not count,
// a process whose memory keeps growing shows it as its slope, restarts and table versions are counted.
func TestSummaryLeavesOutTheWarmupAndShowsGrowth(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	var samples []sample
	for i := range 25 { // 2 hours, every 5 minutes
		at := t0.Add(time.Duration(i) * 5 * time.Minute)
		flat := 90.0
		if i < 2 {
			flat = 300 // the warm-up's spike
		}
		restarts := 0
		if i >= 20 {
			restarts = 1
		}
		samples = append(samples,
			sample{at: at, component: "interceptor", name: "httpscale-interceptor-5c9f-flat1", rssMiB: flat, goroutines: 100, fds: 30, table: fmt.Sprintf("v%d", i/5)},
			sample{at: at, component: "operator", name: "httpscale-operator-7d8e-leak1", rssMiB: 100 + 6*at.Sub(t0).Hours(), goroutines: 50, fds: 20, restarts: restarts})
	}
	out := summarize(samples, results{start: t0, end: t0.Add(2 * time.Hour)}, 10*time.Minute)
	lines := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		for _, who := range []string{"flat1", "leak1"} {
			if strings.Contains(l, who) {
				lines[who] = strings.Join(strings.Fields(l), " ")
			}
		}
	}
	// name, first, last, max RSS, MiB/hour, goroutines, fds, restarts, table versions
	if want := "interceptor …flat1 90.0 90.0 90.0 0.00 100/100/100 30/30/30 0, 5"; lines["flat1"] != want {
		t.Errorf("flat process: %q, want %q\n%s", lines["flat1"], want, out)
	}
	if want := "operator …leak1 101.0 112.0 112.0 6.00 50/50/50 20/20/20 1, 0"; lines["leak1"] != want {
		t.Errorf("growing process: %q, want %q\n%s", lines["leak1"], want, out)
	}
}

// samples.csv has a row per sample; requests.csv lists every failed request and counts per minute.
func TestCSVFiles(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	samples := []sample{{at: t0, component: "scaler", name: "httpscale-scaler-1", rssMiB: 31.25, goroutines: 40, fds: 12, restarts: 2, table: ""}}
	if err := writeCSV(filepath.Join(dir, "samples.csv"), samples); err != nil {
		t.Fatal(err)
	}
	r := results{start: t0, reqs: []request{
		{kind: "steady", app: "warm-0", sent: t0.Add(10 * time.Second), took: 3 * time.Millisecond, status: 200},
		{kind: "steady", app: "warm-1", sent: t0.Add(20 * time.Second), took: 5 * time.Second, err: "timeout"},
		{kind: "wave", app: "wave", sent: t0.Add(70 * time.Second), took: 2 * time.Second, status: 200},
	}}
	if err := writeRequests(filepath.Join(dir, "requests.csv"), r); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][][]string{
		"samples.csv": {
			{"time", "component", "name", "rss_mib", "goroutines", "open_fds", "restarts", "table_version"},
			{"2026-11-27T10:00:00Z", "scaler", "httpscale-scaler-1", "31.2", "40", "12", "2", ""},
		},
		"requests.csv": {
			{"minute", "kind", "requests", "failed", "max_ms", "failure"},
			{"0", "steady", "", "", "5000", "steady warm-1 at 10:00:20.000: 0 timeout"},
			{"0", "steady", "2", "1", "5000", ""},
			{"1", "wave", "1", "0", "2000", ""},
		},
	} {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}
