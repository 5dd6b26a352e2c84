// Command coldstart measures the interceptor's cold-start path against hack/bench/proxy: how soon
// held requests reach the app once its endpoint turns ready, and what 10,000 held requests cost.
//
// It serves the cold app itself (-listen, the proxy's -cold-backend) so that it sees when each
// request arrives; the clock starts just before it sends /control/ready, so the figure includes
// that control round trip and is an upper bound.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
)

var (
	proxyURL = flag.String("proxy", "http://127.0.0.1:18081", "proxy URL")
	adminURL = flag.String("admin", "http://127.0.0.1:19091", "proxy admin/control URL")
	listen   = flag.String("listen", "127.0.0.1:18091", "address of the cold app served here")
	trials   = flag.Int("trials", 100, "cold starts measured")
	perTrial = flag.Int("per-trial", 10, "requests held per cold start")
	many     = flag.Int("held", 10000, "requests held at once in the memory run; 0 skips it")
	pid      = flag.Int("pid", 0, "proxy PID, for its resident memory")
)

var readyAt atomic.Int64 // unix nanos when /control/ready was sent

func main() {
	flag.Parse()
	var mu sync.Mutex
	var lat []time.Duration
	measuring := atomic.Bool{}
	go func() {
		log.Fatal(http.ListenAndServe(*listen, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if measuring.Load() {
				d := time.Duration(time.Now().UnixNano() - readyAt.Load())
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
			_, _ = io.WriteString(w, "ok")
		})))
	}()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 20000, IdleConnTimeout: time.Minute}}

	measuring.Store(true)
	for range *trials {
		control("cold")
		done := hold(client, *perTrial)
		waitHeld(int64(*perTrial))
		readyAt.Store(time.Now().UnixNano())
		control("ready")
		if ok := <-done; ok != *perTrial {
			log.Fatalf("only %d of %d held requests answered 200", ok, *perTrial)
		}
	}
	measuring.Store(false)
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Microsecond)
	}
	fmt.Printf("ready->forwarded: cold starts=%d held each=%d n=%d p50=%v p99=%v max=%v\n",
		*trials, *perTrial, len(lat), q(0.5), q(0.99), lat[len(lat)-1].Round(time.Microsecond))

	if *many == 0 {
		return
	}
	control("cold")
	client.CloseIdleConnections()
	time.Sleep(time.Second)
	before := rss()
	start := time.Now()
	done := hold(client, *many)
	waitHeld(int64(*many))
	heldIn := time.Since(start)
	during := rss()
	start = time.Now()
	control("ready")
	ok := <-done
	fmt.Printf("held=%d (all held after %v) proxy RSS before=%dMiB held=%dMiB (+%d KiB per held request); answered 200: %d/%d in %v after ready\n",
		*many, heldIn.Round(time.Millisecond), before>>20, during>>20, (during-before)/int64(*many)>>10,
		ok, *many, time.Since(start).Round(time.Millisecond))
	if ok != *many {
		os.Exit(1)
	}
}

// hold sends n requests for the cold app and reports how many were answered 200 once all ended.
func hold(client *http.Client, n int) <-chan int {
	out := make(chan int, 1)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodGet, *proxyURL+"/", nil)
			req.Host = "cold.bench"
			resp, err := client.Do(req)
			if err != nil {
				log.Printf("held request: %v", err)
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			} else {
				log.Printf("held request answered %d: %q", resp.StatusCode, body)
			}
		})
	}
	go func() { wg.Wait(); out <- int(ok.Load()) }()
	return out
}

// waitHeld polls the proxy's real /counts until n requests of bench/cold are held.
func waitHeld(n int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := admin.Client{HTTP: http.DefaultClient}
	for {
		counts, err := c.Counts(ctx, *adminURL, 0, "")
		if err != nil {
			log.Fatal(err)
		}
		for _, a := range counts.Apps {
			if a.Key == "bench/cold" && a.Held >= n {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

func control(what string) {
	resp, err := http.Post(*adminURL+"/control/"+what, "", nil)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
}

// rss returns the proxy's resident set size in bytes (0 without -pid).
func rss() int64 {
	if *pid == 0 {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", *pid))
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			var kb int64
			_, _ = fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb << 10
		}
	}
	return 0
}
