// Package framework gives the e2e suite a running local cluster (hack/cluster/localcluster) with two
// real nodes and httpscale installed from charts/httpscale as real pods of the images hack/images builds:
// it starts one or reuses a healthy one, installs (or upgrades) the chart, and offers API clients, an
// HTTP client whose connections are made inside the cluster's network namespace (pod IPs, ClusterIPs),
// the running interceptor pods, and builders for the sample app (real pods of its own image).
package framework

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
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
	// Images are httpscale's images the chart's pods run (built from this source tree).
	Images localcluster.Images
	// owned is true when this suite started the cluster and so stops it.
	owned bool
	// sysctlsBefore are the host settings kubelet rewrites, as they were before this suite's cluster.
	sysctlsBefore map[string]string
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
	f := &Framework{}
	cfg, err := f.startOrReuse(ctx, localcluster.Default(name, RepoRoot()).WithRealNodes(), false, out)
	if err != nil {
		return nil, err
	}
	// The chart from this source tree: images built and pushed, helm upgrade --install, every pod Ready.
	f.Images, err = cfg.InstallHTTPScale(ctx, out)
	if errors.Is(err, localcluster.ErrImagesChanged) {
		fmt.Fprintf(out, "[e2e] %v: starting %s anew\n", err, name)
		if cfg, err = f.startOrReuse(ctx, cfg, true, out); err != nil {
			return nil, err
		}
		f.Images, err = cfg.InstallHTTPScale(ctx, out)
	}
	if err != nil {
		return nil, err
	}
	f.Cluster = cfg
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

// startOrReuse returns the healthy real-node cluster of cfg's name (unless fresh), or starts it anew.
func (f *Framework) startOrReuse(ctx context.Context, cfg localcluster.Config, fresh bool, out io.Writer) (localcluster.Config, error) {
	if state, err := localcluster.LoadState(cfg.Dir); !fresh && err == nil && state.RealNodes && state.Healthy(ctx) == nil {
		fmt.Fprintf(out, "[e2e] reusing the running cluster %s (%s)\n", cfg.Name, cfg.Dir)
		// The CRDs may have changed since it started.
		if _, err := state.KubectlRun(ctx, "", "apply", "--server-side", "--force-conflicts", "-f",
			filepath.Join(RepoRoot(), "config", "crd", "bases")); err != nil {
			return cfg, err
		}
		return state, nil
	}
	if err := cfg.Down(out); err != nil {
		return cfg, err
	}
	if f.sysctlsBefore == nil {
		var err error
		if f.sysctlsBefore, err = localcluster.ReadHostSysctls(); err != nil {
			return cfg, err
		}
	}
	if err := cfg.ResolveTools(out); err != nil {
		return cfg, err
	}
	if err := cfg.Up(ctx, out); err != nil {
		return cfg, err
	}
	f.owned = true
	return cfg, nil
}

// Stopping reports whether Stop will stop the cluster: this suite started it and HTTPSCALE_E2E_KEEP is
// not 1.
func (f *Framework) Stopping() bool { return f != nil && f.owned && os.Getenv(EnvKeep) != "1" }

// Stop stops the cluster if this suite started it, unless HTTPSCALE_E2E_KEEP=1.
func (f *Framework) Stop(out io.Writer) error {
	if f == nil || !f.owned {
		return nil
	}
	if os.Getenv(EnvKeep) == "1" {
		fmt.Fprintf(out, "[e2e] leaving cluster %s running; stop it with: go run ./hack/cluster --name %s down\n", f.Cluster.Name, f.Cluster.Name)
		return nil
	}
	if err := f.Cluster.Down(out); err != nil {
		return err
	}
	return f.checkHostRestored()
}

