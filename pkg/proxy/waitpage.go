package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/httpscale/httpscale/pkg/proxy/engine"
	"github.com/httpscale/httpscale/pkg/routing"
)

// errWaitingPage is the wait step's answer to a browser navigation for a cold app with a waiting
// page: it is answered at once (Fail returns the page) instead of being held.
var errWaitingPage = errors.New("answered with the waiting page while the app wakes")

// WaitRequest implements engine.RequestWaiter: the wait step. A browser navigation (GET or HEAD
// accepting text/html) to an app with a waiting page wakes the app exactly as a held request does
// and is answered at once; every other request is held (Wait).
func (x *exchange) WaitRequest(ctx context.Context, rq engine.Waiting) error {
	a := x.app
	if x.badPath || a.entry.ColdStart.WaitingPage == nil || !wantsPage(rq.Method, rq.Header) {
		x.cost = holdCost(rq)
		return x.Wait(ctx)
	}
	x.cold = true
	a.series().coldStart()
	wakeAt, streams := a.counts.Wake(x.p.opts.WakeEvery)
	if t := x.p.opts.ColdStarts; t != nil {
		if cs := t.Woken(a.coldApp(), x.start); cs != nil && !wakeAt.IsZero() {
			cs.WakeSent(wakeAt, streams)
		}
	}
	return fmt.Errorf("%s: %w", a.key, errWaitingPage)
}

var _ engine.RequestWaiter = (*exchange)(nil)

// wantsPage reports whether a request is a browser navigation: GET or HEAD, accepting text/html.
func wantsPage(method string, h engine.Header) bool {
	if method != http.MethodGet && method != http.MethodHead {
		return false
	}
	if up := h.Values("Upgrade"); len(up) > 0 && up[0] != "" {
		return false // a WebSocket handshake is held like any API call
	}
	for _, v := range h.Values("Accept") {
		if strings.Contains(strings.ToLower(v), "text/html") {
			return true
		}
	}
	return false
}

// waitingPage is the answer of errWaitingPage: 503 with the app's page (or the built-in one), never
// cached, reloaded by the browser after the page's refresh interval.
func (x *exchange) waitingPage(h http.Header) engine.Reply {
	wp := x.app.entry.ColdStart.WaitingPage
	refresh := int(wp.Refresh)
	if refresh <= 0 {
		refresh = routing.DefaultWaitingPageRefresh
	}
	body := wp.HTML
	if body == "" {
		body = defaultWaitingPage(refresh)
	}
	secs := strconv.Itoa(refresh)
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h.Set("Retry-After", secs)
	h.Set("Refresh", secs)
	x.coldHeaders(h)
	x.code = http.StatusServiceUnavailable
	return engine.Reply{Code: x.code, Body: body}
}

// defaultWaitingPage is the built-in page: it names nothing of the app and reloads itself.
func defaultWaitingPage(refresh int) string {
	return `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="` + strconv.Itoa(refresh) + `">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Starting…</title>
<style>body{font-family:system-ui,sans-serif;display:grid;place-items:center;min-height:90vh;margin:0;color:#333}</style>
</head><body><main><h1>Starting…</h1><p>This page reloads itself in a moment.</p></main></body></html>
`
}
