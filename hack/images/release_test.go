package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/google/go-cmp/cmp"
)

var helmBin struct {
	once sync.Once
	path string
	err  error
}

// helm returns $HELM, else the helm hack/tools.sh builds (and caches outside the clone).
func helm(t *testing.T) string {
	t.Helper()
	helmBin.once.Do(func() {
		if helmBin.path = os.Getenv("HELM"); helmBin.path != "" {
			return
		}
		out, err := exec.Command("../tools.sh", "helm").Output()
		if err != nil {
			helmBin.err = err
			return
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		helmBin.path = filepath.Join(lines[len(lines)-1], "helm")
	})
	if helmBin.err != nil {
		t.Fatalf("hack/tools.sh helm: %v", helmBin.err)
	}
	return helmBin.path
}

// runHelm runs helm with its own config and cache folders (no state of the machine's user).
func runHelm(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(helm(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// checkRelease checks what dist wrote into dir for the scaler: SBOMs listing what the binary links,
// images.txt, the chart pointing at the release's registry, provenance naming every artifact, and
// SHA256SUMS that sha256sum accepts.
func checkRelease(t *testing.T, dir string, r *Release, o buildOptions) {
	t.Helper()
	if len(r.SBOMs) != len(o.Platforms) {
		t.Fatalf("SBOMs %v; want one per platform", r.SBOMs)
	}
	for _, s := range r.SBOMs {
		bom, err := readSBOM(filepath.Join(dir, s))
		if err != nil {
			t.Fatal(err)
		}
		if bom.SpecVersion != cdx.SpecVersion1_6 || bom.Metadata.Component.Name != "scaler" || bom.Metadata.Component.Version != r.Version {
			t.Errorf("%s: spec %s, component %s %s", s, bom.SpecVersion, bom.Metadata.Component.Name, bom.Metadata.Component.Version)
		}
		if !strings.HasPrefix(bom.Metadata.Component.PackageURL, "pkg:oci/scaler@sha256:") || bom.Metadata.Timestamp != "2025-06-15T15:06:40Z" {
			t.Errorf("%s: purl %s, timestamp %s", s, bom.Metadata.Component.PackageURL, bom.Metadata.Timestamp)
		}
		var names []string
		for _, c := range *bom.Components {
			names = append(names, c.Name)
		}
		// Modules the scaler links (KEDA's external scaler API, gRPC, the CA bundle) and the standard
		// library; nothing only the operator needs.
		for _, want := range []string{"stdlib", "google.golang.org/grpc", "github.com/kedacore/keda/v2", "golang.org/x/crypto/x509roots/fallback"} {
			if !slices.Contains(names, want) {
				t.Errorf("%s lists no %s: %v", s, want, names)
			}
		}
		if slices.Contains(names, "github.com/robfig/cron/v3") {
			t.Errorf("%s lists robfig/cron, which only the operator links", s)
		}
	}
	images, err := os.ReadFile(filepath.Join(dir, fileImages))
	if err != nil {
		t.Fatal(err)
	}
	if want := r.Registry + "/scaler:" + r.Version + "@" + r.Images["scaler"] + "\n"; string(images) != want {
		t.Errorf("images.txt = %q, want %q", images, want)
	}

	// The chart: helm reads it, its version is the app version, and its default images are the release's.
	chart := filepath.Join(dir, r.Chart)
	meta := runHelm(t, "show", "chart", chart)
	for _, want := range []string{"version: " + r.Version, "appVersion: " + r.Version} {
		if !strings.Contains(meta, want+"\n") {
			t.Errorf("helm show chart: no %q in\n%s", want, meta)
		}
	}
	rendered := runHelm(t, "template", "httpscale", chart, "--namespace", "httpscale-system")
	for _, c := range allComponents {
		if want := "image: " + r.Registry + "/" + c + ":" + r.Version; !strings.Contains(rendered, want) {
			t.Errorf("the packaged chart renders no %q", want)
		}
	}
	if strings.Contains(rendered, "ghcr.io/") {
		t.Error("the packaged chart still references ghcr.io")
	}

	st, prov, err := readProvenance(filepath.Join(dir, fileProvenance))
	if err != nil {
		t.Fatal(err)
	}
	subjects := map[string]string{}
	for _, s := range st.GetSubject() {
		subjects[s.GetName()] = s.GetDigest()["sha256"]
	}
	want := map[string]string{r.Registry + "/scaler": strings.TrimPrefix(r.Images["scaler"], "sha256:"), r.Chart: r.ChartDigest}
	if diff := cmp.Diff(want, subjects); diff != "" {
		t.Errorf("provenance subjects (-want +got):\n%s", diff)
	}
	if got := prov.GetBuildDefinition().GetResolvedDependencies()[0].GetDigest()["gitCommit"]; got != o.Meta.Commit {
		t.Errorf("provenance names commit %q, want %q", got, o.Meta.Commit)
	}
	if len(prov.GetRunDetails().GetByproducts()) != len(r.SBOMs) {
		t.Errorf("provenance byproducts %v; want the SBOMs", prov.GetRunDetails().GetByproducts())
	}

	check := exec.Command("sha256sum", "--check", "--strict", fileSums)
	check.Dir = dir
	out, err := check.CombinedOutput()
	if err != nil {
		t.Fatalf("sha256sum --check: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), ": OK"); n != 3+len(r.SBOMs) {
		t.Errorf("SHA256SUMS checked %d files, want images.txt, the chart, the provenance and %d SBOMs:\n%s", n, len(r.SBOMs), out)
	}
}

// checkPublish publishes the release and pulls the chart back as a user would.
func checkPublish(t *testing.T, dir string, r *Release) {
	t.Helper()
	t.Setenv("HELM_CACHE_HOME", t.TempDir())
	t.Setenv("HELM_CONFIG_HOME", t.TempDir())
	t.Setenv("HELM_DATA_HOME", t.TempDir())
	pushed, err := publish(t.Context(), publishOptions{Dir: dir, Helm: helm(t)})
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed) != 2 || !strings.HasPrefix(pushed[1], r.Registry+"/charts/httpscale:"+r.Version+"@sha256:") {
		t.Fatalf("published %v; want the scaler and the chart", pushed)
	}
	shown := runHelm(t, "show", "chart", "oci://"+r.Registry+"/charts/httpscale", "--version", r.Version, "--plain-http")
	if !strings.Contains(shown, "appVersion: "+r.Version+"\n") {
		t.Errorf("the chart pulled from the registry:\n%s", shown)
	}
	listed, err := os.ReadFile(filepath.Join(dir, filePublished))
	if err != nil || string(listed) != strings.Join(pushed, "\n")+"\n" {
		t.Errorf("published.txt = %q (%v), want %v", listed, err, pushed)
	}
}

// The archive is the same bytes on every build of one commit, and every rewritten field is checked.
func TestPackageChart(t *testing.T) {
	at := time.Unix(1750000000, 0)
	a, err := PackageChart("../..", "1.2.3", "registry.example.com/team", at)
	if err != nil {
		t.Fatal(err)
	}
	b, err := PackageChart("../..", "1.2.3", "registry.example.com/team", at)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("two packages of the same chart differ")
	}
	if c, _ := PackageChart("../..", "1.2.3", "registry.example.com/team", at.Add(time.Second)); bytes.Equal(a, c) {
		t.Error("the time does not reach the archive")
	}
	if _, err := setImageRepositories([]byte("image:\n  repository: x/operator\n"), "r"); err == nil {
		t.Error("values without the interceptor's and scaler's repository lines were accepted")
	}
	got, err := setChartVersion([]byte("name: httpscale\nversion: 0.1.0\nappVersion: \"0.1.0\"\n"), "2.0.0")
	if err != nil || string(got) != "name: httpscale\nversion: 2.0.0\nappVersion: \"2.0.0\"\n" {
		t.Errorf("setChartVersion = %q, %v", got, err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.tgz"), a, 0o644); err != nil {
		t.Fatal(err)
	}
	files := runHelm(t, "show", "all", filepath.Join(dir, "c.tgz"))
	if !strings.Contains(files, "repository: registry.example.com/team/interceptor") {
		t.Error("helm show all: the interceptor's repository is not the release's")
	}
}

func TestChangelog(t *testing.T) {
	sections, err := ParseChangelog("# Changelog\n\n## 1.1.0 - Unreleased\n- b\n\n## 1.0.0 - 2026-01-02\n- a\n\nCommit: " +
		strings.Repeat("ab", 20) + "\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []Section{{Version: "1.1.0", Body: "- b"}, {Version: "1.0.0", Date: "2026-01-02", Body: "- a\n\nCommit: " + strings.Repeat("ab", 20), Commit: strings.Repeat("ab", 20)}}
	if diff := cmp.Diff(want, sections); diff != "" {
		t.Errorf("sections (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"## v1.0.0 - 2026-01-02\n", "## 1.0 - 2026-01-02\n", "## 1.0.0\n", "## 1.0.0 - 2026-01-02\n## 1.0.0 - 2026-01-03\n", "no sections\n"} {
		if _, err := ParseChangelog(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}

	// This repository: the chart's version is unreleased or dated, and the release before it resolves to
	// a commit of this repository whose chart has that version.
	root := "../.."
	raw, err := os.ReadFile(filepath.Join(root, "charts", "httpscale", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	version, app := ChartVersion(raw)
	if version != app {
		t.Fatalf("Chart.yaml: version %s, appVersion %s; want them equal", version, app)
	}
	if _, err := ReleaseNotes(root, version); err != nil {
		t.Fatalf("CHANGELOG.md: %v", err)
	}
	prev, commit, err := PreviousRelease(t.Context(), root, version)
	if err != nil {
		t.Fatal(err)
	}
	old, err := gitOutput(t.Context(), root, "show", commit+":charts/httpscale/Chart.yaml")
	if err != nil {
		t.Fatalf("the previous release's commit %s: %v", commit, err)
	}
	if v, a := ChartVersion([]byte(old)); v != prev || a != prev {
		t.Errorf("commit %s has chart %s / app %s; CHANGELOG.md calls it %s", commit, v, a, prev)
	}
	if err := CheckReleasable(root, "0.0.0-never"); err == nil {
		t.Error("a version Chart.yaml does not carry may be released")
	}
}