// checkHostRestored fails unless teardown gave the host back as it was: the sysctls kubelet rewrites,
// no mount under the state directory, no cgroup of a real node.
func (f *Framework) checkHostRestored() error {
	var errs []error
	after, err := localcluster.ReadHostSysctls()
	if err != nil {
		return err
	}
	if diff := cmp.Diff(f.sysctlsBefore, after); diff != "" {
		errs = append(errs, fmt.Errorf("host sysctls after teardown differ from before (-before +after):\n%s", diff))
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	dir := f.Cluster.Dir
	if strings.Contains(string(mounts), " "+dir+"/") || strings.Contains(string(mounts), " "+dir+" ") {
		errs = append(errs, fmt.Errorf("mounts under %s remain after teardown", dir))
	}
	for _, n := range f.Cluster.Real {
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", "httpscale-"+f.Cluster.Name+"-"+n.Zone)); err == nil {
			errs = append(errs, fmt.Errorf("cgroup of node %s remains after teardown", n.Name))
		}
	}
	return errors.Join(errs...)
}

// DumpLogs writes the pods of every namespace, the last log lines of httpscale's pods and the tail of
// every cluster process's log (call it when a spec failed).
func (f *Framework) DumpLogs(w io.Writer) {
	if f == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, _ := f.Cluster.KubectlRun(ctx, "", "get", "pods", "-A", "-o", "wide")
	fmt.Fprintf(w, "----- pods -----\n%s\n", out)
	for _, c := range localcluster.Components {
		out, _ := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "logs", "-l", "app.kubernetes.io/component="+c,
			"--tail=60", "--all-containers", "--prefix")
		fmt.Fprintf(w, "----- logs of the %s pods -----\n%s\n", c, out)
	}
	f.Cluster.DumpLogs(w, 60)
}

// Interceptor is one Ready interceptor pod.
type Interceptor struct {
	Name string
	IP   string
	Zone string
	Node string
	// ContainerID is the runtime's id of its container (containerd://...).
	ContainerID string
}

// HTTPScale is the running httpscale system as the chart deployed it.
type HTTPScale struct {
	// Interceptors are the Ready interceptor pods, one per zone, in the order of the real nodes' zones.
	Interceptors []Interceptor
	// InterceptorService is the ClusterIP of the proxy Service httpscale-interceptor.
	InterceptorService string
}

// HTTPScale waits until every Deployment of the chart has rolled out (a spec may have deleted pods or
// restarted Deployments) with one Ready interceptor per zone, and returns the interceptor pods.
func (f *Framework) HTTPScale(ctx context.Context) (*HTTPScale, error) {
	if err := f.Cluster.WaitChart(ctx); err != nil {
		return nil, err
	}
	var h *HTTPScale
	var last error
	// rollout status is done once the old pods are gone from the ReplicaSet's count; their deletion
	// may still be in progress.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if h, last = f.interceptors(ctx); last == nil {
			return h, nil
		}
	}
	return nil, last
}

func (f *Framework) interceptors(ctx context.Context) (*HTTPScale, error) {
	pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component=interceptor")
	if err != nil {
		return nil, err
	}
	zoneOf := map[string]string{}
	for _, n := range f.Cluster.Real {
		zoneOf[n.Name] = n.Zone
	}
	byZone := map[string]Interceptor{}
	for _, p := range pods {
		if p.Deleting || !p.Ready {
			return nil, fmt.Errorf("interceptor pod %s: ready %v, deleting %v", p.Name, p.Ready, p.Deleting)
		}
		z := zoneOf[p.Node]
		if _, dup := byZone[z]; dup || z == "" {
			return nil, fmt.Errorf("interceptor pods not one per real node's zone: %+v", pods)
		}
		byZone[z] = Interceptor{Name: p.Name, IP: p.IP, Zone: z, Node: p.Node, ContainerID: p.ContainerIDs[0]}
	}
	h := &HTTPScale{}
	for _, n := range f.Cluster.Real {
		ic, ok := byZone[n.Zone]
		if !ok {
			return nil, fmt.Errorf("no Ready interceptor pod in zone %s: %+v", n.Zone, pods)
		}
		h.Interceptors = append(h.Interceptors, ic)
	}
	h.InterceptorService, err = f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "service",
		"httpscale-interceptor", "-o", "jsonpath={.spec.clusterIP}")
	return h, err
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
