// Package migrate converts the KEDA HTTP add-on's HTTPScaledObjects (http.keda.sh/v1alpha1) into
// httpscale's (httpscale.dev/v1alpha1), reporting every setting that has no exact equivalent.
package migrate

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/appkey"
)

// PeerGroupKind is the kind Convert reads.
var PeerGroupKind = schema.GroupKind{Group: "http.keda.sh", Kind: "HTTPScaledObject"}

// PeerVersion is the only version of PeerGroupKind Convert reads.
const PeerVersion = "v1alpha1"

// Annotations of the KEDA HTTP add-on that Convert understands.
const (
	peerAnnotationPrefix   = "httpscaledobject.keda.sh/"
	peerSkipScaledObject   = peerAnnotationPrefix + "skip-scaledobject-creation"
	peerOrphanScaledObject = peerAnnotationPrefix + "orphan-scaledobject"
	lastAppliedAnnotation  = "kubectl.kubernetes.io/last-applied-configuration"
	peerFailoverDefaultSec = 30 // the add-on's default coldStartTimeoutFailoverRef.timeoutSeconds
	peerRateTargetDefault  = 100
)

// Warning is a setting of the source object that was changed, approximated or dropped.
type Warning struct {
	// Object is namespace/name of the source object.
	Object string
	// Field is the path of the source field, such as spec.initialCooldownPeriod.
	Field string
	// Message says what was done and what, if anything, to do about it.
	Message string
}

func (w Warning) String() string { return w.Object + ": " + w.Field + ": " + w.Message }

// Options change what Convert writes.
type Options struct {
	// SkipScaledObject sets httpscale.dev/skip-scaledobject: "true" on every converted object, so
	// httpscale routes the app but leaves scaling to the ScaledObject that exists (a staged migration).
	SkipScaledObject bool
}

// IsPeer reports whether obj is an object Convert reads (any version of PeerGroupKind).
func IsPeer(obj *unstructured.Unstructured) bool {
	return obj.GroupVersionKind().GroupKind() == PeerGroupKind
}

// Convert turns a KEDA HTTP add-on HTTPScaledObject into httpscale's. It returns every problem that
// stops the conversion as one error (each naming its field and what to fix), and a warning for each
// setting that was changed, approximated or dropped. The result carries no status and no server-set
// metadata; the API server still validates it on apply.
func Convert(obj *unstructured.Unstructured, opts Options) (*v1.HTTPScaledObject, []Warning, error) {
	id := obj.GetName()
	if ns := obj.GetNamespace(); ns != "" {
		id = appkey.New(ns, id).String()
	}
	gvk := obj.GroupVersionKind()
	if gvk.GroupKind() != PeerGroupKind || gvk.Version != PeerVersion {
		return nil, nil, fmt.Errorf("converting %s: want %s/%s %s, got apiVersion %q kind %q", id,
			PeerGroupKind.Group, PeerVersion, PeerGroupKind.Kind, obj.GetAPIVersion(), obj.GetKind())
	}
	c := &converter{id: id}
	out := &v1.HTTPScaledObject{
		TypeMeta: metav1.TypeMeta{APIVersion: v1.GroupVersion.String(), Kind: "HTTPScaledObject"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        obj.GetName(),
			Namespace:   obj.GetNamespace(),
			Labels:      obj.GetLabels(),
			Annotations: c.annotations(obj.GetAnnotations(), opts),
		},
	}
	if out.Name == "" {
		c.errs = append(c.errs, field.Required(field.NewPath("metadata", "name"), "name the object"))
	}
	spec, _, _ := unstructured.NestedMap(obj.Object, "spec")
	if spec == nil {
		c.errs = append(c.errs, field.Required(field.NewPath("spec"), "the object has no spec to convert"))
		return nil, nil, c.err()
	}
	for _, path := range unknownFields("spec", spec) {
		c.warn(path, "not converted: the converter does not know this field; check docs/migration.md for an equivalent")
	}
	ps, ferr := decodeSpec(spec)
	if ferr != nil {
		c.errs = append(c.errs, ferr)
		return nil, nil, c.err()
	}
	c.spec(ps, &out.Spec)
	if err := c.err(); err != nil {
		return nil, nil, err
	}
	return out, c.warnings, nil
}

type converter struct {
	id       string
	errs     field.ErrorList
	warnings []Warning
}

func (c *converter) warn(path, msg string) {
	c.warnings = append(c.warnings, Warning{Object: c.id, Field: path, Message: msg})
}

func (c *converter) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	return fmt.Errorf("converting %s: %w", c.id, c.errs.ToAggregate())
}

