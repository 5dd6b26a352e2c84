package controller

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/pkg/routing"
)

// appProtocolH2C is the Service port appProtocol that makes the interceptor speak cleartext HTTP/2.
const appProtocolH2C = "kubernetes.io/h2c"

// invalidError is a problem with what the user wrote that only the user can fix. Its Reason and
// message become the Valid=False condition.
type invalidError struct {
	Reason  string
	Message string
}

func (e *invalidError) Error() string { return e.Message }

func invalid(reason, format string, args ...any) error {
	return &invalidError{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// resolvePort finds the Service port that port/portName name and turns it into a routing backend.
func resolvePort(svc *corev1.Service, port *int32, portName *string, field string) (routing.Backend, error) {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return routing.Backend{}, invalid("UnsupportedService",
			"%s: Service %s is of type ExternalName: the interceptors would dial a DNS name it chooses from their own network position, so it is refused; point it at a Service with a cluster IP in this namespace", field, svc.Name)
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if (port != nil && p.Port == *port) || (portName != nil && p.Name == *portName) {
			b := routing.Backend{Service: svc.Name, Port: p.Port, PortName: p.Name, Protocol: routing.ProtocolHTTP}
			if ip := svc.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
				b.ClusterIP = ip
			}
			if p.TargetPort.IntValue() > 0 {
				b.TargetPort = int32(p.TargetPort.IntValue())
			} else if p.TargetPort.StrVal == "" {
				b.TargetPort = p.Port // an unset targetPort defaults to the port
			}
			if p.AppProtocol != nil && (*p.AppProtocol == appProtocolH2C || *p.AppProtocol == "h2c") {
				b.Protocol = routing.ProtocolH2C
			}
			return b, nil
		}
	}
	var have []string
	for _, p := range svc.Spec.Ports {
		have = append(have, fmt.Sprintf("%d(%s)", p.Port, p.Name))
	}
	want := ""
	if port != nil {
		want = fmt.Sprintf("port %d", *port)
	} else if portName != nil {
		want = fmt.Sprintf("portName %q", *portName)
	}
	return routing.Backend{}, invalid("PortNotFound",
		"%s: Service %s has no TCP %s; its ports are %v", field, svc.Name, want, have)
}

// addressed refuses a backend the interceptors would have to dial by the Service's address when the
// Service has no cluster IP (headless): they dial only addresses the operator read from the API,
// never a DNS name a tenant chose.
func addressed(b routing.Backend, field string) error {
	if b.ClusterIP == "" {
		return invalid("UnsupportedService",
			"%s: Service %s is headless (clusterIP: None); the interceptors forward here to the Service's cluster IP and never resolve a name, so give the Service a cluster IP", field, b.Service)
	}
	return nil
}

// buildEntry turns a valid object and its resolved backends into the routing-table entry the
// interceptors route with (routing.EntryFromSpec, shared with the interceptor's standalone mode).
func buildEntry(hso *v1.HTTPScaledObject, target routing.Backend, fallback *routing.Backend) routing.Entry {
	return routing.EntryFromSpec(hso, target, fallback)
}

// ReasonRouteTooLarge is the Valid=False reason of an object whose routing entry is over the
// per-object budget.
const ReasonRouteTooLarge = "RouteTooLarge"

// routeTooLarge is the message of an object whose routing entry's stored form is size bytes, over
// the budget limit.
func routeTooLarge(size, limit int) string {
	return fmt.Sprintf("the object's routing entry is %d bytes, over the per-object budget of %d bytes (the operator's --max-entry-bytes); shorten its placeholder, waiting page, static responses or header matches, or split it into several objects", size, limit)
}

// resolve validates everything CEL cannot (the Service and port, the fallback, the scale target) and
// builds the routing entry. Problems the user must fix come back as *invalidError.
func (r *Reconciler) resolve(ctx context.Context, hso *v1.HTTPScaledObject) (routing.Entry, error) {
	ref := hso.Spec.ScaleTargetRef
	svc, err := r.service(ctx, hso.Namespace, ref.Service, "scaleTargetRef.service", "ServiceNotFound")
	if err != nil {
		return routing.Entry{}, err
	}
	target, err := resolvePort(svc, ref.Port, ref.PortName, "scaleTargetRef")
	if err != nil {
		return routing.Entry{}, err
	}
	if f := hso.Spec.Forwarding; f != nil && f.ViaService {
		if err := addressed(target, "scaleTargetRef (forwarding.viaService)"); err != nil {
			return routing.Entry{}, err
		}
	}
	var fallback *routing.Backend
	if cs := hso.Spec.ColdStart; cs != nil && cs.Fallback != nil {
		fsvc, err := r.service(ctx, hso.Namespace, cs.Fallback.Service, "coldStart.fallback.service", "FallbackServiceNotFound")
		if err != nil {
			return routing.Entry{}, err
		}
		fb, err := resolvePort(fsvc, cs.Fallback.Port, cs.Fallback.PortName, "coldStart.fallback")
		if err != nil {
			return routing.Entry{}, err
		}
		if err := addressed(fb, "coldStart.fallback"); err != nil {
			return routing.Entry{}, err
		}
		fallback = &fb
	}
	static := map[string]routing.Backend{}
	for i, sr := range hso.Spec.StaticRoutes {
		if sr.Service == nil {
			continue
		}
		field := fmt.Sprintf("staticRoutes[%d].service", i)
		ssvc, err := r.service(ctx, hso.Namespace, sr.Service.Name, field, "StaticServiceNotFound")
		if err != nil {
			return routing.Entry{}, err
		}
		b, err := resolvePort(ssvc, &sr.Service.Port, nil, field)
		if err != nil {
			return routing.Entry{}, err
		}
		if err := addressed(b, field); err != nil {
			return routing.Entry{}, err
		}
		static[string(sr.PathPrefix)] = b
	}
	if err := r.checkTriggers(ctx, hso); err != nil {
		return routing.Entry{}, err
	}
	if err := r.Targets.Check(ctx, hso); err != nil {
		return routing.Entry{}, err
	}
	entry := buildEntry(hso, target, fallback)
	for i := range entry.Static {
		if b, ok := static[entry.Static[i].PathPrefix]; ok {
			entry.Static[i].Backend = &b
		}
	}
	if err := r.serveHosts(ctx, hso, svc, &entry); err != nil {
		return routing.Entry{}, err
	}
	// CEL admits nothing the table rejects today; this keeps it that way if the two ever drift apart.
	_, line, err := routing.EncodeEntry(entry)
	if err != nil {
		return routing.Entry{}, invalid("InvalidRoute", "the routing table cannot hold this object: %v", err)
	}
	if len(line) > r.maxEntryBytes {
		return routing.Entry{}, invalid(ReasonRouteTooLarge, "%s", routeTooLarge(len(line), r.maxEntryBytes))
	}
	return entry, nil
}

func (r *Reconciler) service(ctx context.Context, namespace, name, field, reason string) (*corev1.Service, error) {
	svc := &corev1.Service{}
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, svc)
	if apierrors.IsNotFound(err) {
		return nil, invalid(reason, "%s: Service %s/%s does not exist; create it or correct the name", field, namespace, name)
	}
	if err != nil {
		return nil, fmt.Errorf("reading Service %s/%s: %w", namespace, name, err)
	}
	return svc, nil
}
