package webhook

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// validatePathRewrites checks what CEL cannot about pathRewrites: two rewrites of one prefix
// written with and without a trailing / (pathPrefixes may list both spellings, which route alike),
// and, for an older CRD without the rule, a rewrite of a prefix the object does not route.
func validatePathRewrites(path *field.Path, spec *v1.HTTPScaledObjectSpec) field.ErrorList {
	var errs field.ErrorList
	routed := map[string]bool{}
	for _, p := range spec.PathPrefixes {
		routed[trimSlash(string(p))] = true
	}
	if len(routed) == 0 {
		routed["/"] = true
	}
	seen := map[string]int{}
	for i, rw := range spec.PathRewrites {
		p := trimSlash(string(rw.PathPrefix))
		fp := path.Child("pathRewrites").Index(i).Child("pathPrefix")
		if j, dup := seen[p]; dup {
			errs = append(errs, field.Duplicate(fp, fmt.Sprintf("%s (the same prefix as pathRewrites[%d]; a trailing / does not matter), keep one", rw.PathPrefix, j)))
			continue
		}
		seen[p] = i
		if !routed[p] {
			errs = append(errs, field.Invalid(fp, string(rw.PathPrefix),
				fmt.Sprintf("must be one of spec.pathPrefixes %q (an object without pathPrefixes can only rewrite /)", spec.PathPrefixes)))
		}
	}
	return errs
}
