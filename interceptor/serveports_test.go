package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// The Serve-port listeners follow the routing table: a port opens when an entry gets it and routes
// to that entry alone whatever the Host; it closes when the entry loses it; shutdown drains them.
func TestServePortsFollowTheTable(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "shop %s", r.URL.Path)
	}))
	defer backend.Close()
	host, port, _ := net.SplitHostPort(backend.Listener.Addr().String())
	n, _ := strconv.Atoi(port)
	src := proxytest.NewSource()
	src.Set(endpoints.ServiceKey{Namespace: "b", Service: "shop"}, endpoints.Endpoint{IP: host, Port: int32(n)})

	var table atomic.Pointer[routing.Table]
	setTable := func(entries ...routing.Entry) *routing.Table {
		tb, err := routing.NewTable(entries)
		if err != nil {
			t.Fatal(err)
		}
		table.Store(tb)
		return tb
	}
	p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(table.Load), Endpoints: src, Log: testr.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Each Serve port listens on a free loopback port instead.
	var mu sync.Mutex
	addrs := map[string]string{}
	sp := newServePorts(servePortsConfig{Host: "127.0.0.1", Proxy: p, DrainTimeout: time.Second, Log: testr.New(t),
		Listen: func(network, addr string) (net.Listener, error) {
			ln, err := net.Listen(network, "127.0.0.1:0")
			if err == nil {
				mu.Lock()
				addrs[addr] = ln.Addr().String()
				mu.Unlock()
			}
			return ln, err
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sp.Start(ctx) }()

	shop := routing.Entry{Namespace: "b", Name: "shop", Hosts: []string{"shop.example.com"}, Service: "shop", Port: 80, ServePort: 20001}
	other := routing.Entry{Namespace: "a", Name: "other", Hosts: []string{"*"}, Service: "other", Port: 80}
	sp.TableChanged(setTable(shop, other))
	testenv.Eventually(t, 5*time.Second, "port 20001 to open for b/shop", func() bool { return sp.Ports()[20001] == "b/shop" })
	mu.Lock()
	addr := addrs["127.0.0.1:20001"]
	mu.Unlock()
	get := func(hostHeader string) (int, string, error) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/cart", nil)
		req.Host = hostHeader
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	for _, h := range []string{"shop.example.com", "anything.test", "other.example.com"} {
		if code, body, err := get(h); err != nil || code != http.StatusOK || body != "shop /cart" {
			t.Errorf("Host %q on the Serve port: %d %q %v; want the shop app", h, code, body, err)
		}
	}

	shop.ServePort = 0
	sp.TableChanged(setTable(shop, other))
	testenv.Eventually(t, 5*time.Second, "port 20001 to close", func() bool { _, open := sp.Ports()[20001]; return !open })
	testenv.Eventually(t, 5*time.Second, "the listener to refuse connections", func() bool { _, _, err := get("shop.example.com"); return err != nil })

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("servePorts did not stop")
	}
	select {
	case <-sp.Drained:
	default:
		t.Error("Drained not closed after Start returned")
	}
}
