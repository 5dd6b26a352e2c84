//go:build linux

package engine

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/testenv"
)

// The heads the event loops hand to net/http are parsed one at a time here (HeadParsers 1): the
// slot is held only while a head is parsed, so neither a client that stopped in the middle of its
// head nor a held request blocks the heads of others, and the stopped client is served once it
// goes on.

// largeHeader is a large header line.
var largeHeader = "X-Pad: " + strings.Repeat("a", 20<<10)

// handedOver is a request with a large head that the loops hand to net/http as soon as its first
// line has arrived: its lines end in a bare LF, which only net/http's parsers read.
func handedOver(host, path string) string {
	return strings.ReplaceAll(proxytest.RawReqTo(host, "GET", path, largeHeader), "\r\n", "\n")
}

func TestHandedOverHeadsAreParsedOneAtATimeWithoutBlocking(t *testing.T) {
	h := newHarness(t, []route{entry("app", "app.example.com", "app"), entry("cold", "cold.example.com", "cold")},
		func(_ *Options, s *Server) { s.EventLoops, s.HeadParsers = 1, 1 })
	be := proxytest.NewRawBackend(t, func(int, *http.Request) proxytest.Reply { return proxytest.Reply{Resp: proxytest.OKReply("ok")} })
	h.src.Set(key("app"), be.Addr)

	// A client that sends 6 KiB of its head and stops: handed over, and net/http waits for the rest.
	whole := handedOver("app.example.com", "/slow")
	slow := dialRaw(t, h)
	if _, err := io.WriteString(slow.Conn(), whole[:6<<10]); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*time.Second, "the slow head handed to net/http", func() bool { return h.srv.LoopConnections() == 0 })

	// A held request with a large head: its handler waits for the cold app.
	held := dialRaw(t, h)
	heldAnswer := make(chan proxytest.Answer, 1)
	go func() { heldAnswer <- held.Do(handedOver("cold.example.com", "/held")) }()
	ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	if err := h.src.WaitWaiting(ctx, key("cold"), 1); err != nil {
		t.Fatal(err)
	}

	// Other clients' large heads are parsed and answered meanwhile, one after the other, on new
	// connections and on one kept alive.
	kept := dialRaw(t, h)
	for i := range 3 {
		if a := dialRaw(t, h).Do(handedOver("app.example.com", "/large")); a.Code != http.StatusOK || a.Body != "ok" {
			t.Fatalf("large head %d while a head is unfinished and a request held: %+v", i, a)
		}
		if a := kept.Do(handedOver("app.example.com", "/kept")); a.Code != http.StatusOK || a.Body != "ok" {
			t.Fatalf("large head %d on a kept-alive connection: %+v", i, a)
		}
	}

	// The slow client goes on and is answered; so is the held request once its app is ready.
	if a := slow.Do(whole[6<<10:]); a.Code != http.StatusOK || a.Body != "ok" {
		t.Fatalf("the slow client's request once its head ended: %+v", a)
	}
	h.src.Set(key("cold"), be.Addr)
	if a := <-heldAnswer; a.Code != http.StatusOK || a.Body != "ok" {
		t.Fatalf("the held request: %+v", a)
	}
}
