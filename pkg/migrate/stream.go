package migrate

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// ConvertStream reads YAML or JSON documents from r (manifest files, or `kubectl get -o yaml` output
// whose List items are expanded), converts every KEDA HTTP add-on HTTPScaledObject and writes the
// documents to w as YAML separated by ---. Other objects are written unchanged, so a whole manifest file
// can be converted. Objects that cannot be converted are left out and their errors returned together
// after the rest has been written.
func ConvertStream(r io.Reader, w io.Writer, opts Options) ([]Warning, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var warnings []Warning
	var errs []error
	first := true
	for doc := 1; ; doc++ {
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return warnings, errors.Join(append(errs, fmt.Errorf("reading document %d: %w", doc, err))...)
		}
		if len(raw) == 0 {
			continue // an empty document, e.g. a trailing ---
		}
		for _, obj := range expand(&unstructured.Unstructured{Object: raw}) {
			out, ws, err := convertOne(obj, opts)
			warnings = append(warnings, ws...)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			data, err := yaml.Marshal(out)
			if err != nil {
				return warnings, fmt.Errorf("writing %s: %w", obj.GetName(), err)
			}
			if !first {
				data = append([]byte("---\n"), data...)
			}
			first = false
			if _, err := w.Write(data); err != nil {
				return warnings, fmt.Errorf("writing output: %w", err)
			}
		}
	}
	return warnings, errors.Join(errs...)
}

// expand returns a List's items (kubectl get -o yaml prints a v1 List), or obj itself.
func expand(obj *unstructured.Unstructured) []*unstructured.Unstructured {
	if !obj.IsList() || !strings.HasSuffix(obj.GetKind(), "List") {
		return []*unstructured.Unstructured{obj}
	}
	var out []*unstructured.Unstructured
	_ = obj.EachListItem(func(item runtime.Object) error {
		if u, ok := item.(*unstructured.Unstructured); ok {
			out = append(out, expand(u)...)
		}
		return nil
	})
	return out
}

// convertOne converts a peer object to httpscale's as a plain map without status or server-set
// metadata; any other object is returned unchanged.
func convertOne(obj *unstructured.Unstructured, opts Options) (map[string]any, []Warning, error) {
	if !IsPeer(obj) {
		return obj.Object, nil, nil
	}
	hso, warnings, err := Convert(obj, opts)
	if err != nil {
		return nil, warnings, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(hso)
	if err != nil {
		return nil, warnings, fmt.Errorf("encoding %s: %w", obj.GetName(), err)
	}
	delete(m, "status")
	unstructured.RemoveNestedField(m, "metadata", "creationTimestamp")
	return m, warnings, nil
}
