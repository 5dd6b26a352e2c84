package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
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
