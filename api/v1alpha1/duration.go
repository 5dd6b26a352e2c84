package v1alpha1

import "time"

// Parsed returns the duration d spells; nil or unparsable (which the API server rejects) is zero,
// meaning "use the default".
func (d *Duration) Parsed() time.Duration {
	if d == nil {
		return 0
	}
	v, err := time.ParseDuration(string(*d))
	if err != nil {
		return 0
	}
	return v
}
