package webhook

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
	rules "github.com/httpscale/httpscale/pkg/schedule"
)

// Path is where the HTTPScaledObject validating webhook is served (controller-runtime's naming scheme).
const Path = "/validate-httpscale-dev-v1alpha1-httpscaledobject"

// The generated config/webhook/manifests.yaml; the chart renders the same configuration.
// +kubebuilder:webhookconfiguration:mutating=false,name=httpscale-operator-webhook
// +kubebuilder:webhook:path=/validate-httpscale-dev-v1alpha1-httpscaledobject,mutating=false,failurePolicy=fail,sideEffects=None,groups=httpscale.dev,resources=httpscaledobjects,verbs=create;update,versions=v1alpha1,name=httpscaledobjects.httpscale.dev,admissionReviewVersions=v1,serviceName=httpscale-operator-webhook,serviceNamespace=httpscale-system,servicePort=443,timeoutSeconds=10

// Validator rejects HTTPScaledObjects with problems the CRD's schema and CEL rules cannot catch (cron
// syntax, time zones) and repeats the schedule checks CEL makes, so an older CRD still gets them.
type Validator struct {
	// Location is the operator's zone, used for rules without a timeZone.
	Location *time.Location
	// Tenancy, when set, also refuses what one tenant may not do to another (tenancy.go).
	Tenancy *Tenancy
}

var _ admission.Validator[*v1.HTTPScaledObject] = Validator{}

// ValidateCreate implements admission.Validator.
func (v Validator) ValidateCreate(ctx context.Context, obj *v1.HTTPScaledObject) (admission.Warnings, error) {
	return v.validate(ctx, obj, nil)
}

// ValidateUpdate implements admission.Validator. Updates that leave the spec alone (finalizers,
// annotations, deletion) are always allowed, so an object that became invalid can still be deleted.
func (v Validator) ValidateUpdate(ctx context.Context, oldObj, newObj *v1.HTTPScaledObject) (admission.Warnings, error) {
	if !newObj.DeletionTimestamp.IsZero() || equality.Semantic.DeepEqual(oldObj.Spec, newObj.Spec) {
		return nil, nil
	}
	return v.validate(ctx, newObj, oldObj)
}

// ValidateDelete implements admission.Validator.
func (Validator) ValidateDelete(context.Context, *v1.HTTPScaledObject) (admission.Warnings, error) {
	return nil, nil
}

func (v Validator) validate(ctx context.Context, obj, old *v1.HTTPScaledObject) (admission.Warnings, error) {
	errs, warnings := Validate(&obj.Spec, v.Location)
	if v.Tenancy != nil {
		errs = append(errs, v.Tenancy.check(ctx, obj, old)...)
	}
	if len(errs) == 0 {
		return warnings, nil
	}
	return warnings, apierrors.NewInvalid(v1.GroupVersion.WithKind("HTTPScaledObject").GroupKind(), obj.Name, errs)
}

// Validate checks spec and returns what is wrong (each message says what to fix) and warnings about
// settings that work but may surprise. loc is the zone of rules without a timeZone.
func Validate(spec *v1.HTTPScaledObjectSpec, loc *time.Location) (field.ErrorList, []string) {
	var errs field.ErrorList
	var warnings []string
	path := field.NewPath("spec")
	errs = append(errs, uniqueFold(len(spec.Headers), func(i int) (string, *field.Path) {
		return spec.Headers[i].Name, path.Child("headers").Index(i).Child("name")
	})...)
	if cs := spec.ColdStart; cs != nil && cs.Placeholder != nil {
		errs = append(errs, uniqueHeaderKeys(path.Child("coldStart", "placeholder", "headers"), cs.Placeholder.Headers)...)
	}
	errs = append(errs, validateExtraRoutes(path, spec)...)
	errs = append(errs, validatePathRewrites(path, spec)...)
	e, w := validateSchedules(path.Child("schedules"), spec, loc)
	return append(errs, e...), append(warnings, w...)
}

