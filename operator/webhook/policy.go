package webhook

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// PolicyPath is where the HTTPScalePolicy validating webhook is served.
const PolicyPath = "/validate-httpscale-dev-v1alpha1-httpscalepolicy"

// +kubebuilder:webhook:path=/validate-httpscale-dev-v1alpha1-httpscalepolicy,mutating=false,failurePolicy=ignore,sideEffects=None,groups=httpscale.dev,resources=httpscalepolicies,verbs=create;update,versions=v1alpha1,name=httpscalepolicies.httpscale.dev,admissionReviewVersions=v1,serviceName=httpscale-operator-webhook,serviceNamespace=httpscale-system,servicePort=443,timeoutSeconds=10

// PolicyValidator rejects HTTPScalePolicies the operator could not apply as written: a label
// selector that does not parse would select no namespace (the operator logs and ignores it), so it
// is refused here with the field and the reason. The CRD checks the rest (patterns, names).
type PolicyValidator struct{}

var _ admission.Validator[*v1.HTTPScalePolicy] = PolicyValidator{}

// ValidateCreate implements admission.Validator.
func (PolicyValidator) ValidateCreate(_ context.Context, p *v1.HTTPScalePolicy) (admission.Warnings, error) {
	return validatePolicy(p)
}

// ValidateUpdate implements admission.Validator.
func (PolicyValidator) ValidateUpdate(_ context.Context, _, p *v1.HTTPScalePolicy) (admission.Warnings, error) {
	return validatePolicy(p)
}

// ValidateDelete implements admission.Validator.
func (PolicyValidator) ValidateDelete(context.Context, *v1.HTTPScalePolicy) (admission.Warnings, error) {
	return nil, nil
}

func validatePolicy(p *v1.HTTPScalePolicy) (admission.Warnings, error) {
	var errs field.ErrorList
	var warnings admission.Warnings
	spec := field.NewPath("spec")
	selector := func(s *v1.NamespaceSelection, path *field.Path) {
		if s == nil || s.Selector == nil {
			return
		}
		if _, err := metav1.LabelSelectorAsSelector(s.Selector); err != nil {
			errs = append(errs, field.Invalid(path.Child("selector"), s.Selector, err.Error()))
		}
	}
	for i := range p.Spec.Hosts {
		r := &p.Spec.Hosts[i]
		path := spec.Child("hosts").Index(i)
		selector(&r.Namespaces, path.Child("namespaces"))
		if r.Pattern == "*" && r.Wildcards && r.Namespaces.Selector != nil && len(r.Namespaces.Selector.MatchLabels)+len(r.Namespaces.Selector.MatchExpressions) == 0 {
			warnings = append(warnings, fmt.Sprintf("%s: every namespace may claim wildcard hosts anywhere no more specific rule covers (the first to claim one owns the names below it)", path))
		}
		if len(r.Namespaces.Names) == 0 && r.Namespaces.Selector == nil {
			warnings = append(warnings, fmt.Sprintf("%s: selects no namespace, so no namespace may claim hosts of pattern %s", path, r.Pattern))
		}
	}
	selector(p.Spec.CatchAll, spec.Child("catchAll"))
	selector(p.Spec.ClusterTriggerAuthentication, spec.Child("clusterTriggerAuthentication"))
	if len(errs) == 0 {
		return warnings, nil
	}
	return warnings, apierrors.NewInvalid(v1.GroupVersion.WithKind("HTTPScalePolicy").GroupKind(), p.Name, errs)
}
