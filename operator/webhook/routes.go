package webhook

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/httpscale/httpscale/api/v1alpha1"
)

// validateExtraRoutes checks what CEL cannot about ignoredPaths and staticRoutes: an ignored path is
// the app's own traffic, so it must lie inside one of pathPrefixes (or equal one, which it then takes
// over); a static route's prefix must not also be a path prefix or an ignored path, as a prefix is
// served one way; and a prefix is not listed twice once a trailing "/" is ignored.
func validateExtraRoutes(path *field.Path, spec *v1.HTTPScaledObjectSpec) field.ErrorList {
	var errs field.ErrorList
	prefixes := map[string]bool{}
	for _, p := range spec.PathPrefixes {
		prefixes[trimSlash(string(p))] = true
	}
	inside := func(p string) bool {
		if len(prefixes) == 0 || prefixes["/"] || prefixes[p] {
			return true
		}
		for q := range prefixes {
			if strings.HasPrefix(p, q+"/") {
				return true
			}
		}
		return false
	}
	ignored := map[string]int{}
	for i, raw := range spec.IgnoredPaths {
		p := trimSlash(string(raw))
		fp := path.Child("ignoredPaths").Index(i)
		if j, dup := ignored[p]; dup {
			errs = append(errs, field.Duplicate(fp, fmt.Sprintf("%s (the same path as ignoredPaths[%d]; a trailing / does not matter), keep one", raw, j)))
			continue
		}
		ignored[p] = i
		if strings.HasPrefix(p, "/") && !inside(p) {
			errs = append(errs, field.Invalid(fp, string(raw), fmt.Sprintf(
				"an ignored path is part of the app's own traffic and must lie inside one of pathPrefixes %q; add a path prefix that covers it, or answer it with a staticRoutes entry instead", spec.PathPrefixes)))
		}
	}
	static := map[string]int{}
	for i, sr := range spec.StaticRoutes {
		p := trimSlash(string(sr.PathPrefix))
		fp := path.Child("staticRoutes").Index(i).Child("pathPrefix")
		switch j, dup := static[p]; {
		case dup:
			errs = append(errs, field.Duplicate(fp, fmt.Sprintf("%s (the same path as staticRoutes[%d]; a trailing / does not matter), keep one", sr.PathPrefix, j)))
		case prefixes[p] || len(spec.PathPrefixes) == 0 && p == "/":
			errs = append(errs, field.Invalid(fp, string(sr.PathPrefix),
				"this prefix is also one of the app's pathPrefixes (no pathPrefixes means /); a prefix is served one way: remove it from one of the lists"))
		default:
			if _, ok := ignored[p]; ok {
				errs = append(errs, field.Invalid(fp, string(sr.PathPrefix),
					"this prefix is also in ignoredPaths; a prefix is served one way: remove it from one of the lists"))
			}
		}
		static[p] = i
		if r := sr.Response; r != nil {
			errs = append(errs, uniqueHeaderKeys(path.Child("staticRoutes").Index(i).Child("response", "headers"), r.Headers)...)
		}
	}
	return errs
}

// trimSlash drops trailing slashes but keeps "/" itself, as the routing table stores prefixes.
func trimSlash(p string) string {
	for len(p) > 1 && strings.HasSuffix(p, "/") {
		p = p[:len(p)-1]
	}
	return p
}
