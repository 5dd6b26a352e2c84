package h1

import (
	"bufio"
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "", want: ""},
		{in: " , ", want: ""},
		{in: "10.0.0.0/8", want: "10.0.0.0/8"},
		{in: "10.0.0.0/8, 192.0.2.7 ,fd00::/8,2001:db8::1", want: "10.0.0.0/8,192.0.2.7/32,fd00::/8,2001:db8::1/128"},
		{in: "::ffff:10.0.0.0/104", want: "10.0.0.0/8"},
		{in: "::ffff:192.0.2.7", want: "192.0.2.7/32"},
		{in: "0.0.0.0/0,::/0", want: "0.0.0.0/0,::/0"},
		{in: "10.1.2.3/8", err: `"10.1.2.3/8" has host bits set: did you mean 10.0.0.0/8?`},
		{in: "10.0.0.0/33", err: `"10.0.0.0/33" is not a CIDR range`},
		{in: "ingress.example.com", err: `"ingress.example.com" is not a CIDR range or an IP address`},
		{in: "10.0.0.0/8;192.0.2.0/24", err: "is not a CIDR range"},
		{in: "fe80::1%eth0", err: "an address with a zone cannot be trusted"},
	} {
		got, err := ParseTrustedProxies(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseTrustedProxies(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.err)
		case tc.err == "" && err != nil:
			t.Errorf("ParseTrustedProxies(%q): %v", tc.in, err)
		case tc.err == "" && got.String() != tc.want:
			t.Errorf("ParseTrustedProxies(%q) = %q, want %q", tc.in, got.String(), tc.want)
		}
	}
}

func TestTrustedProxiesPeer(t *testing.T) {
	trusted, err := ParseTrustedProxies("10.0.0.0/8,2001:db8::/32,192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		t      TrustedProxies
		remote string
		tls    bool
		want   Peer
	}{
		{trusted, "10.1.2.3:4567", false, Peer{IP: "10.1.2.3", Trusted: true}},
		{trusted, "10.1.2.3:4567", true, Peer{IP: "10.1.2.3", Trusted: true, TLS: true}},
		{trusted, "11.1.2.3:4567", false, Peer{IP: "11.1.2.3"}},
		{trusted, "192.0.2.7:1", false, Peer{IP: "192.0.2.7", Trusted: true}},
		{trusted, "192.0.2.8:1", false, Peer{IP: "192.0.2.8"}},
		{trusted, "[2001:db8::5]:80", false, Peer{IP: "2001:db8::5", Trusted: true}},
		{trusted, "[2001:db9::5]:80", false, Peer{IP: "2001:db9::5"}},
		// A dual-stack socket's IPv4 peer.
		{trusted, "[::ffff:10.9.9.9]:80", false, Peer{IP: "::ffff:10.9.9.9", Trusted: true}},
		{trusted, "[2001:db8::5%eth0]:80", false, Peer{IP: "2001:db8::5%eth0", Trusted: true}},
		// No address (a Unix socket, a pipe): nobody to trust, no X-Forwarded-For.
		{trusted, "@", false, Peer{}},
		// The default trusts nobody, whatever the address.
		{nil, "10.1.2.3:4567", false, Peer{IP: "10.1.2.3"}},
		{nil, "127.0.0.1:80", true, Peer{IP: "127.0.0.1", TLS: true}},
	} {
		if got := tc.t.Peer(tc.remote, tc.tls); got != tc.want {
			t.Errorf("%v.Peer(%q, %v) = %+v, want %+v", tc.t, tc.remote, tc.tls, got, tc.want)
		}
	}
}

// forgedHead is a request whose client claims to be a proxy: every forwarding header forged.
const forgedHead = "GET /f HTTP/1.1\r\nHost: shop.example.com\r\nX-Forwarded-For: 203.0.113.9\r\n" +
	"x-forwarded-for: 198.51.100.1, 198.51.100.2\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\n" +
	"X-Forwarded-Port: 443\r\nX-Real-IP: 203.0.113.9\r\nForwarded: for=203.0.113.9\r\nAccept: */*\r\n\r\n"

// TestForwardingRule: what the upstream reads of the forwarding headers for a forged request,
// from each kind of peer, written by the event loops' writer (Request.Write) and by the net/http
// path's rule (ForwardRequestHeaders) alike.
func TestForwardingRule(t *testing.T) {
	type fwd struct{ XFF, XFH, XFP, Port, RealIP, Forwarded []string }
	for _, tc := range []struct {
		name string
		p    Peer
		want fwd
	}{
		{
			name: "untrusted cleartext: only what the interceptor saw",
			p:    Peer{IP: "192.0.2.1"},
			want: fwd{XFF: []string{"192.0.2.1"}, XFH: []string{"shop.example.com"}, XFP: []string{"http"}},
		},
		{
			name: "untrusted TLS: the scheme served",
			p:    Peer{IP: "192.0.2.1", TLS: true},
			want: fwd{XFF: []string{"192.0.2.1"}, XFH: []string{"shop.example.com"}, XFP: []string{"https"}},
		},
		{
			name: "trusted proxy: its chain kept and appended, its host and scheme passed on",
			p:    Peer{IP: "10.0.0.5", Trusted: true},
			want: fwd{
				XFF: []string{"203.0.113.9, 198.51.100.1, 198.51.100.2, 10.0.0.5"}, XFH: []string{"evil.example"},
				XFP: []string{"https"}, Port: []string{"443"}, RealIP: []string{"203.0.113.9"},
			},
		},
		{
			name: "no address: no X-Forwarded-For at all",
			p:    Peer{},
			want: fwd{XFH: []string{"shop.example.com"}, XFP: []string{"http"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pick := func(h http.Header) fwd {
				return fwd{h["X-Forwarded-For"], h["X-Forwarded-Host"], h["X-Forwarded-Proto"], h["X-Forwarded-Port"], h["X-Real-Ip"], h["Forwarded"]}
			}
			rq := new(Request)
			if !rq.Parse(forgedHead) {
				t.Fatal("Parse refuses the head")
			}
			var out bytes.Buffer
			rq.Write(&out, tc.p)
			up, err := http.ReadRequest(bufio.NewReader(&out))
			if err != nil {
				t.Fatalf("Write writes %q: %v", out.Bytes(), err)
			}
			if d := cmp.Diff(tc.want, pick(up.Header)); d != "" {
				t.Errorf("event loops' writer (-want +got):\n%s", d)
			}
			if up.Header.Get("Accept") != "*/*" {
				t.Errorf("Accept = %q, want it passed on", up.Header.Get("Accept"))
			}

			in, err := http.ReadRequest(bufio.NewReader(strings.NewReader(forgedHead)))
			if err != nil {
				t.Fatal(err)
			}
			h := in.Header.Clone()
			ForwardRequestHeaders(h, in.Header, tc.p, in.Host)
			if d := cmp.Diff(tc.want, pick(h)); d != "" {
				t.Errorf("net/http path's rule (-want +got):\n%s", d)
			}
		})
	}
}