func validateSchedules(path *field.Path, spec *v1.HTTPScaledObjectSpec, loc *time.Location) (field.ErrorList, []string) {
	var errs field.ErrorList
	var warnings []string
	specMin, specMax := spec.Bounds()
	names := map[string]int{}
	for i, r := range spec.Schedules {
		p := path.Index(i)
		if j, dup := names[r.Name]; dup {
			errs = append(errs, field.Duplicate(p.Child("name"), fmt.Sprintf("%s (also the name of schedules[%d]); give each rule its own name", r.Name, j)))
		}
		names[r.Name] = i

		zoneName := ptr.Deref(r.TimeZone, "")
		zone, err := rules.LoadLocation(zoneName, loc)
		if err != nil {
			errs = append(errs, field.Invalid(p.Child("timeZone"), zoneName, err.Error()))
			zone = time.UTC
		}
		if _, err := rules.Parse(r.Schedule, zone); err != nil {
			errs = append(errs, field.Invalid(p.Child("schedule"), r.Schedule, err.Error()))
		}

		minR, maxR := r.TargetMinReplicas, r.TargetMaxReplicas
		switch {
		case minR == nil && maxR == nil:
			errs = append(errs, field.Required(p, "set targetMinReplicas, targetMaxReplicas or both: a rule with no target changes nothing"))
		case minR != nil && maxR != nil && *minR > *maxR:
			errs = append(errs, field.Invalid(p.Child("targetMinReplicas"), *minR, fmt.Sprintf("targetMinReplicas must not be greater than targetMaxReplicas (%d); lower it or raise targetMaxReplicas", *maxR)))
		case minR == nil && *maxR < specMin:
			errs = append(errs, field.Invalid(p.Child("targetMaxReplicas"), *maxR, fmt.Sprintf("targetMaxReplicas is below replicas.min (%d), which stays in force while this rule applies; also set targetMinReplicas (at most %d) or lower replicas.min", specMin, *maxR)))
		case maxR == nil && *minR > specMax:
			warnings = append(warnings, fmt.Sprintf("spec.schedules[%d]: targetMinReplicas %d is above replicas.max %d; while rule %s is in force the maximum is raised to %d", i, *minR, specMax, r.Name, *minR))
		}
		if r.SuccessfulHistoryLimit != nil && (*r.SuccessfulHistoryLimit < 1 || *r.SuccessfulHistoryLimit > 32) {
			errs = append(errs, field.Invalid(p.Child("successfulHistoryLimit"), *r.SuccessfulHistoryLimit, "must be between 1 and 32"))
		}
		if r.FailedHistoryLimit != nil && (*r.FailedHistoryLimit < 0 || *r.FailedHistoryLimit > 32) {
			errs = append(errs, field.Invalid(p.Child("failedHistoryLimit"), *r.FailedHistoryLimit, "must be between 0 and 32"))
		}
	}
	return errs, warnings
}

// uniqueHeaderKeys reports header names of a response that differ only in case.
func uniqueHeaderKeys(path *field.Path, headers map[string]string) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(headers)) {
		if other, ok := seen[strings.ToLower(name)]; ok {
			errs = append(errs, field.Duplicate(path.Key(name),
				fmt.Sprintf("header %q is also given as %q; header names are case-insensitive, keep one", name, other)))
		}
		seen[strings.ToLower(name)] = name
	}
	return errs
}

// uniqueFold reports values that repeat case-insensitively.
func uniqueFold(n int, at func(int) (string, *field.Path)) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]string{}
	for i := 0; i < n; i++ {
		v, p := at(i)
		if first, ok := seen[strings.ToLower(v)]; ok {
			errs = append(errs, field.Duplicate(p, fmt.Sprintf("%s (same header as %s; header names are case-insensitive, keep one)", v, first)))
			continue
		}
		seen[strings.ToLower(v)] = v
	}
	return errs
}
