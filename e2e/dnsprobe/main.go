// Command dnsprobe resolves names and connects to addresses the way a Go program in a pod does (the
// pure-Go resolver, reading /etc/resolv.conf), and prints one JSON line per check. The e2e suite's
// Cluster DNS spec (e2e/dns_test.go) runs it as a pod on a real node and as a process started like
// KEDA's, to prove the local cluster's DNS.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Result is one check; the test decodes these lines.
type Result struct {
	Check  string   `json:"check"` // resolv.conf, resolve, dial or get
	Target string   `json:"target"`
	Addrs  []string `json:"addrs,omitempty"`
	Status int      `json:"status,omitempty"`
	Body   string   `json:"body,omitempty"`
	Err    string   `json:"err,omitempty"`
}

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var resolve, dial, get list
	flag.Var(&resolve, "resolve", "Name to resolve (repeatable).")
	flag.Var(&dial, "dial", "host:port to open a TCP connection to (repeatable).")
	flag.Var(&get, "get", "URL to GET (repeatable).")
	timeout := flag.Duration("timeout", 10*time.Second, "Bound of each check.")
	parallel := flag.Bool("parallel", false, "Send the GETs all at once (results in the order given), on a new connection each.")
	flag.Parse()

	enc := json.NewEncoder(os.Stdout)
	rc, err := os.ReadFile("/etc/resolv.conf")
	r := Result{Check: "resolv.conf", Target: "/etc/resolv.conf", Body: string(rc)}
	if err != nil {
		r.Err = err.Error()
	}
	_ = enc.Encode(r)

	resolver := &net.Resolver{PreferGo: true}
	for _, name := range resolve {
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		addrs, err := resolver.LookupHost(ctx, name)
		cancel()
		r := Result{Check: "resolve", Target: name, Addrs: addrs}
		if err != nil {
			r.Err = err.Error()
		}
		_ = enc.Encode(r)
	}
	dialer := &net.Dialer{Timeout: *timeout, Resolver: resolver}
	for _, addr := range dial {
		r := Result{Check: "dial", Target: addr}
		conn, err := dialer.Dial("tcp", addr)
		if err != nil {
			r.Err = err.Error()
		} else {
			r.Addrs = []string{conn.RemoteAddr().String()}
			conn.Close()
		}
		_ = enc.Encode(r)
	}
	client := &http.Client{Timeout: *timeout, Transport: &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: *parallel}}
	results := make([]Result, len(get))
	var wg sync.WaitGroup
	for i, url := range get {
		do := func() {
			r := Result{Check: "get", Target: url}
			resp, err := client.Get(url)
			if err != nil {
				r.Err = err.Error()
			} else {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				resp.Body.Close()
				r.Status, r.Body = resp.StatusCode, strings.TrimSpace(string(body))
			}
			results[i] = r
		}
		if *parallel {
			wg.Go(do)
		} else {
			do()
		}
	}
	wg.Wait()
	for _, r := range results {
		_ = enc.Encode(r)
	}
	fmt.Fprintln(os.Stderr, "dnsprobe: done")
}
