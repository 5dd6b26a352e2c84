package config

import (
	"flag"
)

// Interceptor configures the interceptor binary.
type Interceptor struct {
	Common
}

// Bind registers the interceptor's flags on fs, with defaults taken from the environment.
func (i *Interceptor) Bind(fs *flag.FlagSet) {
	i.bind(fs, ":9091", ":9090")
}

// Validate reports every invalid setting at once.
func (i *Interceptor) Validate() error { return i.validate() }
