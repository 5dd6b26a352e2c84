package standalone

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/endpoints"
)

const shop = `
# The shop, served by two processes.
apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata:
  name: shop
  namespace: store
  annotations:
    standalone.httpscale.dev/endpoints: "127.0.0.1:9001, 127.0.0.1:9000,127.0.0.1:9000"
spec:
  hosts: [shop.example.com]
  pathPrefixes: [/cart]
  headers: [{name: x-canary, value: "1"}]
  scaleTargetRef: {name: shop, service: shop-svc, portName: http}
  replicas: {min: 0, max: 3}
  timeouts: {readiness: 5s}
  coldStart:
    placeholder: {statusCode: 503, body: waking up}
---
apiVersion: httpscale.dev/v1alpha1
kind: HTTPScaledObject
metadata: {name: blog}
spec:
  hosts: ["*.blog.example.com"]
  scaleTargetRef: {name: blog, service: blog, port: 8080}
`

func TestParseBuildsTheTableAndEndpoints(t *testing.T) {
	s, err := Parse([]byte(shop))
	if err != nil {
		t.Fatal(err)
	}
	if s.Table.Len() != 2 {
		t.Fatalf("table has %d entries, want 2", s.Table.Len())
	}
	h := http.Header{"X-Canary": {"1"}}
	e, ok := s.Table.Match("shop.example.com", "/cart/1", h)
	if !ok || e.Key() != "store/shop" || e.Service != "shop-svc" || e.PortName != "http" || e.Timeouts.Readiness.String() != "5s" ||
		e.ColdStart.Placeholder == nil || e.ColdStart.Placeholder.Body != "waking up" {
		t.Fatalf("shop.example.com/cart/1 matched %+v (%v)", e, ok)
	}
	if _, ok := s.Table.Match("shop.example.com", "/cart", nil); ok {
		t.Error("matched without the required header")
	}
	if e, ok := s.Table.Match("a.blog.example.com", "/", nil); !ok || e.Key() != "default/blog" || e.Port != 8080 {
		t.Errorf("a.blog.example.com matched %+v (%v), want default/blog", e, ok)
	}
	want := map[endpoints.ServiceKey]*endpoints.Set{
		{Namespace: "store", Service: "shop-svc", PortName: "http"}: {
			Key:       endpoints.ServiceKey{Namespace: "store", Service: "shop-svc", PortName: "http"},
			Endpoints: []endpoints.Endpoint{{IP: "127.0.0.1", Port: 9000}, {IP: "127.0.0.1", Port: 9001}},
		},
	}
	if d := cmp.Diff(want, s.Endpoints); d != "" {
		t.Errorf("endpoints (-want +got):\n%s", d)
	}
}

func TestParseNamesWhatToFix(t *testing.T) {
	doc := func(meta, spec string) string {
		return "apiVersion: httpscale.dev/v1alpha1\nkind: HTTPScaledObject\nmetadata: " + meta + "\nspec: " + spec + "\n"
	}
	ok := `{hosts: [a.example.com], scaleTargetRef: {name: a, service: a, port: 80}}`
	for _, tc := range []struct {
		name, file, want string
	}{
		{"unknown field", doc("{name: a}", `{hots: [a.example.com]}`), `document 1: error unmarshaling JSON: while decoding JSON: json: unknown field "hots"`},
		{"wrong kind", "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n", `document 1: apiVersion "v1" kind "Service": want apiVersion httpscale.dev/v1alpha1, kind HTTPScaledObject`},
		{"no name", doc("{}", ok), "document 1: metadata.name is required"},
		{"no service", doc("{name: a}", `{hosts: [a.example.com], scaleTargetRef: {name: a, port: 80}}`), "default/a: spec.scaleTargetRef.service is required"},
		{"no port", doc("{name: a}", `{hosts: [a.example.com], scaleTargetRef: {name: a, service: a}}`), "default/a: spec.scaleTargetRef: set port or portName"},
		{"bad host", doc("{name: a}", `{hosts: ["a b"], scaleTargetRef: {name: a, service: a, port: 80}}`), "invalid routing entry default/a"},
		{"bad timeout", doc("{name: a}", `{hosts: [a.example.com], timeouts: {readiness: soon}, scaleTargetRef: {name: a, service: a, port: 80}}`), `default/a: spec.timeouts.readiness "soon": want a duration such as 30s`},
		{"fallback", doc("{name: a}", `{hosts: [a.example.com], coldStart: {fallback: {service: b, port: 80}}, scaleTargetRef: {name: a, service: a, port: 80}}`), "spec.coldStart.fallback: not supported in standalone mode"},
		{"via service", doc("{name: a}", `{hosts: [a.example.com], forwarding: {viaService: true}, scaleTargetRef: {name: a, service: a, port: 80}}`), "spec.forwarding.viaService: not supported in standalone mode"},
		{"endpoint host name", doc(`{name: a, annotations: {standalone.httpscale.dev/endpoints: "localhost:9000"}}`, ok), `default/a: annotation standalone.httpscale.dev/endpoints: "localhost:9000": "localhost" is not an IP address`},
		{"endpoint without port", doc(`{name: a, annotations: {standalone.httpscale.dev/endpoints: "127.0.0.1"}}`, ok), `"127.0.0.1": want IP:port such as 127.0.0.1:9000`},
		{"endpoint port", doc(`{name: a, annotations: {standalone.httpscale.dev/endpoints: "127.0.0.1:70000"}}`, ok), `port "70000": want 1-65535`},
		{"duplicate", doc("{name: a}", ok) + "---\n" + doc("{name: a}", ok), "default/a appears more than once"},
		{"conflict", doc("{name: a}", ok) + "---\n" + doc("{name: b}", ok), `conflicting routes: default/b claims host "a.example.com" path prefix "/"`},
		{"second document", doc("{name: a}", ok) + "---\n# comment only\n---\n" + doc("{name: b}", "{hosts: [b.example.com]}"), "document 2: default/b: spec.scaleTargetRef.service is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestParseAcceptsAnEmptyFile(t *testing.T) {
	s, err := Parse([]byte("# nothing routed yet\n"))
	if err != nil || s.Table.Len() != 0 || len(s.Endpoints) != 0 {
		t.Fatalf("Parse = %+v, %v; want an empty table", s, err)
	}
}
