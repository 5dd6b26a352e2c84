package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

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
			"%s: Service %s is of type ExternalName, which has no endpoints to route to; point it at a Service with a selector", field, svc.Name)
	}
	for _, p := range svc.Spec.Ports {
		if p.Protocol != "" && p.Protocol != corev1.ProtocolTCP {
			continue
		}
		if (port != nil && p.Port == *port) || (portName != nil && p.Name == *portName) {
			b := routing.Backend{Service: svc.Name, Port: p.Port, PortName: p.Name, Protocol: routing.ProtocolHTTP}
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

// buildEntry turns a valid object and its resolved backends into the routing-table entry the
// interceptors route with (routing.EntryFromSpec, shared with the interceptor's standalone mode).
func buildEntry(hso *v1.HTTPScaledObject, target routing.Backend, fallback *routing.Backend) routing.Entry {
	return routing.EntryFromSpec(hso, target, fallback)
}
