package config

import (
	"flag"
)

// Scaler configures the scaler binary.
type Scaler struct {
	Common
}

// Bind registers the scaler's flags on fs, with defaults taken from the environment.
func (s *Scaler) Bind(fs *flag.FlagSet) {
	s.bind(fs, ":9191", ":9190")
}

// Validate reports every invalid setting at once.
func (s *Scaler) Validate() error { return s.validate() }
