package migrate

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The KEDA HTTP add-on's HTTPScaledObject as this package reads it: every field its v1alpha1 API has had
// (the single host and scaleTargetRef.deployment of its early releases included). Unset pointers mean
// "not given".
type peerSpec struct {
	Host                        string        `json:"host,omitempty"`
	Hosts                       []string      `json:"hosts,omitempty"`
	PathPrefixes                []string      `json:"pathPrefixes,omitempty"`
	Headers                     []peerHeader  `json:"headers,omitempty"`
	ScaleTargetRef              *peerTarget   `json:"scaleTargetRef,omitempty"`
	Replicas                    *peerReplicas `json:"replicas,omitempty"`
	ScaledownPeriod             *int32        `json:"scaledownPeriod,omitempty"`
	InitialCooldownPeriod       *int32        `json:"initialCooldownPeriod,omitempty"`
	TargetPendingRequests       *int32        `json:"targetPendingRequests,omitempty"`
	ScalingMetric               *peerMetric   `json:"scalingMetric,omitempty"`
	ColdStartTimeoutFailoverRef *peerFailover `json:"coldStartTimeoutFailoverRef,omitempty"`
	Timeouts                    *peerTimeouts `json:"timeouts,omitempty"`
}

type peerHeader struct {
	Name  string  `json:"name"`
	Value *string `json:"value,omitempty"`
}

type peerTarget struct {
	Name       string  `json:"name,omitempty"`
	Deployment string  `json:"deployment,omitempty"`
	Kind       string  `json:"kind,omitempty"`
	APIVersion string  `json:"apiVersion,omitempty"`
	Service    string  `json:"service,omitempty"`
	Port       *int32  `json:"port,omitempty"`
	PortName   *string `json:"portName,omitempty"`
}

type peerReplicas struct {
	Min *int32 `json:"min,omitempty"`
	Max *int32 `json:"max,omitempty"`
}

type peerMetric struct {
	Concurrency *struct {
		TargetValue *int32 `json:"targetValue,omitempty"`
	} `json:"concurrency,omitempty"`
	RequestRate *struct {
		TargetValue *int32 `json:"targetValue,omitempty"`
		Window      string `json:"window,omitempty"`
		Granularity string `json:"granularity,omitempty"`
	} `json:"requestRate,omitempty"`
}

type peerFailover struct {
	Service        string  `json:"service,omitempty"`
	Port           *int32  `json:"port,omitempty"`
	PortName       *string `json:"portName,omitempty"`
	TimeoutSeconds *int32  `json:"timeoutSeconds,omitempty"`
}

type peerTimeouts struct {
	ConditionWait  string `json:"conditionWait,omitempty"`
	ResponseHeader string `json:"responseHeader,omitempty"`
	Request        string `json:"request,omitempty"`
}

// knownFields lists, per object path, the fields peerSpec reads. Anything else in a spec is reported as
// not converted instead of being dropped silently.
var knownFields = map[string][]string{
	"spec": {"host", "hosts", "pathPrefixes", "headers", "scaleTargetRef", "replicas", "scaledownPeriod",
		"initialCooldownPeriod", "targetPendingRequests", "scalingMetric", "coldStartTimeoutFailoverRef", "timeouts"},
	"spec.headers[]":                   {"name", "value"},
	"spec.scaleTargetRef":              {"name", "deployment", "kind", "apiVersion", "service", "port", "portName"},
	"spec.replicas":                    {"min", "max"},
	"spec.scalingMetric":               {"concurrency", "requestRate"},
	"spec.scalingMetric.concurrency":   {"targetValue"},
	"spec.scalingMetric.requestRate":   {"targetValue", "window", "granularity"},
	"spec.coldStartTimeoutFailoverRef": {"service", "port", "portName", "timeoutSeconds"},
	"spec.timeouts":                    {"conditionWait", "responseHeader", "request"},
}

// unknownFields returns the paths of fields in obj (found at path) that knownFields does not list.
func unknownFields(path string, obj map[string]any) []string {
	known, ok := knownFields[path]
	if !ok {
		return nil
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if !slices.Contains(known, k) {
			out = append(out, path+"."+k)
			continue
		}
		switch v := obj[k].(type) {
		case map[string]any:
			out = append(out, unknownFields(path+"."+k, v)...)
		case []any:
			for _, item := range v {
				if m, ok := item.(map[string]any); ok {
					out = append(out, unknownFields(path+"."+k+"[]", m)...)
				}
			}
		}
	}
	return out
}

// decodeSpec reads spec into peerSpec. A field of the wrong type is reported with its path.
func decodeSpec(spec map[string]any) (*peerSpec, *field.Error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, field.Invalid(field.NewPath("spec"), "<object>", fmt.Sprintf("not JSON-encodable: %v", err))
	}
	var ps peerSpec
	if err := json.Unmarshal(data, &ps); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, field.TypeInvalid(field.NewPath("spec").Child(typeErr.Field), typeErr.Value,
				fmt.Sprintf("want %s", jsonKind(typeErr.Type.Kind().String())))
		}
		return nil, field.Invalid(field.NewPath("spec"), "<object>", err.Error())
	}
	return &ps, nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "int32", "int64", "int":
		return "an integer"
	case "string":
		return "a string"
	case "slice":
		return "a list"
	case "struct", "ptr":
		return "an object"
	}
	return goKind
}
