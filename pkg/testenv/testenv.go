// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) with httpscale's
// and KEDA's CRDs installed. It finds the binaries itself: $KUBEBUILDER_ASSETS when set, otherwise the
// project's cached build (hack/tools.sh envtest), so `go test` needs no manual setup.
package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// KEDAModule is the Go module whose config/crd/bases holds KEDA's CRDs.
const KEDAModule = "github.com/kedacore/keda/v2"

// RepoRoot returns the root of the httpscale source tree this package was compiled from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

var assets struct {
	once sync.Once
	dir  string
	err  error
}

// AssetsDir returns the folder holding kube-apiserver, etcd and kubectl, building them on first use
// (minutes when cold, a file check when cached).
func AssetsDir() (string, error) {
	assets.once.Do(func() {
		if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
			assets.dir = dir
			return
		}
		cmd := exec.Command(filepath.Join(RepoRoot(), "hack", "tools.sh"), "envtest")
		var out bytes.Buffer
		cmd.Stdout = &out
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			assets.err = fmt.Errorf("building envtest binaries with hack/tools.sh: %w", err)
			return
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		assets.dir = lines[len(lines)-1]
	})
	return assets.dir, assets.err
}

// KEDACRDDir returns KEDA's CRD folder inside the module cache.
func KEDACRDDir() (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", KEDAModule)
	cmd.Dir = RepoRoot()
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating module %s: %w", KEDAModule, err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases")
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("KEDA CRDs: %w", err)
	}
	return dir, nil
}

// New returns an envtest environment with httpscale's and KEDA's CRDs, not yet started.
func New() (*envtest.Environment, error) {
	dir, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	keda, err := KEDACRDDir()
	if err != nil {
		return nil, err
	}
	return &envtest.Environment{
		BinaryAssetsDirectory: dir,
		CRDDirectoryPaths:     []string{filepath.Join(RepoRoot(), "config", "crd", "bases"), keda},
		ErrorIfCRDPathMissing: true,
		// envtest waits 10 s for the CRDs to be served; a loaded shared machine needs longer.
		CRDInstallOptions: envtest.CRDInstallOptions{MaxTime: 2 * time.Minute},
	}, nil
}

// Start starts a new environment. Stop it with env.Stop().
func Start() (*envtest.Environment, *rest.Config, error) {
	env, err := New()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		// A start that timed out may have left etcd or kube-apiserver running (orphaned once the test
		// binary exits): stop what did start before reporting.
		if stopErr := env.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stopping the partly started environment: %w", stopErr))
		}
		return nil, nil, fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	return env, cfg, nil
}

// StartT starts a new environment for one test, fails the test if it cannot, and stops it when the
// test ends.
func StartT(t testing.TB) (*envtest.Environment, *rest.Config) {
	t.Helper()
	env, cfg, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	return env, cfg
}

// WriteKubeconfig writes a kubeconfig for an administrator of env into dir and returns its path, for
// running httpscale binaries against env.
func WriteKubeconfig(env *envtest.Environment, dir string) (string, error) {
	user, err := env.AddUser(envtest.User{Name: "httpscale-test-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("adding envtest user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("rendering kubeconfig: %w", err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return "", fmt.Errorf("writing kubeconfig: %w", err)
	}
	return path, nil
}
