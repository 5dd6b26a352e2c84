package main

import (
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/routing"
)

func TestParseWritesCountsMutatingVerbsPerResource(t *testing.T) {
	text := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
apiserver_request_total{code="201",component="apiserver",dry_run="",group="http.httpscale.dev",resource="httpscaledobjects",scope="resource",subresource="",verb="POST",version="v1alpha1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="http.httpscale.dev",resource="httpscaledobjects",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 150
apiserver_request_total{code="409",component="apiserver",dry_run="",group="http.httpscale.dev",resource="httpscaledobjects",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 50
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="LIST",version="v1"} 999
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="DELETE",version="v1"} 3
apiserver_request_duration_seconds_count{verb="POST",resource="configmaps"} 7
`
	got := parseWrites(text)
	want := map[string]float64{"POST httpscaledobjects": 100, "PATCH httpscaledobjects/status": 200, "DELETE configmaps": 3}
	if len(got) != len(want) {
		t.Fatalf("parseWrites = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	before := writeCounts{"POST httpscaledobjects": 50, "PATCH httpscaledobjects/status": 100, "DELETE configmaps": 3}
	s := perObject(before, got, 50)
	if !strings.HasPrefix(s, "3.00 per object in all (150 writes); PATCH httpscaledobjects/status 2.00; POST httpscaledobjects 1.00") || strings.Contains(s, "configmaps") {
		t.Errorf("perObject = %q", s)
	}
}

func TestParseLabelsUnescapes(t *testing.T) {
	got := parseLabels(`a="x",b="say \"hi\"",c="back\\slash",d=""`)
	want := map[string]string{"a": "x", "b": `say "hi"`, "c": `back\slash`, "d": ""}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q (all %v)", k, got[k], v, got)
		}
	}
}

func TestBusyFromSumsQueuesAndActiveWorkers(t *testing.T) {
	text := `workqueue_depth{controller="httpscaledobject",name="httpscaledobject",priority=""} 3
workqueue_depth{controller="route",name="route",priority=""} 0
controller_runtime_active_workers{controller="route"} 2
workqueue_adds_total{controller="route",name="route"} 40000
`
	if got := busyFrom(text); got != 5 {
		t.Errorf("busyFrom = %d, want 5", got)
	}
	if got := busyFrom("workqueue_depth{name=\"x\"} 0\n"); got != 0 {
		t.Errorf("busyFrom of an idle operator = %d, want 0", got)
	}
}

func TestDiffTableCountsShardsAndHead(t *testing.T) {
	head := routing.DefaultBaseName
	before := tableState{head: "10", head + "-aaa-0": "5", head + "-bbb-1": "6", head + "-ccc-2": "7"}
	after := tableState{head: "12", head + "-aaa-0": "5", head + "-ddd-1": "11", head + "-ccc-2": "7"}
	d := diffTable(before, after)
	if d.created != 1 || d.deleted != 1 || d.rewritten != 0 || !d.head || d.shards != 3 {
		t.Errorf("one changed shard: %+v", d)
	}
	if s := d.String(); s != "+1 -1 head" {
		t.Errorf("String = %q", s)
	}
	after2 := tableState{head: "12", head + "-aaa-0": "9", head + "-ddd-1": "11", head + "-ccc-2": "7"}
	if d := diffTable(after, after2); d.created != 0 || d.deleted != 0 || d.rewritten != 1 || d.head || d.String() != "+0 -0 ~1" {
		t.Errorf("a shard rewritten in place, head unchanged: %+v %q", d, d.String())
	}
}

func TestParseWrk(t *testing.T) {
	ok := `Running 10s test @ http://127.0.0.1:40000/
  2 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     3.02ms    1.10ms  30.00ms   90.00%
    Req/Sec    10.50k     1.00k   12.00k    70.00%
  210000 requests in 10.00s, 25.00MB read
Requests/sec:  20999.50
Transfer/sec:      2.50MB
`
	w, err := parseWrk(ok)
	if err != nil || w.rps != 20999.5 || w.requests != 210000 {
		t.Errorf("parseWrk = %+v, %v", w, err)
	}
	if _, err := parseWrk(strings.Replace(ok, "Requests/sec", "  Non-2xx or 3xx responses: 12\nRequests/sec", 1)); err == nil || !strings.Contains(err.Error(), "Non-2xx") {
		t.Errorf("non-2xx answers: err %v, want one naming them", err)
	}
	if _, err := parseWrk("  Socket errors: connect 64, read 0, write 0, timeout 0\n" + ok); err == nil {
		t.Error("socket errors: no error")
	}
	if _, err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused\n"); err == nil {
		t.Error("no summary: no error")
	}
}

func TestStatTicksAndStatusFields(t *testing.T) {
	stat := "4242 (inter ceptor) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0 100 1000 500"
	if got, err := statTicks(stat); err != nil || got != 325 {
		t.Errorf("statTicks = %d, %v; want 325", got, err)
	}
	if _, err := statTicks("garbage"); err == nil {
		t.Error("statTicks of garbage: no error")
	}
	status := "Name:\tinterceptor\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\n"
	if rss, hwm := statusKiB(status, "VmRSS:"), statusKiB(status, "VmHWM:"); rss != 102400 || hwm != 204800 {
		t.Errorf("statusKiB = %d, %d", rss, hwm)
	}
	if got := statusKiB(status, "VmSwap:"); got != -1 {
		t.Errorf("absent field = %d, want -1", got)
	}
}

func TestMemStatsSummary(t *testing.T) {
	// The end of a heap profile's text form (net/http/pprof, debug=1).
	text := `heap profile: 1: 2 [3: 4] @ heap/1048576
# runtime.MemStats
# Alloc = 28311552
# HeapIdle = 20971520
# HeapInuse = 31457280
# HeapReleased = 8388608
# Stack = 2097152 / 2097152
# MSpan = 1048576 / 1310720
# MCache = 0 / 0
# BuckHashSys = 1048576
# GCSys = 3145728
# OtherSys = 1048576
# NextGC = 73400320
`
	want := "go: heap in use 30, free not released 12, stacks 2, runtime 6, next GC 70 MiB"
	if got := memStatsSummary(text); got != want {
		t.Errorf("memStatsSummary = %q, want %q", got, want)
	}
	if got := memStatsSummary("not a profile"); got != "go: no MemStats" {
		t.Errorf("memStatsSummary of garbage = %q", got)
	}
}

func TestStatsNearestRank(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 20; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	ds = append(ds, missing)
	if got := stats(ds); got != "10/20/20" {
		t.Errorf("stats = %q, want 10/20/20", got)
	}
	if got := stats([]time.Duration{missing}); got != "-" {
		t.Errorf("stats of nothing = %q", got)
	}
	if got := span([]int{1, 1, 3}); got != "1–3" {
		t.Errorf("span = %q", got)
	}
}
