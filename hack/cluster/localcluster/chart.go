package localcluster

import (
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

// The chart on the real nodes, as users install a release: `make release` (hack/images dist + publish,
// for the nodes' platform) pushes the images and the chart to the registry inside the namespace, and
// `helm upgrade --install oci://<registry>/httpscale/charts/httpscale --version <version>` installs it
// with the chart's default values (which point at that registry's images) plus only the overrides this
// cluster needs (chartValues). The e2e suite, `make demo` and `go run ./hack/cluster install-chart` all go
// through InstallHTTPScale; the e2e upgrade spec publishes the previous release the same way
// (PublishPrevious).

// Images are one release of httpscale as published to the local registry: the images
// <Registry>/<component>:<Tag> and the chart <Chart>:<Tag>.
type Images struct {
	Registry string            `json:"registry"`
	Tag      string            `json:"tag"`
	Digests  map[string]string `json:"digests"` // component -> sha256:... (the image index)
	// Chart is the chart's OCI reference without its version: oci://<registry>/httpscale/charts/httpscale.
	Chart string `json:"chart"`
}

// Ref is the reference of one component's image by digest.
func (im Images) Ref(component string) string {
	return im.Registry + "/" + component + "@" + im.Digests[component]
}

// ChartArgs are helm's arguments naming the release's chart: the OCI reference, its version, and plain
// HTTP (the local registry has no TLS).
func (im Images) ChartArgs() []string { return []string{im.Chart, "--version", im.Tag, "--plain-http"} }

// SampleAppImage is the sample app's image in the local registry (PushSampleApp).
func (c Config) SampleAppImage() string { return c.RegistryHost() + "/sampleapp:local" }

// ChartAppVersion reads appVersion from charts/httpscale/Chart.yaml: the version this tree releases.
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

// ReleaseSource is the tree a release is built from: RepoRoot's checkout (Commit empty: its HEAD, as
// `make release` does), or an exported older commit.
type ReleaseSource struct {
	Root, Version string
	// Commit and Epoch (its commit time, Unix seconds) stamp a tree that is not a git checkout.
	Commit, Epoch string
}

// imagesTool builds hack/images (the release tool behind `make release`) from this tree, once per call.
func (c Config) imagesTool(ctx context.Context) (string, error) {
	tool := c.path("bin", "images")
	build := exec.CommandContext(ctx, "go", "-C", filepath.Join(c.RepoRoot, "hack", "images"), "build", "-o", tool, ".")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building hack/images: %w: %s", err, out)
	}
	return tool, nil
}

