// Command rate sends GET requests at a fixed rate (open loop: a slow answer does not delay the next
// request) and prints latency percentiles, so that proxies can be compared at equal load. -host sets
// the Host header, so a routing proxy can be measured at its address with the app's host name
// (rate -url http://127.0.0.1:8080/ -host shop.example.com).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("rate", flag.ContinueOnError)
	url := fs.String("url", "http://127.0.0.1:18090/", "target URL")
	rate := fs.Int("rate", 1000, "requests per second")
	dur := fs.Duration("duration", 10*time.Second, "measured duration")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured warm-up at the same rate")
	name := fs.String("name", "", "label printed with the result")
	host := fs.String("host", "", "Host header of every request (default: the URL's host)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rate < 1 {
		return fmt.Errorf("-rate %d: want at least 1 request per second", *rate)
	}
	base, err := http.NewRequest(http.MethodGet, *url, nil)
	if err != nil {
		return fmt.Errorf("-url %q: %w", *url, err)
	}
	if *host != "" {
		base.Host = *host
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 10 * time.Second}
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	interval := time.Second / time.Duration(*rate)
	total := int((*warmup + *dur) / interval)
	warm := int(*warmup / interval)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range total {
		// Latency counts from the intended send time, so a stalled sender is not hidden.
		due := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(due))
		wg.Go(func() {
			resp, err := client.Do(base.Clone(context.Background()))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			d := time.Since(due)
			if i < warm {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil || resp.StatusCode != http.StatusOK {
				errs++
				return
			}
			lat = append(lat, d)
		})
	}
	wg.Wait()
	if len(lat) == 0 {
		return fmt.Errorf("%s: no successful request (%d errors)", *name, errs)
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	_, err = fmt.Fprintf(out, "%-8s rate=%d n=%d errors=%d p50=%v p90=%v p99=%v max=%v\n", *name, *rate, len(lat), errs,
		q(0.50).Round(time.Microsecond), q(0.90).Round(time.Microsecond), q(0.99).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	return err
}
