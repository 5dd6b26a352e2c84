package component

import (
	"flag"
	"fmt"
	"io"
	"os"

	// The container images are scratch plus a passwd file (hack/images), so the binaries carry what a
	// distribution would: the IANA time-zone database (schedule rules name zones; TZ works too) and
	// Mozilla's CA bundle, which Go uses only when the system has no roots of its own (a bundle mounted
	// at /etc/ssl/certs/ca-certificates.crt or named by SSL_CERT_FILE takes precedence).
	_ "golang.org/x/crypto/x509roots/fallback"
	_ "time/tzdata"

	"github.com/httpscale/httpscale/pkg/version"
)

// stdout receives --version's output (tests replace it).
var stdout io.Writer = os.Stdout

// bindVersion adds --version to fs; the returned func prints the version and reports whether it was
// asked for, in which case the binary exits without starting.
func bindVersion(fs *flag.FlagSet, name string) func() bool {
	show := fs.Bool("version", false, "Print the version and commit, then exit.")
	return func() bool {
		if *show {
			fmt.Fprintln(stdout, version.String(name))
		}
		return *show
	}
}
