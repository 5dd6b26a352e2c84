package routing

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// TestNameChecksAgreeWithKubernetes keeps the hand-written name checks equal to apimachinery's.
func TestNameChecksAgreeWithKubernetes(t *testing.T) {
	inputs := []string{"", "a", "A", "0", "-", "a-", "-a", "a-b", "a--b", "ab.cd", "a..b", ".a", "a.", "1abc", "abc1",
		"a_b", "é", "http", "h2c", "web-8080", "123", "1-2", "abcdefghijklmno", "abcdefghijklmnop", "a.-b", "a-.b",
		strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a.", 126) + "a", strings.Repeat("a.", 126) + "ab",
		strings.Repeat("b", 100) + "." + strings.Repeat("c", 100)}
	for _, s := range inputs {
		checks := []struct {
			name      string
			ours, k8s bool
		}{
			{"IsDNS1123Label", isDNSLabel(s, false), len(validation.IsDNS1123Label(s)) == 0},
			{"IsDNS1035Label", isDNSLabel(s, true), len(validation.IsDNS1035Label(s)) == 0},
			{"IsDNS1123Subdomain", isDNSSubdomain(s), len(validation.IsDNS1123Subdomain(s)) == 0},
			{"IsValidPortName", isPortName(s), len(validation.IsValidPortName(s)) == 0},
		}
		for _, c := range checks {
			if c.ours != c.k8s {
				t.Errorf("%s(%q): ours %v, apimachinery %v", c.name, s, c.ours, c.k8s)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(e *Entry)
		wantErr string // substring; "" means valid
	}{
		{name: "valid", mutate: func(e *Entry) {}},
		{name: "every field valid", mutate: func(e *Entry) { *e = fullEntry("a/b") }},
		{name: "upper-case host is lower-cased", mutate: func(e *Entry) { e.Hosts = []string{"Shop.Example.COM"} }},
		{name: "ip host", mutate: func(e *Entry) { e.Hosts = []string{"10.0.0.1"} }},
		{name: "no namespace", mutate: func(e *Entry) { e.Namespace = "" }, wantErr: "namespace"},
		{name: "namespace with slash", mutate: func(e *Entry) { e.Namespace = "a/b" }, wantErr: "namespace"},
		{name: "bad name", mutate: func(e *Entry) { e.Name = "Name" }, wantErr: "name"},
		{name: "negative generation", mutate: func(e *Entry) { e.Generation = -1 }, wantErr: "generation"},
		{name: "no hosts", mutate: func(e *Entry) { e.Hosts = nil }, wantErr: "no hosts"},
		{name: "empty host", mutate: func(e *Entry) { e.Hosts = []string{""} }, wantErr: "host"},
		{name: "host with port", mutate: func(e *Entry) { e.Hosts = []string{"a.com:80"} }, wantErr: "host"},
		{name: "host with scheme", mutate: func(e *Entry) { e.Hosts = []string{"http://a.com"} }, wantErr: "host"},
		{name: "host trailing dot", mutate: func(e *Entry) { e.Hosts = []string{"a.com."} }, wantErr: "host"},
		{name: "wildcard in the middle", mutate: func(e *Entry) { e.Hosts = []string{"a.*.com"} }, wantErr: "host"},
		{name: "bare wildcard label", mutate: func(e *Entry) { e.Hosts = []string{"*."} }, wantErr: "host"},
		{name: "partial wildcard", mutate: func(e *Entry) { e.Hosts = []string{"*a.com"} }, wantErr: "host"},
		{name: "label too long", mutate: func(e *Entry) { e.Hosts = []string{strings.Repeat("a", 64) + ".com"} }, wantErr: "host"},
		{name: "host too long", mutate: func(e *Entry) { e.Hosts = []string{strings.Repeat("a.", 127) + "com"} }, wantErr: "host"},
		{name: "unicode host", mutate: func(e *Entry) { e.Hosts = []string{"bücher.de"} }, wantErr: "host"},
		{name: "relative path", mutate: func(e *Entry) { e.PathPrefixes = []string{"api"} }, wantErr: "path prefix"},
		{name: "path with query", mutate: func(e *Entry) { e.PathPrefixes = []string{"/a?b"} }, wantErr: "path prefix"},
		{name: "path with space", mutate: func(e *Entry) { e.PathPrefixes = []string{"/a b"} }, wantErr: "path prefix"},
		{name: "path not utf-8", mutate: func(e *Entry) { e.PathPrefixes = []string{"/\xff"} }, wantErr: "path prefix"},
		{name: "path too long", mutate: func(e *Entry) { e.PathPrefixes = []string{"/" + strings.Repeat("a", 1024)} }, wantErr: "path prefix"},
		{name: "header name not a token", mutate: func(e *Entry) { e.Headers = []HeaderMatch{{Name: "X Y"}} }, wantErr: "header"},
		{name: "empty header name", mutate: func(e *Entry) { e.Headers = []HeaderMatch{{Name: ""}} }, wantErr: "header"},
		{name: "header value with newline", mutate: func(e *Entry) { e.Headers = []HeaderMatch{{Name: "X", Value: ptr("a\nb")}} }, wantErr: "control"},
		{name: "header matched twice", mutate: func(e *Entry) { e.Headers = []HeaderMatch{{Name: "x-a"}, {Name: "X-A", Value: ptr("1")}} }, wantErr: "twice"},
		{name: "no service", mutate: func(e *Entry) { e.Service = "" }, wantErr: "service"},
		{name: "service starting with digit", mutate: func(e *Entry) { e.Service = "1svc" }, wantErr: "service"},
		{name: "no port", mutate: func(e *Entry) { e.Port = 0 }, wantErr: "port"},
		{name: "port too large", mutate: func(e *Entry) { e.Port = 65536 }, wantErr: "port"},
		{name: "bad port name", mutate: func(e *Entry) { e.PortName = "HTTP" }, wantErr: "port name"},
		{name: "negative target port", mutate: func(e *Entry) { e.TargetPort = -1 }, wantErr: "target port"},
		{name: "unknown protocol", mutate: func(e *Entry) { e.Protocol = "h3" }, wantErr: "protocol"},
		{name: "negative timeout", mutate: func(e *Entry) { e.Timeouts.Request = -1 }, wantErr: "timeouts"},
		{name: "negative queue limit", mutate: func(e *Entry) { e.ColdStart.QueueLimit = -1 }, wantErr: "queue limit"},
		{name: "fallback without port", mutate: func(e *Entry) { e.ColdStart.Fallback = &Backend{Service: "fb"} }, wantErr: "fallback"},
		{name: "placeholder status", mutate: func(e *Entry) { e.ColdStart.Placeholder = &Placeholder{StatusCode: 99} }, wantErr: "status code"},
		{name: "placeholder header name", mutate: func(e *Entry) { e.ColdStart.Placeholder = &Placeholder{Headers: map[string]string{"a b": ""}} }, wantErr: "placeholder"},
		{name: "waiting page refresh negative", mutate: func(e *Entry) { e.ColdStart.WaitingPage = &WaitingPage{Refresh: -1} }, wantErr: "waiting page: refresh"},
		{name: "waiting page html too long", mutate: func(e *Entry) { e.ColdStart.WaitingPage = &WaitingPage{HTML: strings.Repeat("a", 64<<10+1)} }, wantErr: "waiting page: html is 65537 bytes"},
		{name: "waiting page html not utf-8", mutate: func(e *Entry) { e.ColdStart.WaitingPage = &WaitingPage{HTML: "\xc3"} }, wantErr: "waiting page: html is not valid UTF-8"},
		{name: "placeholder body not utf-8", mutate: func(e *Entry) { e.ColdStart.Placeholder = &Placeholder{Body: "\xc3"} }, wantErr: "UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := entry("ns/app", []string{"shop.example.com"})
			tc.mutate(&e)
			err := e.Validate()
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				if _, err := NewTable([]Entry{e}); err != nil {
					t.Fatalf("NewTable rejects a valid entry: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidEntry) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Validate = %v, want ErrInvalidEntry mentioning %q", err, tc.wantErr)
			}
			if _, err := NewTable([]Entry{entry("ns/ok", []string{"*"}), e}); !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("NewTable = %v, want ErrInvalidEntry", err)
			}
		})
	}
	if _, err := NewTable([]Entry{entry("a/b", []string{"x.com"}), entry("a/b", []string{"y.com"})}); !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("NewTable with a duplicate key = %v, want ErrInvalidEntry", err)
	}
}
