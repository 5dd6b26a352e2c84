package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// hosts is a loopback server that answers 200 and records every request's Host header.
func hosts(t *testing.T) (*httptest.Server, func() map[string]int) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Host]++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return srv, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}

func TestHostFlagSetsEveryRequestsHost(t *testing.T) {
	srv, seen := hosts(t)
	var out strings.Builder
	if err := run([]string{"-url", srv.URL + "/", "-host", "shop.example.com", "-rate", "100", "-duration", "200ms", "-warmup", "0s", "-name", "h"}, &out); err != nil {
		t.Fatal(err)
	}
	got := seen()
	if len(got) != 1 || got["shop.example.com"] != 20 {
		t.Errorf("hosts seen %v, want 20 requests all with Host shop.example.com", got)
	}
	if !strings.HasPrefix(out.String(), "h        rate=100 n=20 errors=0 p50=") {
		t.Errorf("output %q", out.String())
	}
}

func TestWithoutHostFlagTheURLsHostIsSent(t *testing.T) {
	srv, seen := hosts(t)
	if err := run([]string{"-url", srv.URL + "/", "-rate", "50", "-duration", "100ms", "-warmup", "0s"}, &strings.Builder{}); err != nil {
		t.Fatal(err)
	}
	if got := seen(); got[srv.Listener.Addr().String()] != 5 || len(got) != 1 {
		t.Errorf("hosts seen %v, want 5 requests with Host %s", got, srv.Listener.Addr())
	}
}

func TestBadFlagsAreErrors(t *testing.T) {
	for _, args := range [][]string{{"-rate", "0"}, {"-url", "http://[::1"}} {
		if err := run(args, &strings.Builder{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
