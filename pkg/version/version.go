// Package version holds the version and commit a binary was built from. `make images` (hack/images)
// sets both with the linker:
//
//	-ldflags "-X github.com/httpscale/httpscale/pkg/version.Version=0.1.0 -X github.com/httpscale/httpscale/pkg/version.Commit=<sha>"
//
// A plain `go build` leaves Version at "dev" and takes the commit from the VCS stamp Go embeds.
package version

import (
	"fmt"
	"runtime/debug"
)

// Set by -ldflags -X; see the package comment.
var (
	Version = "dev"
	Commit  = ""
)

// String is what `<binary> --version` prints: "<name> <version> (commit <sha>)".
func String(name string) string {
	return fmt.Sprintf("%s %s (commit %s)", name, Version, commit(Commit, readVCS))
}

// commit returns the stamped commit, else the VCS revision Go recorded (plus "-dirty" for a modified
// tree), else "unknown".
func commit(stamped string, vcs func() (rev string, modified bool)) string {
	if stamped != "" {
		return stamped
	}
	rev, modified := vcs()
	switch {
	case rev == "":
		return "unknown"
	case modified:
		return rev + "-dirty"
	}
	return rev
}

func readVCS() (rev string, modified bool) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", false
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	return rev, modified
}
