// Package framework gives the e2e suite a running local cluster (hack/cluster/localcluster): it starts
// one or reuses a healthy one, and offers API clients and an HTTP client whose connections are made
// inside the cluster's network namespace, helpers to run httpscale's binaries as processes there, and
// builders for the sample app.
package framework

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// Environment variables that steer the suite.
const (
	// EnvCluster names the cluster (default "e2e-<hash of the source path>").
	EnvCluster = "HTTPSCALE_E2E_CLUSTER"
	// EnvKeep leaves a cluster the suite started running after the suite (set to 1).
	EnvKeep = "HTTPSCALE_E2E_KEEP"
)

// Framework is the suite's handle on the cluster.
type Framework struct {
	Cluster    localcluster.Config
	RESTConfig *rest.Config
	Client     client.Client
	// HTTP makes its connections inside the cluster's network namespace (pod IPs, interceptors).
	HTTP *http.Client
	// owned is true when this suite started the cluster and so stops it.
	owned     bool
	httpscale *localcluster.HTTPScale
}

// RepoRoot is the source tree the suite was compiled from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Start reuses a healthy cluster of the configured name or starts a new one (building tools first),
// writing progress to out.
func Start(ctx context.Context, out io.Writer) (*Framework, error) {
	name := os.Getenv(EnvCluster)
	if name == "" {
		// One cluster per source tree, so suites of different clones on one machine never share (or
		// tear down) each other's cluster.
		sum := sha256.Sum256([]byte(RepoRoot()))
		name = "e2e-" + hex.EncodeToString(sum[:3])
	}
	cfg := localcluster.Default(name, RepoRoot())
	f := &Framework{}
	if state, err := localcluster.LoadState(cfg.Dir); err == nil && state.Healthy(ctx) == nil {
		fmt.Fprintf(out, "[e2e] reusing the running cluster %s (%s)\n", name, cfg.Dir)
		// The CRDs may have changed since it started.
		if _, err := state.KubectlRun(ctx, "", "apply", "--server-side", "--force-conflicts", "-f",
			filepath.Join(RepoRoot(), "config", "crd", "bases")); err != nil {
			return nil, err
		}
		cfg = state
	} else {
		if err := cfg.Down(out); err != nil {
			return nil, err
		}
		if err := cfg.ResolveTools(out); err != nil {
			return nil, err
		}
		if err := cfg.Up(ctx, out); err != nil {
			return nil, err
		}
		f.owned = true
	}
	f.Cluster = cfg
	var err error
	if f.RESTConfig, err = restConfig(cfg); err != nil {
		return nil, err
	}
	scheme := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{
		clientgoscheme.AddToScheme, kedav1alpha1.AddToScheme, httpscalev1alpha1.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return nil, err
		}
	}
	if f.Client, err = client.New(f.RESTConfig, client.Options{Scheme: scheme}); err != nil {
		return nil, fmt.Errorf("creating API client: %w", err)
	}
	f.HTTP = &http.Client{
		Timeout:   3 * time.Minute, // requests held through a scale from zero
		Transport: &http.Transport{DialContext: localcluster.DialContext(cfg.NetNS), MaxIdleConnsPerHost: 64},
	}
	return f, nil
}

// Stop stops the cluster if this suite started it, unless HTTPSCALE_E2E_KEEP=1.
func (f *Framework) Stop(out io.Writer) error {
	if err := f.StopHTTPScale(); err != nil {
		return err
	}
	if f == nil || !f.owned {
		return nil
	}
	if os.Getenv(EnvKeep) == "1" {
		fmt.Fprintf(out, "[e2e] leaving cluster %s running; stop it with: go run ./hack/cluster --name %s down\n", f.Cluster.Name, f.Cluster.Name)
		return nil
	}
	return f.Cluster.Down(out)
}

// DumpLogs writes the tail of every component's log (call it when a spec failed).
func (f *Framework) DumpLogs(w io.Writer) {
	if f != nil {
		f.Cluster.DumpLogs(w, 60)
	}
}

// HTTPScale runs the operator, the scaler and one interceptor per zone from <repo>/bin, once per suite;
// later calls return the running set (components a spec stopped are started again). StopHTTPScale, in
// AfterSuite, stops them.
func (f *Framework) HTTPScale(ctx context.Context, out io.Writer) (*localcluster.HTTPScale, error) {
	if f.httpscale != nil {
		for name, c := range f.httpscale.Components {
			if c.Process == nil || !c.Process.Alive() {
				if err := f.Cluster.StartComponent(ctx, name, c); err != nil {
					return nil, err
				}
			}
		}
		return f.httpscale, nil
	}
	h, err := f.Cluster.StartHTTPScale(ctx, localcluster.DefaultBinaries(RepoRoot()), out)
	if err != nil {
		return nil, err
	}
	f.httpscale = h
	return h, nil
}

// StopHTTPScale stops every component HTTPScale started.
func (f *Framework) StopHTTPScale() error {
	if f == nil || f.httpscale == nil {
		return nil
	}
	h := f.httpscale
	f.httpscale = nil
	var errs []string
	for name, c := range h.Components {
		if err := f.Cluster.StopComponent(c); err != nil {
			errs = append(errs, name+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("stopping httpscale: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Get performs a GET from inside the namespace with an optional Host header.
func (f *Framework) Get(ctx context.Context, url, host string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	if host != "" {
		req.Host = host
	}
	return f.HTTP.Do(req)
}

// RawGet reads an API path (e.g. an aggregated API) as the administrator.
func (f *Framework) RawGet(ctx context.Context, path string) ([]byte, error) {
	hc, err := rest.HTTPClientFor(f.RESTConfig)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.RESTConfig.Host+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}

// APIServiceGVK is the aggregated API registration kind (not in client-go's scheme).
var APIServiceGVK = schema.GroupVersionKind{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}

func restConfig(c localcluster.Config) (*rest.Config, error) {
	data, err := os.ReadFile(filepath.Join(c.PKIDir(), "tokens.csv"))
	if err != nil {
		return nil, err
	}
	var tok string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Split(line, ","); len(f) > 1 && f[1] == "admin" {
			tok = f[0]
		}
	}
	return &rest.Config{
		Host:            c.Server(),
		BearerToken:     tok,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(c.PKIDir(), "ca.crt")},
		Dial:            localcluster.DialContext(c.NetNS),
		QPS:             100,
		Burst:           200,
	}, nil
}
