package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A release folder (`make dist`, `make release`; docs/install.md#release-artifacts):
//
//	images/<component>/                    OCI layout of the component's multi-platform index
//	httpscale-<version>.tgz                the Helm chart, default images <registry>/<component>:<version>
//	sbom/<component>-<version>-<os>-<arch>.cdx.json   CycloneDX SBOM of each platform image
//	images.txt                             <registry>/<component>:<version>@<index digest>, one a line
//	provenance.intoto.json                 SLSA v1 provenance (in-toto Statement), unsigned
//	SHA256SUMS                             sha256sum of every file above but the layouts
//	release.json                           what publish reads
//	published.txt                          written by publish: every pushed reference with its digest
//	subjects.json                          written by publish: [{name, digest}] of the image indexes and
//	                                       the chart, what the release workflow signs and attests
const (
	fileRelease    = "release.json"
	fileImages     = "images.txt"
	fileProvenance = "provenance.intoto.json"
	fileSums       = "SHA256SUMS"
	filePublished  = "published.txt"
	fileSubjects   = "subjects.json"
	dirSBOM        = "sbom"
	dirLayouts     = "images"
)

// Release describes one release folder.
type Release struct {
	Version  string `json:"version"`
	Registry string `json:"registry"`
	Commit   string `json:"commit"`
	Source   string `json:"source"`
	// Created is the commit time every timestamp of the build carries.
	Created time.Time `json:"created"`
	// Images are the index digests by component; PlatformImages the digest of each platform's image
	// (what an SBOM describes) by component and os/arch.
	Images         map[string]string            `json:"images"`
	PlatformImages map[string]map[string]string `json:"platformImages"`
	// Chart is the chart archive's file name; ChartDigest its sha256 hex.
	Chart       string   `json:"chart"`
	ChartDigest string   `json:"chartDigest"`
	SBOMs       []string `json:"sboms"`
}

// ChartRepository is the OCI repository the chart is pushed under: oci://<registry>/charts, so the
// chart is <registry>/charts/httpscale:<version>.
func (r *Release) ChartRepository() string { return r.Registry + "/charts" }

type distOptions struct {
	buildOptions
	Registry string
}

var reSemver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)

// dist builds every release artifact into o.Out without touching the network: the images as OCI
// layouts, an SBOM per platform image, the chart archive pointing at o.Registry, images.txt, the
// provenance and SHA256SUMS. The version must be semantic (chart version = app version).
func dist(ctx context.Context, o distOptions) (*Release, error) {
	started := time.Now()
	if !reSemver.MatchString(o.Meta.Version) {
		return nil, fmt.Errorf("version %q: want a semantic version without a leading v, e.g. 0.2.0", o.Meta.Version)
	}
	if err := checkRegistry(o.Registry); err != nil {
		return nil, err
	}
	if err := os.RemoveAll(o.Out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(o.Out, dirSBOM), 0o755); err != nil {
		return nil, err
	}
	r := &Release{Version: o.Meta.Version, Registry: o.Registry, Commit: o.Meta.Commit, Source: o.Meta.Source,
		Created: o.Meta.Created.UTC(), Images: map[string]string{}, PlatformImages: map[string]map[string]string{}}
	files := map[string]string{} // release-relative path → sha256 hex, for SHA256SUMS
	bo := o.buildOptions
	bo.Out = filepath.Join(o.Out, dirLayouts)
	bo.OnImage = func(c string, p v1.Platform, bin []byte, img v1.Image) error {
		d, err := img.Digest()
		if err != nil {
			return err
		}
		if r.PlatformImages[c] == nil {
			r.PlatformImages[c] = map[string]string{}
		}
		r.PlatformImages[c][p.String()] = d.String()
		doc, err := SBOM(c, bin, p, o.Meta, d)
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(filepath.Join(dirSBOM, fmt.Sprintf("%s-%s-%s-%s.cdx.json", c, r.Version, p.OS, p.Architecture)))
		r.SBOMs = append(r.SBOMs, rel)
		return writeFile(o.Out, rel, doc, files)
	}
	digests, err := build(ctx, bo)
	if err != nil {
		return nil, err
	}
	var lines []string
	subjects := map[string]string{}
	for _, c := range o.Components {
		r.Images[c] = digests[c].String()
		ref := fmt.Sprintf("%s/%s:%s", o.Registry, c, r.Version)
		lines = append(lines, ref+"@"+digests[c].String())
		subjects[o.Registry+"/"+c] = digests[c].Hex
	}
	if err := writeFile(o.Out, fileImages, []byte(strings.Join(lines, "\n")+"\n"), files); err != nil {
		return nil, err
	}
	chart, err := PackageChart(o.Root, r.Version, o.Registry, o.Meta.Created)
	if err != nil {
		return nil, err
	}
	r.Chart = fmt.Sprintf("%s-%s.tgz", chartName, r.Version)
	sum := sha256.Sum256(chart)
	r.ChartDigest = hex.EncodeToString(sum[:])
	subjects[r.Chart] = r.ChartDigest
	if err := writeFile(o.Out, r.Chart, chart, files); err != nil {
		return nil, err
	}
	byproducts := map[string]string{}
	for _, s := range r.SBOMs {
		byproducts[s] = files[s]
	}
	goVersion, err := goEnv(ctx, o.Root, "GOVERSION")
	if err != nil {
		return nil, err
	}
	var platforms []string
	for _, p := range o.Platforms {
		platforms = append(platforms, p.String())
	}
	prov, err := Provenance(provenanceInput{Release: r, Platforms: platforms, GoVersion: goVersion,
		Subjects: subjects, Byproducts: byproducts, Started: started, Finished: time.Now(), Getenv: os.Getenv})
	if err != nil {
		return nil, err
	}
	if err := writeFile(o.Out, fileProvenance, prov, files); err != nil {
		return nil, err
	}
	var sums bytes.Buffer
	for _, f := range sortedKeys(files) {
		fmt.Fprintf(&sums, "%s  %s\n", files[f], f) // sha256sum's format: `sha256sum -c SHA256SUMS`
	}
	if err := writeFile(o.Out, fileSums, sums.Bytes(), nil); err != nil {
		return nil, err
	}
	meta, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return r, writeFile(o.Out, fileRelease, append(meta, '\n'), nil)
}

