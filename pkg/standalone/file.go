// Package standalone runs the interceptor without Kubernetes: its routes and endpoints come from a
// file of HTTPScaledObject documents instead of the operator's routing table and EndpointSlices.
package standalone

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/routing"
)

// AnnotationEndpoints lists an app's endpoints in a standalone file: comma-separated IP:port
// addresses ("127.0.0.1:9000,127.0.0.1:9001") of the processes that serve the scaleTargetRef's
// Service. Absent or empty, the app has no endpoint and its requests are held, as for an app at zero,
// until the file lists one. The operator ignores the annotation.
const AnnotationEndpoints = "standalone.httpscale.dev/endpoints"

// defaultNamespace is the namespace of a document without one, as for kubectl apply.
const defaultNamespace = "default"

// unusedPort is the Service port of an app that names its port only by portName: the entry needs a
// number, but standalone mode never dials a Service address, only the listed endpoints.
const unusedPort = 80

// Snapshot is one valid file: the routing table and the ready endpoints of every routed Service.
// It is immutable.
type Snapshot struct {
	Table     *routing.Table
	Endpoints map[endpoints.ServiceKey]*endpoints.Set
}

// Parse reads a YAML stream of HTTPScaledObject documents (apiVersion httpscale.dev/v1alpha1) and
// builds the routing table and endpoints they describe. Every error names the document and field
// to fix; unknown fields are errors. Parse is not for the hot path.
func Parse(data []byte) (*Snapshot, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var entries []routing.Entry
	eps := map[endpoints.ServiceKey][]endpoints.Endpoint{}
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			doc--
			continue
		}
		e, key, addrs, err := parseDocument(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", doc, err)
		}
		entries = append(entries, e)
		eps[key] = append(eps[key], addrs...)
	}
	if conflicts := routing.Conflicts(entries); len(conflicts) > 0 {
		msgs := make([]string, len(conflicts))
		for i, c := range conflicts {
			msgs[i] = c.String()
		}
		return nil, fmt.Errorf("conflicting routes: %s", strings.Join(msgs, "; "))
	}
	table, err := routing.NewTable(entries)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{Table: table, Endpoints: map[endpoints.ServiceKey]*endpoints.Set{}}
	for k, list := range eps {
		if len(list) == 0 {
			continue
		}
		slices.SortFunc(list, func(a, b endpoints.Endpoint) int { return strings.Compare(a.Addr(), b.Addr()) })
		s.Endpoints[k] = &endpoints.Set{Key: k, Endpoints: slices.CompactFunc(list, func(a, b endpoints.Endpoint) bool { return a.Addr() == b.Addr() })}
	}
	return s, nil
}

// parseDocument turns one document into its routing entry, the key of its Service and its endpoints.
func parseDocument(raw []byte) (routing.Entry, endpoints.ServiceKey, []endpoints.Endpoint, error) {
	var hso v1.HTTPScaledObject
	if err := yaml.UnmarshalStrict(raw, &hso); err != nil {
		return routing.Entry{}, endpoints.ServiceKey{}, nil, err
	}
	if hso.APIVersion != v1.GroupVersion.String() || hso.Kind != "HTTPScaledObject" {
		return routing.Entry{}, endpoints.ServiceKey{}, nil, fmt.Errorf("apiVersion %q kind %q: want apiVersion %s, kind HTTPScaledObject",
			hso.APIVersion, hso.Kind, v1.GroupVersion.String())
	}
	if hso.Name == "" {
		return routing.Entry{}, endpoints.ServiceKey{}, nil, errors.New("metadata.name is required")
	}
	if hso.Namespace == "" {
		hso.Namespace = defaultNamespace
	}
	fail := func(format string, args ...any) (routing.Entry, endpoints.ServiceKey, []endpoints.Endpoint, error) {
		return routing.Entry{}, endpoints.ServiceKey{}, nil, fmt.Errorf("%s/%s: "+format, append([]any{hso.Namespace, hso.Name}, args...)...)
	}
	spec := &hso.Spec
	ref := spec.ScaleTargetRef
	if ref.Service == "" {
		return fail("spec.scaleTargetRef.service is required")
	}
	target := routing.Backend{Service: ref.Service, Port: unusedPort, Protocol: routing.ProtocolHTTP}
	switch {
	case ref.Port != nil:
		target.Port = *ref.Port
	case ref.PortName != nil:
		target.PortName = *ref.PortName
	default:
		return fail("spec.scaleTargetRef: set port or portName")
	}
	if cs := spec.ColdStart; cs != nil && cs.Fallback != nil {
		return fail("spec.coldStart.fallback: not supported in standalone mode (there are no Services); use spec.coldStart.placeholder")
	}
	if f := spec.Forwarding; f != nil && f.ViaService {
		return fail("spec.forwarding.viaService: not supported in standalone mode (there are no Services); remove it")
	}
	if t := spec.Timeouts; t != nil {
		for _, f := range []struct {
			name string
			d    *v1.Duration
		}{{"readiness", t.Readiness}, {"request", t.Request}, {"responseHeader", t.ResponseHeader}} {
			if f.d == nil {
				continue
			}
			if v, err := time.ParseDuration(string(*f.d)); err != nil || v < 0 {
				return fail("spec.timeouts.%s %q: want a duration such as 30s", f.name, *f.d)
			}
		}
	}
	addrs, err := parseEndpoints(hso.Annotations[AnnotationEndpoints])
	if err != nil {
		return fail("annotation %s: %w", AnnotationEndpoints, err)
	}
	e := routing.EntryFromSpec(&hso, target, nil)
	if err := e.Validate(); err != nil {
		return routing.Entry{}, endpoints.ServiceKey{}, nil, err
	}
	key := endpoints.ServiceKey{Namespace: hso.Namespace, Service: target.Service, PortName: target.PortName}
	return e, key, addrs, nil
}

// parseEndpoints reads the comma-separated IP:port list of AnnotationEndpoints.
func parseEndpoints(list string) ([]endpoints.Endpoint, error) {
	var out []endpoints.Endpoint
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%q: want IP:port such as 127.0.0.1:9000: %w", a, err)
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return nil, fmt.Errorf("%q: %q is not an IP address; write 127.0.0.1 rather than localhost", a, host)
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q: port %q: want 1-65535", a, port)
		}
		out = append(out, endpoints.Endpoint{IP: ip.String(), Port: int32(n)})
	}
	return out, nil
}

// stripComments drops YAML comment lines, so that a document of comments only counts as empty.
func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
		}
	}
	return out
}
