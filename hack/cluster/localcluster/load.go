package localcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// LoadResult summarises a burst of requests.
type LoadResult struct {
	Codes map[int]int // status code -> count; 0 counts transport errors while ctx was live
	// Cancelled counts requests cut off or never sent because ctx ended (the caller stopped the load):
	// kept apart from Codes[0] so a transport error is never mistaken for the end of the run.
	Cancelled int
	Errors    []string // the first few transport errors
	Elapsed   time.Duration
	P50       time.Duration
	P99       time.Duration
	Max       time.Duration
}

func (r LoadResult) String() string {
	codes := make([]int, 0, len(r.Codes))
	for c := range r.Codes {
		codes = append(codes, c)
	}
	sort.Ints(codes)
	var parts []string
	for _, c := range codes {
		label := fmt.Sprint(c)
		if c == 0 {
			label = "error"
		}
		parts = append(parts, fmt.Sprintf("%s x%d", label, r.Codes[c]))
	}
	if r.Cancelled > 0 {
		parts = append(parts, fmt.Sprintf("cancelled x%d", r.Cancelled))
	}
	return fmt.Sprintf("%s in %.2fs (latency p50 %s, p99 %s, max %s)", strings.Join(parts, ", "),
		r.Elapsed.Seconds(), r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Max.Round(time.Millisecond))
}

// Load sends total GET requests to url with the given Host header from inside the namespace,
// concurrency at a time, and reports status codes and latencies.
func (c Config) Load(ctx context.Context, url, host string, concurrency, total int, timeout time.Duration) LoadResult {
	hc := &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: DialContext(c.NetNS), MaxIdleConnsPerHost: concurrency,
	}}
	defer hc.CloseIdleConnections()
	res := LoadResult{Codes: map[int]int{}}
	var mu sync.Mutex
	var lat []time.Duration
	work := make(chan struct{})
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				t0 := time.Now()
				code, err := Get(ctx, hc, url, host)
				d := time.Since(t0)
				mu.Lock()
				if err != nil && ctx.Err() != nil {
					res.Cancelled++
					mu.Unlock()
					continue
				}
				res.Codes[code]++
				lat = append(lat, d)
				if err != nil && len(res.Errors) < 5 {
					res.Errors = append(res.Errors, err.Error())
				}
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < total && ctx.Err() == nil; i++ {
		select {
		case work <- struct{}{}:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
	res.Elapsed = time.Since(start)
	slices.Sort(lat)
	if n := len(lat); n > 0 {
		res.P50, res.P99, res.Max = lat[n/2], lat[min(n-1, n*99/100)], lat[n-1]
	}
	return res
}

// Get sends one GET with the given Host header through hc, reads the body to the end and returns the
// status code; the error is the transport's or the body read's.
func Get(ctx context.Context, hc *http.Client, url, host string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Host = host
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, err
}