// writeFile writes dir/rel and records its sha256 in sums (unless nil).
func writeFile(dir, rel string, body []byte, sums map[string]string) error {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(p, body, 0o644); err != nil {
		return err
	}
	if sums != nil {
		s := sha256.Sum256(body)
		sums[rel] = hex.EncodeToString(s[:])
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func goEnv(ctx context.Context, dir, key string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", key)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", key, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func checkRegistry(registry string) error {
	if registry == "" {
		return errors.New("--registry is required, e.g. registry.example.com/team")
	}
	if strings.Contains(registry, "://") || strings.HasSuffix(registry, "/") {
		return fmt.Errorf("registry %q: want host[:port][/path] without a scheme or trailing slash", registry)
	}
	return nil
}

// ReadRelease reads the release.json of a release folder.
func ReadRelease(dir string) (*Release, error) {
	raw, err := os.ReadFile(filepath.Join(dir, fileRelease))
	if err != nil {
		return nil, fmt.Errorf("reading the release (run `make dist` first): %w", err)
	}
	r := &Release{}
	if err := json.Unmarshal(raw, r); err != nil {
		return nil, fmt.Errorf("%s: %w", fileRelease, err)
	}
	return r, nil
}

type publishOptions struct {
	Dir      string
	Helm     string
	Insecure bool
}

// publish pushes a release folder: each image index to <registry>/<component>:<version>, then the
// chart with `helm push` to oci://<registry>/charts. It writes published.txt (reference@digest, one
// a line) and returns those lines.
func publish(ctx context.Context, o publishOptions, opts ...remote.Option) ([]string, error) {
	r, err := ReadRelease(o.Dir)
	if err != nil {
		return nil, err
	}
	components := sortedKeys(r.Images)
	pushed, err := push(ctx, pushOptions{Out: filepath.Join(o.Dir, dirLayouts), Registry: r.Registry, Tag: r.Version,
		Components: components, Insecure: o.Insecure}, opts...)
	if err != nil {
		return pushed, err
	}
	for i, c := range components {
		if want := r.Registry + "/" + c + ":" + r.Version + "@" + r.Images[c]; pushed[i] != want {
			return pushed, fmt.Errorf("pushed %s, but the release lists %s", pushed[i], want)
		}
	}
	chartRef, err := helmPush(ctx, o.Helm, filepath.Join(o.Dir, r.Chart), r.ChartRepository(), o.Insecure)
	if err != nil {
		return pushed, err
	}
	pushed = append(pushed, chartRef)
	type subject struct {
		Name   string `json:"name"`
		Digest string `json:"digest"`
	}
	var subjects []subject
	for _, p := range pushed {
		ref, digest, _ := strings.Cut(p, "@")
		repo := ref[:strings.LastIndex(ref, ":")] // no port after the last "/": the colon is the tag's
		subjects = append(subjects, subject{Name: repo, Digest: digest})
	}
	js, err := json.MarshalIndent(subjects, "", "  ")
	if err != nil {
		return pushed, err
	}
	if err := os.WriteFile(filepath.Join(o.Dir, fileSubjects), append(js, '\n'), 0o644); err != nil {
		return pushed, err
	}
	return pushed, os.WriteFile(filepath.Join(o.Dir, filePublished), []byte(strings.Join(pushed, "\n")+"\n"), 0o644)
}

var reHelmDigest = regexp.MustCompile(`(?m)^Digest:\s*(sha256:[0-9a-f]{64})\s*$`)

// helmPush runs `helm push <chart> oci://<repository>`, over plain HTTP where the image push would use
// it (localhost, loopback and private addresses, or insecure), and returns <repository>/httpscale:<version>@<digest>.
func helmPush(ctx context.Context, helm, chart, repository string, insecure bool) (string, error) {
	reg, err := name.NewRepository(repository)
	if err != nil {
		return "", fmt.Errorf("chart repository %q: %w", repository, err)
	}
	args := []string{"push", chart, "oci://" + repository}
	if insecure || reg.Registry.Scheme() == "http" {
		args = append(args, "--plain-http")
	}
	cmd := exec.CommandContext(ctx, helm, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("helm %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	// helm writes "Pushed: ..." and "Digest: ..." to stderr or stdout depending on its version.
	m := reHelmDigest.FindStringSubmatch(stdout.String() + "\n" + stderr.String())
	if m == nil {
		return "", fmt.Errorf("helm push printed no digest: %s %s", stdout.String(), stderr.String())
	}
	base := strings.TrimSuffix(filepath.Base(chart), ".tgz")
	version := strings.TrimPrefix(base, chartName+"-")
	return repository + "/" + chartName + ":" + version + "@" + m[1], nil
}