// Publish runs what `make release REGISTRY=<local registry>/httpscale VERSION=<version>
// PLATFORMS=linux/amd64` runs, for the tree src names: `images dist` builds the images (the nodes'
// platform), SBOMs, the chart pointing at the local registry, provenance and checksums into the state
// directory, and `images publish` pushes the images and the chart (helm push) from inside the namespace,
// where the registry listens.
func (c Config) Publish(ctx context.Context, src ReleaseSource, progress io.Writer) (Images, error) {
	tool, err := c.imagesTool(ctx)
	if err != nil {
		return Images{}, err
	}
	helm, err := c.Helm(progress)
	if err != nil {
		return Images{}, err
	}
	out := c.path("release", src.Version)
	registry := c.RegistryHost() + "/httpscale"
	args := []string{"dist", "--root", src.Root, "--out", out, "--registry", registry, "--version", src.Version, "--platforms", "linux/amd64"}
	if src.Commit != "" {
		args = append(args, "--commit", src.Commit, "--source-date-epoch", src.Epoch)
	}
	dist := exec.CommandContext(ctx, tool, args...)
	var stderr bytes.Buffer
	dist.Stderr = &stderr
	if _, err := dist.Output(); err != nil {
		return Images{}, fmt.Errorf("images %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	raw, err := os.ReadFile(filepath.Join(out, "release.json"))
	if err != nil {
		return Images{}, err
	}
	var rel struct {
		Images map[string]string `json:"images"`
	}
	if err := json.Unmarshal(raw, &rel); err != nil {
		return Images{}, fmt.Errorf("reading %s/release.json: %w", out, err)
	}
	im := Images{Registry: registry, Tag: src.Version, Digests: rel.Images, Chart: "oci://" + registry + "/charts/httpscale"}
	for _, comp := range Components {
		if im.Digests[comp] == "" {
			return Images{}, fmt.Errorf("the release of %s has no image for %s: %s", src.Version, comp, raw)
		}
	}
	publish := c.Command(ctx, tool, "publish", "--out", out, "--helm", helm)
	if out, err := publish.CombinedOutput(); err != nil {
		return Images{}, fmt.Errorf("images publish: %w: %s", err, out)
	}
	for _, comp := range Components {
		fmt.Fprintf(progress, "[cluster] image %s/%s:%s %s (make release)\n", im.Registry, comp, im.Tag, im.Digests[comp])
	}
	fmt.Fprintf(progress, "[cluster] chart %s:%s (make release; SBOMs, provenance and SHA256SUMS in %s)\n", im.Chart, im.Tag, out)
	return im, nil
}

// PublishPrevious publishes the release before this tree's version, as `make release` built it from its
// commit (CHANGELOG.md, or its tag): the commit is exported with git archive and released with this
// tree's release tool. It returns that release.
func (c Config) PublishPrevious(ctx context.Context, progress io.Writer) (Images, error) {
	version, err := c.ChartAppVersion()
	if err != nil {
		return Images{}, err
	}
	tool, err := c.imagesTool(ctx)
	if err != nil {
		return Images{}, err
	}
	prev, err := exec.CommandContext(ctx, tool, "previous", "--root", c.RepoRoot, "--version", version).Output()
	if err != nil {
		return Images{}, fmt.Errorf("finding the release before %s: %w", version, err)
	}
	f := strings.Fields(string(prev))
	if len(f) != 2 {
		return Images{}, fmt.Errorf("images previous printed %q", prev)
	}
	src := ReleaseSource{Root: c.path("release", "src-"+f[0]), Version: f[0], Commit: f[1]}
	epoch, err := exec.CommandContext(ctx, "git", "-C", c.RepoRoot, "log", "-1", "--format=%ct", src.Commit).Output()
	if err != nil {
		return Images{}, fmt.Errorf("reading the time of commit %s: %w", src.Commit, err)
	}
	src.Epoch = strings.TrimSpace(string(epoch))
	if err := os.RemoveAll(src.Root); err != nil {
		return Images{}, err
	}
	if err := os.MkdirAll(src.Root, 0o755); err != nil {
		return Images{}, err
	}
	export := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", c.RepoRoot, src.Commit, src.Root)
	if out, err := export.CombinedOutput(); err != nil {
		return Images{}, fmt.Errorf("exporting commit %s: %w: %s", src.Commit, err, out)
	}
	fmt.Fprintf(progress, "[cluster] release %s is commit %s; building it as make release does\n", src.Version, src.Commit)
	return c.Publish(ctx, src, progress)
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

// chartValues are the only values that differ from the chart's defaults, for a reason of this cluster,
// not of the chart: nodeSelector type=real, because the cluster also has kwok's fake nodes, where no
// container runs. The images are the chart's defaults: the release points them at the local registry.
const chartValues = `operator: {nodeSelector: {type: real}}
interceptor: {nodeSelector: {type: real}}
scaler: {nodeSelector: {type: real}}
`

// ChartValuesFile writes chartValues into the state directory and returns its path.
func (c Config) ChartValuesFile() (string, error) {
	values := c.path("images", "values.yaml")
	if err := os.MkdirAll(filepath.Dir(values), 0o755); err != nil {
		return "", err
	}
	return values, os.WriteFile(values, []byte(chartValues), 0o644)
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

// InstallChart runs `helm upgrade --install` of the chart of release im from the local registry with
// chartValues plus extra helm arguments (e.g. --set ...), and waits until every component's Deployment
// has rolled out.
func (c Config) InstallChart(ctx context.Context, im Images, progress io.Writer, extra ...string) error {
	values, err := c.ChartValuesFile()
	if err != nil {
		return err
	}
	args := append(append([]string{"upgrade", "--install", Release}, im.ChartArgs()...),
		append([]string{"--namespace", Namespace, "--create-namespace", "--values", values}, extra...)...)
	if _, err := c.HelmRun(ctx, progress, args...); err != nil {
		return err
	}
	fmt.Fprintf(progress, "[cluster] helm upgrade --install %s %s --version %s (default values; overrides: %s)\n", Release, im.Chart, im.Tag, values)
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
// of im, and prints one line per component: the log's proof that the pods run what the release built.
func (c Config) CheckChartPods(ctx context.Context, im Images, progress io.Writer) error {
	return c.CheckReleasePods(ctx, Namespace, im, progress)
}

// CheckReleasePods is CheckChartPods for the release installed in namespace ns.
func (c Config) CheckReleasePods(ctx context.Context, ns string, im Images, progress io.Writer) error {
	var errs []error
	for _, comp := range Components {
		pods, err := c.Pods(ctx, ns, "app.kubernetes.io/component="+comp)
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

// InstallHTTPScale is the whole path from source to running pods: Publish (make release), PushSampleApp,
// InstallChart (helm install from the OCI registry), CheckChartPods. The cluster must have real nodes. It fails with ErrImagesChanged when
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
	version, err := c.ChartAppVersion()
	if err != nil {
		return Images{}, err
	}
	im, err := c.Publish(ctx, ReleaseSource{Root: c.RepoRoot, Version: version}, progress)
	if err != nil {
		return Images{}, err
	}
	if prev, err := c.LoadImages(); err == nil && !maps.Equal(prev.Digests, im.Digests) {
		return Images{}, ErrImagesChanged
	}
	if err := c.PushSampleApp(ctx); err != nil {
		return Images{}, err
	}
	fmt.Fprintf(progress, "[cluster] release built and published in %.1fs (sample app: %s)\n", time.Since(t0).Seconds(), c.SampleAppImage())
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
