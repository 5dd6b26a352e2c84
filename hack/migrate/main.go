// Command migrate converts the KEDA HTTP add-on's HTTPScaledObjects (http.keda.sh/v1alpha1) into
// httpscale's. It reads manifests or `kubectl get -o yaml` output and writes YAML for `kubectl apply`;
// see docs/migration.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/httpscale/httpscale/pkg/migrate"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "migrate:", err)
		os.Exit(1)
	}
}

// errStrict is returned when -strict is set and the conversion produced warnings.
var errStrict = errors.New("warnings above and -strict is set: resolve them in the source or drop -strict")

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "-", "File to read (YAML or JSON, several documents or a List); - reads standard input.")
	skip := fs.Bool("skip-scaledobject", false, `Annotate every converted object with httpscale.dev/skip-scaledobject: "true", so httpscale routes it but leaves scaling to the existing ScaledObject (a staged migration).`)
	strict := fs.Bool("strict", false, "Exit non-zero when any setting was changed, approximated or dropped.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: give the input with -f FILE or on standard input", fs.Args())
	}
	in := stdin
	if *file != "-" {
		f, err := os.Open(*file)
		if err != nil {
			return fmt.Errorf("opening input: %w", err)
		}
		defer f.Close()
		in = f
	}
	warnings, err := migrate.ConvertStream(in, stdout, migrate.Options{SkipScaledObject: *skip})
	for _, w := range warnings {
		fmt.Fprintln(stderr, "warning:", w)
	}
	if err != nil {
		return err
	}
	if *strict && len(warnings) > 0 {
		return errStrict
	}
	return nil
}
