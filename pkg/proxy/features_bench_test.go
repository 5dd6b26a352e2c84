package proxy_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"

	"github.com/httpscale/httpscale/pkg/proxy"
	"github.com/httpscale/httpscale/pkg/proxy/proxytest"
	"github.com/httpscale/httpscale/pkg/routing"
	"github.com/httpscale/httpscale/pkg/sessioncookie"
)

// BenchmarkProxyFeatures is BenchmarkProxy's event-loop case for an app without path rewrite or
// session persistence (off), with a rewrite of its prefix (rewrite), and with session persistence
// and a valid cookie (session: no new cookie per answer), in one proxy: what each costs per request.
func BenchmarkProxyFeatures(b *testing.B) {
	be := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", "2")
		_, _ = io.WriteString(w, "ok")
	}))
	defer be.Close()
	ep := endpointOf(&testing.T{}, be.URL, "")
	rw := entry("rw", "rw.example.com", "app")
	rw.PathPrefixes, rw.Rewrites = []string{"/x"}, []routing.PathRewrite{{Prefix: "/x", Replace: "/"}}
	ss := entry("ss", "ss.example.com", "app")
	ss.Session = &routing.Session{Cookie: "pod", MaxAge: 3600}
	tb, err := routing.NewTable([]routing.Entry{entry("app", "app.example.com", "app"), rw, ss})
	if err != nil {
		b.Fatal(err)
	}
	src := proxytest.NewSource()
	src.Set(key("app"), ep)
	keys, err := sessioncookie.NewKeys([]byte("bench-key-0123456789abcdef"))
	if err != nil {
		b.Fatal(err)
	}
	newProxy := func(b *testing.B) *proxy.Proxy {
		p, err := proxy.New(proxy.Options{Tables: proxy.TableFunc(func() *routing.Table { return tb }), Endpoints: src, Log: logr.Discard(),
			SessionKeys: func() *sessioncookie.Keys { return keys }})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ name, req string }{
		{"off", "GET /x HTTP/1.1\r\nHost: app.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"},
		{"rewrite", "GET /x/y HTTP/1.1\r\nHost: rw.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\n\r\n"},
		{"session", "GET /x HTTP/1.1\r\nHost: ss.example.com\r\nUser-Agent: bench\r\nAccept: */*\r\nCookie: theme=dark; pod=" + keys.Value(0, "ns/ss", ep.Addr()) + "\r\n\r\n"},
	} {
		b.Run(c.name, func(b *testing.B) {
			benchKeepAliveReq(b, &proxy.Server{Engine: newProxy(b).Engine()}, true, -1, []byte(c.req))
		})
	}
}
