package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/routing"
)

const browserAccept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"

// send sends method path to host with the given Accept header ("" for none) and an optional body.
func (h *harness) send(ctx context.Context, method, host, path, accept, body string) (int, string, http.Header, error) {
	req, err := http.NewRequestWithContext(ctx, method, h.url+path, strings.NewReader(body))
	if err != nil {
		return 0, "", nil, err
	}
	req.Host = host
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return 0, "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header, err
}

func waitingEntry(html string) routing.Entry {
	e := entry("app", "app.example.com", "app")
	e.ColdStart.WaitingPage = &routing.WaitingPage{Refresh: 3, HTML: html}
	return e
}

func TestWaitingPageAnswersABrowserAtOnceAndWakesTheApp(t *testing.T) {
	_, ep := backend(t, "app")
	h := newHarness(t, []routing.Entry{waitingEntry("")}, nil)
	wakes, cancel := h.reg.Subscribe(8)
	defer cancel()

	// Held, the request would wait for the readiness timeout (minutes): 5 s proves it was not held.
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	code, body, hdr, err := h.send(ctx, http.MethodGet, "app.example.com", "/shop", browserAccept, "")
	if err != nil {
		t.Fatalf("browser GET to a cold app: %v (held instead of answered?)", err)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `<meta http-equiv="refresh" content="3">`) {
		t.Errorf("browser at zero: %d %q, want 503 with the built-in page refreshing every 3 s", code, body)
	}
	for name, want := range map[string]string{
		"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store", "Retry-After": "3", "Refresh": "3",
		proxy.HeaderColdStart: "true",
	} {
		if got := hdr.Get(name); got != want {
			t.Errorf("waiting page header %s = %q, want %q", name, got, want)
		}
	}
	select {
	case ev := <-wakes:
		if ev.Key != "ns/app" {
			t.Errorf("wake event for %q, want ns/app", ev.Key)
		}
	case <-ctx.Done():
		t.Fatal("the waiting page did not wake the app")
	}
	if in, held, req := h.count("ns/app"); in != 0 || held != 0 || req != 1 {
		t.Errorf("counts after the page: in flight %d held %d requests %d, want 0 0 1", in, held, req)
	}

	// Warm: the browser gets the app's own answer.
	h.src.Set(key("app"), ep)
	code, body, hdr, err = h.send(ctx, http.MethodGet, "app.example.com", "/shop", browserAccept, "")
	if err != nil || code != http.StatusOK || body != "app /shop" || hdr.Get(proxy.HeaderColdStart) != "" {
		t.Errorf("browser once warm: %v %d %q cold=%q, want 200 from the app", err, code, body, hdr.Get(proxy.HeaderColdStart))
	}
}

func TestWaitingPageLeavesOtherClientsHeld(t *testing.T) {
	_, ep := backend(t, "app")
	h := newHarness(t, []routing.Entry{waitingEntry("")}, nil)
	type result struct {
		what, body string
		code       int
		err        error
	}
	clients := []struct{ what, method, accept, body string }{
		{"curl", http.MethodGet, "*/*", ""},
		{"no Accept", http.MethodGet, "", ""},
		{"JSON API", http.MethodGet, "application/json", ""},
		{"browser form POST", http.MethodPost, browserAccept, "q=1"},
	}
	results := make(chan result, len(clients))
	for _, c := range clients {
		go func() {
			code, body, _, err := h.send(context.Background(), c.method, "app.example.com", "/x", c.accept, c.body)
			results <- result{c.what, body, code, err}
		}()
	}
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(ctx, key("app"), len(clients)); err != nil {
		t.Fatalf("non-browser requests were not held: %v", err)
	}
	h.src.Set(key("app"), ep)
	for range clients {
		r := <-results
		if r.err != nil || r.code != http.StatusOK || r.body != "app /x" {
			t.Errorf("%s: %v %d %q, want held and answered 200 by the app", r.what, r.err, r.code, r.body)
		}
	}
}

func TestWaitingPageCustomHTMLAndHEAD(t *testing.T) {
	const page = "<p>Our shop is opening… ☕</p>"
	h := newHarness(t, []routing.Entry{waitingEntry(page)}, nil)
	c := h.dial(t, 10*time.Second)
	// HEAD then GET on one connection: a body after the HEAD answer would be read as the next head.
	fmt.Fprintf(c, "HEAD / HTTP/1.1\r\nHost: app.example.com\r\nAccept: text/html\r\n\r\n"+
		"GET / HTTP/1.1\r\nHost: app.example.com\r\nAccept: TEXT/HTML\r\n\r\n")
	br := bufio.NewReader(c)
	head, err := http.ReadResponse(br, &http.Request{Method: http.MethodHead})
	if err != nil {
		t.Fatal(err)
	}
	head.Body.Close()
	if head.StatusCode != http.StatusServiceUnavailable || head.ContentLength != int64(len(page)) {
		t.Errorf("HEAD: %d length %d, want 503 with the page's length %d", head.StatusCode, head.ContentLength, len(page))
	}
	get, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.Fatalf("the answer after HEAD: %v (the HEAD answer carried a body?)", err)
	}
	b, err := io.ReadAll(get.Body)
	get.Body.Close()
	if err != nil || get.StatusCode != http.StatusServiceUnavailable || string(b) != page || get.Header.Get("Refresh") != "3" {
		t.Errorf("GET: %v %d %q refresh=%q, want 503 with the inline page and Refresh 3", err, get.StatusCode, b, get.Header.Get("Refresh"))
	}
}
