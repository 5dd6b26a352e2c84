package proxy_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// TestAdminPortSeesColdRequestsAtOnce drives the admin contract over HTTP, as the scaler does: a
// request for an app at zero produces a wake event on /wake and a held count on /counts.
func TestAdminPortSeesColdRequestsAtOnce(t *testing.T) {
	h := newHarness(t, []routing.Entry{entry("app", "app.example.com", "app")}, nil)
	adm := httptest.NewServer(admin.NewHandler(admin.HandlerOptions{Counts: h.reg, Wake: h.reg}))
	t.Cleanup(adm.Close)
	client := admin.Client{HTTP: &http.Client{}}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan admin.WakeEvent, 4)
	streamErr := make(chan error, 1)
	go func() { streamErr <- client.Wake(ctx, adm.URL, func(ev admin.WakeEvent) { events <- ev }) }()
	testenv.Eventually(t, 10*time.Second, "the wake stream to subscribe", func() bool { return h.reg.Subscribers() == 1 })

	sent := time.Now()
	reqCtx, stopReq := context.WithCancel(context.Background())
	defer stopReq()
	go func() { _, _, _, _ = h.get(reqCtx, "app.example.com", "/") }()
	select {
	case ev := <-events:
		if ev.Key != "ns/app" {
			t.Errorf("wake event for %q, want ns/app", ev.Key)
		}
		t.Logf("wake event %v after the request was sent", time.Since(sent))
	case <-time.After(10 * time.Second):
		t.Fatal("no wake event within 10s")
	}

	var held int64
	testenv.Eventually(t, 10*time.Second, "the held request in /counts", func() bool {
		c, err := client.Counts(context.Background(), adm.URL, 0, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range c.Apps {
			if a.Key == "ns/app" {
				held = a.Held
			}
		}
		return held == 1
	})
	cancel()
	if err := <-streamErr; !errors.Is(err, context.Canceled) {
		t.Errorf("wake stream ended with %v, want context.Canceled", err)
	}
}