func (c *converter) annotations(in map[string]string, opts Options) map[string]string {
	out := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(in)) {
		v := in[k]
		switch {
		case k == lastAppliedAnnotation:
			// Describes the source object; kubectl writes a new one on apply.
		case k == peerSkipScaledObject:
			if v == "true" {
				out[v1.AnnotationSkipScaledObject] = "true"
				c.warn("metadata.annotations."+k, "mapped to "+v1.AnnotationSkipScaledObject+
					`: "true"; point your own ScaledObject's external-push trigger at httpscale's scaler (see docs/scaler.md)`)
			}
		case k == peerOrphanScaledObject:
			c.warn("metadata.annotations."+k, "no equivalent: httpscale deletes the ScaledObject it created "+
				"with its HTTPScaledObject; to keep a ScaledObject, own it yourself ("+v1.AnnotationSkipScaledObject+`: "true")`)
		case strings.HasPrefix(k, peerAnnotationPrefix):
			c.warn("metadata.annotations."+k, "not converted: no httpscale equivalent")
		default:
			out[k] = v
		}
	}
	if opts.SkipScaledObject {
		out[v1.AnnotationSkipScaledObject] = "true"
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func (c *converter) spec(ps *peerSpec, out *v1.HTTPScaledObjectSpec) {
	path := field.NewPath("spec")
	out.Hosts = c.hosts(ps)
	for i, p := range ps.PathPrefixes {
		p = strings.TrimSpace(p)
		if !strings.HasPrefix(p, "/") {
			c.warn(path.Child("pathPrefixes").Index(i).String(), fmt.Sprintf("%q written as %q: httpscale's path prefixes start with /", p, "/"+p))
			p = "/" + p
		}
		if slices.Contains(out.PathPrefixes, v1.PathPrefix(p)) {
			c.warn(path.Child("pathPrefixes").Index(i).String(), fmt.Sprintf("duplicate %q dropped", p))
			continue
		}
		out.PathPrefixes = append(out.PathPrefixes, v1.PathPrefix(p))
	}
	for _, h := range ps.Headers {
		out.Headers = append(out.Headers, v1.HeaderMatch{Name: h.Name, Value: h.Value})
	}
	c.target(ps, &out.ScaleTargetRef)
	if r := ps.Replicas; r != nil && (r.Min != nil || r.Max != nil) {
		out.Replicas = &v1.ReplicaBounds{Min: r.Min, Max: r.Max}
	}
	out.ScaledownPeriod = ps.ScaledownPeriod
	if ps.InitialCooldownPeriod != nil {
		c.warn(path.Child("initialCooldownPeriod").String(), "no equivalent: httpscale scales to zero only after "+
			"scaledownPeriod seconds without requests, counted from the last request; keep an app warm with "+
			"replicas.min or spec.schedules")
	}
	out.ScalingMetric = c.metric(ps)
	c.timeouts(ps, out)
}

// hostPort splits off a :port suffix (httpscale ignores the port in a request's Host header).
var hostPort = regexp.MustCompile(`:[0-9]+$`)

func (c *converter) hosts(ps *peerSpec) []v1.Host {
	path := field.NewPath("spec", "hosts")
	in := ps.Hosts
	if ps.Host != "" {
		c.warn("spec.host", "the add-on's early single host is written into hosts")
		in = append([]string{ps.Host}, in...)
	}
	if len(in) == 0 {
		c.errs = append(c.errs, field.Required(path, `httpscale routes by host: list the hosts this app serves, or "*" for every host`))
		return nil
	}
	var out []v1.Host
	for i, h := range in {
		orig := h
		h = strings.ToLower(strings.TrimSpace(h))
		h = hostPort.ReplaceAllString(h, "")
		if h != orig {
			c.warn(path.Index(i).String(), fmt.Sprintf("%q written as %q: httpscale matches hosts case-insensitively and ignores the request's port", orig, h))
		}
		if slices.Contains(out, v1.Host(h)) {
			c.warn(path.Index(i).String(), fmt.Sprintf("duplicate %q dropped", h))
			continue
		}
		out = append(out, v1.Host(h))
	}
	return out
}

func (c *converter) target(ps *peerSpec, out *v1.ScaleTargetRef) {
	path := field.NewPath("spec", "scaleTargetRef")
	t := ps.ScaleTargetRef
	if t == nil {
		c.errs = append(c.errs, field.Required(path, "name the workload to scale and its Service: {name, service, port}"))
		return
	}
	out.Name, out.Kind, out.APIVersion, out.Service = t.Name, t.Kind, t.APIVersion, t.Service
	switch {
	case t.Name == "" && t.Deployment != "":
		out.Name, out.Kind, out.APIVersion = t.Deployment, "Deployment", "apps/v1"
		c.warn(path.Child("deployment").String(), "written as scaleTargetRef.name (kind Deployment)")
	case t.Deployment != "" && t.Deployment != t.Name:
		c.warn(path.Child("deployment").String(), "dropped: scaleTargetRef.name is set and wins")
	case t.Name == "":
		c.errs = append(c.errs, field.Required(path.Child("name"), "name the workload (a Deployment unless kind says otherwise) to scale"))
	}
	if t.Service == "" {
		c.errs = append(c.errs, field.Required(path.Child("service"), "name the Service that sends traffic to the workload"))
	}
	out.Port, out.PortName = t.Port, t.PortName
	if (t.Port == nil) == (t.PortName == nil) {
		c.errs = append(c.errs, field.Required(path.Child("port"), "set exactly one of scaleTargetRef.port or scaleTargetRef.portName"))
	}
}

func (c *converter) metric(ps *peerSpec) *v1.ScalingMetric {
	path := field.NewPath("spec")
	m := ps.ScalingMetric
	if m == nil || (m.Concurrency == nil && m.RequestRate == nil) {
		if ps.TargetPendingRequests == nil {
			return nil // httpscale's default: concurrency 100, as the add-on's
		}
		c.warn(path.Child("targetPendingRequests").String(), "written as scalingMetric.concurrency.targetValue")
		return &v1.ScalingMetric{Concurrency: &v1.ConcurrencyMetric{TargetValue: *ps.TargetPendingRequests}}
	}
	if ps.TargetPendingRequests != nil {
		c.warn(path.Child("targetPendingRequests").String(), "dropped: scalingMetric is set and wins (as in the add-on)")
	}
	out := &v1.ScalingMetric{}
	if cm := m.Concurrency; cm != nil {
		out.Concurrency = &v1.ConcurrencyMetric{TargetValue: ptr.Deref(cm.TargetValue, 0)}
	}
	if rm := m.RequestRate; rm != nil {
		rpath := path.Child("scalingMetric", "requestRate")
		r := &v1.RequestRateMetric{TargetValue: ptr.Deref(rm.TargetValue, 0)}
		if rm.TargetValue == nil {
			r.TargetValue = peerRateTargetDefault
			c.warn(rpath.Child("targetValue").String(), fmt.Sprintf("not set: written as %d, the add-on's default", peerRateTargetDefault))
		}
		r.Window = c.duration(rpath.Child("window"), rm.Window)
		r.Granularity = c.duration(rpath.Child("granularity"), rm.Granularity)
		out.RequestRate = r
	}
	if out.Concurrency != nil && out.RequestRate != nil {
		c.warn(path.Child("scalingMetric").String(), "both concurrency and requestRate are set: httpscale reports "+
			"each as its own metric and the autoscaler follows the larger recommendation")
	}
	return out
}

func (c *converter) timeouts(ps *peerSpec, out *v1.HTTPScaledObjectSpec) {
	path := field.NewPath("spec", "timeouts")
	t := &v1.Timeouts{}
	if pt := ps.Timeouts; pt != nil {
		t.Readiness = c.timeout(path.Child("conditionWait"), pt.ConditionWait)
		t.ResponseHeader = c.timeout(path.Child("responseHeader"), pt.ResponseHeader)
		t.Request = c.timeout(path.Child("request"), pt.Request)
	}
	if f := ps.ColdStartTimeoutFailoverRef; f != nil {
		fpath := field.NewPath("spec", "coldStartTimeoutFailoverRef")
		if f.Service == "" {
			c.errs = append(c.errs, field.Required(fpath.Child("service"), "name the failover Service"))
		}
		if (f.Port == nil) == (f.PortName == nil) {
			c.errs = append(c.errs, field.Required(fpath.Child("port"), "set exactly one of port or portName"))
		}
		out.ColdStart = &v1.ColdStart{Fallback: &v1.FallbackService{Service: f.Service, Port: f.Port, PortName: f.PortName}}
		secs := ptr.Deref(f.TimeoutSeconds, peerFailoverDefaultSec)
		if secs <= 0 {
			c.errs = append(c.errs, field.Invalid(fpath.Child("timeoutSeconds"), secs, "must be a positive number of seconds"))
		}
		readiness := v1.Duration(strconv.Itoa(int(secs)) + "s")
		if t.Readiness != nil && *t.Readiness != readiness {
			c.warn(path.Child("conditionWait").String(), fmt.Sprintf("replaced by coldStartTimeoutFailoverRef.timeoutSeconds "+
				"(%s): in httpscale one readiness timeout decides when held requests go to the fallback", readiness))
		}
		t.Readiness = &readiness
	}
	if *t != (v1.Timeouts{}) {
		out.Timeouts = t
	}
}

// timeout converts an optional per-app timeout; the add-on's "0s" (no deadline) has no per-app
// equivalent, so the interceptor's default applies instead.
func (c *converter) timeout(path *field.Path, s string) *v1.Duration {
	if s == "" {
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		c.errs = append(c.errs, field.Invalid(path, s, "must be a duration such as 500ms, 30s or 2m"))
		return nil
	}
	if d == 0 {
		c.warn(path.String(), "dropped: 0 turns this deadline off in the add-on; httpscale has no per-app off switch, so the interceptor's default applies")
		return nil
	}
	out := c.duration(path, s)
	return &out
}

// goDuration is the duration syntax httpscale's API accepts.
var goDuration = regexp.MustCompile(`^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$`)

// duration checks a positive duration and writes it in the syntax httpscale's API accepts.
func (c *converter) duration(path *field.Path, s string) v1.Duration {
	if s == "" {
		return ""
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		c.errs = append(c.errs, field.Invalid(path, s, "must be a positive duration such as 500ms, 30s or 2m"))
		return ""
	}
	if goDuration.MatchString(s) {
		return v1.Duration(s)
	}
	return v1.Duration(strings.ReplaceAll(d.String(), "µ", "u")) // e.g. "+5s" or "1µs"
}
