package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The chart on the real nodes: what `make images` builds, pushed to the registry inside the namespace,
// installed with charts/httpscale's default values plus only the overrides this cluster needs
// (chartValues). The e2e suite, `make demo` and `go run ./hack/cluster install-chart` all go through
// InstallHTTPScale.

// Images are httpscale's images as pushed to the local registry: <Registry>/<component>:<Tag>.
type Images struct {
	Registry string            `json:"registry"`
	Tag      string            `json:"tag"`
	Digests  map[string]string `json:"digests"` // component -> sha256:... (the image index)
}

// Ref is the reference of one component's image by digest.
func (im Images) Ref(component string) string {
	return im.Registry + "/" + component + "@" + im.Digests[component]
}

// SampleAppImage is the sample app's image in the local registry (PushSampleApp).
func (c Config) SampleAppImage() string { return c.RegistryHost() + "/sampleapp:local" }

// ChartAppVersion reads appVersion from charts/httpscale/Chart.yaml: the tag the chart's default image
// references use.
func (c Config) ChartAppVersion() (string, error) {
	raw, err := os.ReadFile(filepath.Join(c.RepoRoot, "charts", "httpscale", "Chart.yaml"))
	if err != nil {
		return "", fmt.Errorf("reading the chart: %w", err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?`).FindSubmatch(raw)
	if m == nil {
		return "", errors.New("no appVersion in charts/httpscale/Chart.yaml")
	}
	return string(m[1]), nil
}

// BuildImages builds the operator, interceptor and scaler images with hack/images, the builder behind
// `make images` (linux/amd64 only, the nodes' platform), tagged with the chart's appVersion, into OCI
// layouts under the state directory, and pushes them to the local registry with the builder's own push.
func (c Config) BuildImages(ctx context.Context, progress io.Writer) (Images, error) {
	version, err := c.ChartAppVersion()
	if err != nil {
		return Images{}, err
	}
	tool := c.path("bin", "images")
	build := exec.CommandContext(ctx, "go", "-C", filepath.Join(c.RepoRoot, "hack", "images"), "build", "-o", tool, ".")
	if out, err := build.CombinedOutput(); err != nil {
		return Images{}, fmt.Errorf("building hack/images: %w: %s", err, out)
	}
	layouts := c.path("images", "httpscale")
	if err := os.RemoveAll(layouts); err != nil {
		return Images{}, err
	}
	cmd := exec.CommandContext(ctx, tool, "build", "--root", c.RepoRoot, "--out", layouts, "--version", version, "--platforms", "linux/amd64")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return Images{}, fmt.Errorf("images build: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	im := Images{Registry: c.RegistryHost() + "/httpscale", Tag: version, Digests: map[string]string{}}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		// "<out>/<component>:<version> sha256:..."
		f := strings.Fields(sc.Text())
		if len(f) != 2 || !strings.HasPrefix(f[1], "sha256:") {
			continue
		}
		comp, _, _ := strings.Cut(filepath.Base(f[0]), ":")
		im.Digests[comp] = f[1]
	}
	for _, comp := range Components {
		if im.Digests[comp] == "" {
			return Images{}, fmt.Errorf("images build printed no digest for %s:\n%s", comp, stdout)
		}
	}
	push := c.Command(ctx, tool, "push", "--out", layouts, "--registry", im.Registry, "--tag", version)
	if out, err := push.CombinedOutput(); err != nil {
		return Images{}, fmt.Errorf("images push: %w: %s", err, out)
	}
	for _, comp := range Components {
		fmt.Fprintf(progress, "[cluster] image %s/%s:%s %s (built by hack/images, as make images does)\n", im.Registry, comp, version, im.Digests[comp])
	}
	return im, nil
}

// PushSampleApp builds e2e/sampleapp (static) and pushes it as SampleAppImage.
func (c Config) PushSampleApp(ctx context.Context) error {
	bin := c.path("images", "sampleapp")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./e2e/sampleapp")
	build.Dir, build.Env = c.RepoRoot, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building the sample app: %w: %s", err, out)
	}
	return c.PushImage(ctx, c.SampleAppImage(), bin)
}

// chartValues are the only values that differ from the chart's defaults, each for a reason of this
// cluster, not of the chart.
func chartValues(im Images) string {
	return fmt.Sprintf(`# Our images, built from this commit and pushed to the registry inside the namespace; the tag stays
# the chart's appVersion. nodeSelector type=real: the cluster also has kwok's fake nodes, where no
# container runs.
operator: {image: {repository: %[1]s/operator}, nodeSelector: {type: real}}
interceptor: {image: {repository: %[1]s/interceptor}, nodeSelector: {type: real}}
scaler: {image: {repository: %[1]s/scaler}, nodeSelector: {type: real}}
`, im.Registry)
}

// Helm returns the helm binary (hack/tools.sh helm builds it once).
func (c Config) Helm(progress io.Writer) (string, error) {
	tools := exec.Command(filepath.Join(c.RepoRoot, "hack", "tools.sh"), "helm")
	tools.Stderr = progress
	out, err := tools.Output()
	if err != nil {
		return "", fmt.Errorf("hack/tools.sh helm: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return filepath.Join(lines[len(lines)-1], "helm"), nil
}

// HelmRun runs helm inside the namespace as the administrator.
func (c Config) HelmRun(ctx context.Context, progress io.Writer, args ...string) (string, error) {
	helm, err := c.Helm(progress)
	if err != nil {
		return "", err
	}
	cmd := c.Command(ctx, helm, append(args, "--kubeconfig", c.AdminKubeconfig())...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// InstallChart runs `helm upgrade --install` of charts/httpscale with chartValues for im plus extra
// helm arguments (e.g. --set ...), and waits until every component's Deployment has rolled out.
func (c Config) InstallChart(ctx context.Context, im Images, progress io.Writer, extra ...string) error {
	values := c.path("images", "values.yaml")
	if err := os.MkdirAll(filepath.Dir(values), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(values, []byte(chartValues(im)), 0o644); err != nil {
		return err
	}
	args := append([]string{"upgrade", "--install", Release, filepath.Join(c.RepoRoot, "charts", "httpscale"),
		"--namespace", Namespace, "--create-namespace", "--values", values}, extra...)
	if _, err := c.HelmRun(ctx, progress, args...); err != nil {
		return err
	}
	fmt.Fprintf(progress, "[cluster] helm upgrade --install %s charts/httpscale (default values; overrides: %s)\n", Release, values)
	return c.WaitChart(ctx)
}

// WaitChart waits until every component's Deployment has rolled out: all replicas updated and Ready
// through the pods' own probes, no old pod left.
func (c Config) WaitChart(ctx context.Context) error {
	for _, comp := range Components {
		if _, err := c.KubectlRun(ctx, "", "-n", Namespace, "rollout", "status", "deployment/httpscale-"+comp,
			fmt.Sprintf("--timeout=%ds", int(c.ReadyTimeout.Seconds()))); err != nil {
			return err
		}
	}
	return nil
}

// Pod is what the harness reads of a pod.
type Pod struct {
	Name     string
	UID      string
	Node     string
	IP       string
	Ready    bool
	Deleting bool
	// ImageIDs and Restarts are per container.
	ImageIDs []string
	Restarts int
	// ContainerIDs are the runtime's ids (containerd://...).
	ContainerIDs []string
}

// Pods lists the pods of ns matching selector, sorted by node, then name.
func (c Config) Pods(ctx context.Context, ns, selector string) ([]Pod, error) {
	out, err := c.KubectlRun(ctx, "", "-n", ns, "get", "pods", "-l", selector, "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string  `json:"name"`
				UID               string  `json:"uid"`
				DeletionTimestamp *string `json:"deletionTimestamp"`
			} `json:"metadata"`
			Spec struct {
				NodeName string `json:"nodeName"`
			} `json:"spec"`
			Status struct {
				PodIP      string `json:"podIP"`
				Conditions []struct {
					Type   string `json:"type"`
					Status string `json:"status"`
				} `json:"conditions"`
				ContainerStatuses []struct {
					ImageID      string `json:"imageID"`
					ContainerID  string `json:"containerID"`
					RestartCount int    `json:"restartCount"`
				} `json:"containerStatuses"`
			} `json:"status"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("reading pods %s in %s: %w", selector, ns, err)
	}
	var pods []Pod
	for _, it := range list.Items {
		p := Pod{Name: it.Metadata.Name, UID: it.Metadata.UID, Node: it.Spec.NodeName, IP: it.Status.PodIP,
			Deleting: it.Metadata.DeletionTimestamp != nil}
		for _, cond := range it.Status.Conditions {
			if cond.Type == "Ready" {
				p.Ready = cond.Status == "True"
			}
		}
		for _, cs := range it.Status.ContainerStatuses {
			p.ImageIDs = append(p.ImageIDs, cs.ImageID)
			p.ContainerIDs = append(p.ContainerIDs, cs.ContainerID)
			p.Restarts += cs.RestartCount
		}
		pods = append(pods, p)
	}
	slices.SortFunc(pods, func(a, b Pod) int { return strings.Compare(a.Node+"/"+a.Name, b.Node+"/"+b.Name) })
	return pods, nil
}

// CheckChartPods checks that every pod of every component is Ready on a real node and runs the image
// of im, and prints one line per component: the log's proof that the pods run what hack/images built.
func (c Config) CheckChartPods(ctx context.Context, im Images, progress io.Writer) error {
	var errs []error
	for _, comp := range Components {
		pods, err := c.Pods(ctx, Namespace, "app.kubernetes.io/component="+comp)
		if err != nil {
			return err
		}
		var where []string
		for _, p := range pods {
			if p.Deleting {
				continue
			}
			if !p.Ready || !strings.HasPrefix(p.Node, "real-") {
				errs = append(errs, fmt.Errorf("%s pod %s: ready %v on node %q, want Ready on a real node", comp, p.Name, p.Ready, p.Node))
			}
			for _, id := range p.ImageIDs {
				if !strings.HasSuffix(id, "@"+im.Digests[comp]) {
					errs = append(errs, fmt.Errorf("%s pod %s runs image %s, want %s", comp, p.Name, id, im.Ref(comp)))
				}
			}
			where = append(where, p.Name+"@"+p.Node)
		}
		fmt.Fprintf(progress, "[cluster] %s: %d pods Ready (%s), image %s\n", comp, len(where), strings.Join(where, ", "), im.Ref(comp))
	}
	return errors.Join(errs...)
}

// ErrImagesChanged: the cluster runs images of an earlier build under the same tag. The nodes cache
// images by tag (the chart's pull policy is IfNotPresent), so only a new cluster runs the new ones.
var ErrImagesChanged = errors.New("the cluster's nodes hold images of an earlier build under the same tag; restart the cluster (down, then up)")

// InstallHTTPScale is the whole path from source to running pods: BuildImages, PushSampleApp,
// InstallChart, CheckChartPods. The cluster must have real nodes. It fails with ErrImagesChanged when
// an earlier InstallHTTPScale on this cluster pushed other digests.
func (c Config) InstallHTTPScale(ctx context.Context, progress io.Writer) (Images, error) {
	if !c.RealNodes {
		return Images{}, errors.New("the chart's pods need real nodes (up --real-nodes)")
	}
	if !c.DNS {
		// KEDA dials the scaler at the chart's default address, the Service's DNS name.
		return Images{}, errors.New("the chart needs the cluster's DNS (up without --dns=false)")
	}
	t0 := time.Now()
	im, err := c.BuildImages(ctx, progress)
	if err != nil {
		return Images{}, err
	}
	if prev, err := c.LoadImages(); err == nil && !maps.Equal(prev.Digests, im.Digests) {
		return Images{}, ErrImagesChanged
	}
	if err := c.PushSampleApp(ctx); err != nil {
		return Images{}, err
	}
	fmt.Fprintf(progress, "[cluster] images built and pushed in %.1fs (sample app: %s)\n", time.Since(t0).Seconds(), c.SampleAppImage())
	t0 = time.Now()
	if err := c.InstallChart(ctx, im, progress); err != nil {
		return Images{}, err
	}
	fmt.Fprintf(progress, "[cluster] chart installed, every Deployment rolled out in %.1fs\n", time.Since(t0).Seconds())
	if err := c.CheckChartPods(ctx, im, progress); err != nil {
		return Images{}, err
	}
	data, _ := json.MarshalIndent(im, "", "  ")
	return im, os.WriteFile(c.path("images.json"), data, 0o644)
}

// LoadImages reads what InstallHTTPScale last installed.
func (c Config) LoadImages() (Images, error) {
	var im Images
	data, err := os.ReadFile(c.path("images.json"))
	if err != nil {
		return im, fmt.Errorf("reading the installed images: %w", err)
	}
	return im, json.Unmarshal(data, &im)
}
