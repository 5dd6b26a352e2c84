package component

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/httpscale/httpscale/pkg/config"
	"github.com/httpscale/httpscale/pkg/version"
)

// --version prints and returns before validation and before any connection to an API server: the
// config below is invalid (no scaler address) and there is no kubeconfig.
func TestRunVersion(t *testing.T) {
	var out bytes.Buffer
	stdout = &out
	oldV, oldC := version.Version, version.Commit
	t.Cleanup(func() { version.Version, version.Commit = oldV, oldC; stdout = os.Stdout })
	version.Version, version.Commit = "9.8.7", "feedface"
	t.Setenv("KUBECONFIG", "/nonexistent")

	err := Run(context.Background(), Spec{Name: "operator", Config: &config.Operator{}}, []string{"--version"})
	if err != nil {
		t.Fatalf("Run --version: %v", err)
	}
	if got, want := out.String(), "operator 9.8.7 (commit feedface)\n"; got != want {
		t.Errorf("output = %q, want %q", got, want)
	}

	out.Reset()
	err = Run(context.Background(), Spec{Name: "operator", Config: &config.Operator{}}, []string{"--version=false", "--scaler-address="})
	if err == nil || !strings.Contains(err.Error(), "invalid configuration") {
		t.Fatalf("Run without --version and with an invalid config: err = %v, want an invalid configuration", err)
	}
	if out.Len() != 0 {
		t.Errorf("printed %q without --version", out.String())
	}
}
