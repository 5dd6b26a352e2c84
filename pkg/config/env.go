package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// fallbackEnv names the conventional variable a flag reads when its HTTPSCALE_ variable is unset or
// empty (the downward API's POD_NAMESPACE and NODE_NAME, client-go's KUBECONFIG).
var fallbackEnv = map[string]string{
	"namespace":  "POD_NAMESPACE",
	"node-name":  "NODE_NAME",
	"kubeconfig": "KUBECONFIG",
}

// EnvName returns the environment variable of a flag: HTTPSCALE_ followed by the flag's name in upper
// case with dashes turned into underscores (--queue-limit reads HTTPSCALE_QUEUE_LIMIT).
func EnvName(flagName string) string {
	return "HTTPSCALE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// lookupEnv returns the variable that sets a flag and its value; an empty value counts as unset.
func lookupEnv(flagName string) (name, value string) {
	name = EnvName(flagName)
	if v := os.Getenv(name); v != "" {
		return name, v
	}
	if fb, ok := fallbackEnv[flagName]; ok {
		if v := os.Getenv(fb); v != "" {
			return fb, v
		}
	}
	return "", ""
}

// loadEnv sets every flag registered on fs so far from its environment variable, through the flag's own
// parser, so a later command-line flag still wins and a value the flag would reject is an error naming
// the variable instead of being ignored. It reports every bad variable at once.
func loadEnv(fs *flag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name, v := lookupEnv(f.Name)
		if v == "" {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Errorf("environment variable %s=%q (sets --%s): want %s: %w", name, v, f.Name, want(f.Value), err))
			// Some flag types store a zero before failing; put the default back so that Validate does
			// not add a second, misleading complaint about the zero.
			_ = f.Value.Set(f.DefValue)
		}
	})
	return errors.Join(errs...)
}

// want describes the values a flag accepts, for error messages.
func want(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return "a valid value"
	}
	switch g.Get().(type) {
	case bool:
		return "true or false"
	case int:
		return "an integer"
	case float64:
		return "a number"
	case time.Duration:
		return "a duration such as 500ms, 30s or 2m"
	default:
		return "a valid value"
	}
}
