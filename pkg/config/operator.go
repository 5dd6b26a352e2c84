package config

import (
	"errors"
	"flag"
)

// Operator configures the operator binary.
type Operator struct {
	Common
	// LeaderElect makes only one operator replica reconcile at a time.
	LeaderElect bool
	// Namespace is where the operator is installed and writes the routing table.
	Namespace string
}

// Bind registers the operator's flags on fs, with defaults taken from the environment.
func (o *Operator) Bind(fs *flag.FlagSet) {
	o.bind(fs, ":8081", ":8080")
	fs.BoolVar(&o.LeaderElect, "leader-elect", envBool("HTTPSCALE_LEADER_ELECT", true), "Elect one active operator replica.")
	fs.StringVar(&o.Namespace, "namespace", env("POD_NAMESPACE", "httpscale-system"), "Namespace the operator is installed in; the routing table is written here.")
}

// Validate reports every invalid setting at once.
func (o *Operator) Validate() error {
	errs := []error{o.validate()}
	if o.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	return errors.Join(errs...)
}
