package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// startRegistry serves go-containerregistry's in-memory registry on 127.0.0.1 and returns host:port.
func startRegistry(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return l.Addr().String()
}

// TestBuildPushRun is the whole path of `make images` and `make images-push` for the scaler (the
// smallest binary): real static binaries for both platforms, the OCI layout, a push to a registry on
// loopback, and a pull that checks what a kubelet would see and runs the binary of this machine's
// architecture with --version.
func TestBuildPushRun(t *testing.T) {
	if testing.Short() {
		t.Skip("compiles the scaler for two platforms")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// `make dist`'s path, which builds the layouts as `make images` does and adds the release's files
	// (checked by checkRelease).
	dir := t.TempDir()
	out := filepath.Join(dir, dirLayouts)
	m := Meta{Version: "0.0.0-test.1", Commit: "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00", Source: "https://example.com/httpscale", Created: time.Unix(1750000000, 0).UTC()}
	o := buildOptions{Root: root, Components: []string{"scaler"}, Platforms: []v1.Platform{amd64, arm64}, Meta: m}
	reg := startRegistry(t)
	start := time.Now()
	rel, err := dist(t.Context(), distOptions{buildOptions: withOut(o, dir), Registry: reg + "/team/httpscale"})
	if err != nil {
		t.Fatal(err)
	}
	digests := map[string]v1.Hash{}
	for c, d := range rel.Images {
		if digests[c], err = v1.NewHash(d); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("built scaler for 2 platforms with its release files in %s: %s", time.Since(start).Round(time.Second), digests["scaler"])
	checkRelease(t, dir, rel, o)

	// The layout: one index, tagged with the version.
	idx, tag, err := readLayout(filepath.Join(out, "scaler"))
	if err != nil {
		t.Fatal(err)
	}
	if tag != m.Version || digest(t, idx) != digests["scaler"] {
		t.Fatalf("layout holds %s tagged %q; want %s tagged %q", digest(t, idx), tag, digests["scaler"], m.Version)
	}

	pushed, err := push(t.Context(), pushOptions{Out: out, Registry: reg + "/team/httpscale", Components: []string{"scaler"}})
	if err != nil {
		t.Fatal(err)
	}
	wantRef := reg + "/team/httpscale/scaler:" + m.Version
	if len(pushed) != 1 || pushed[0] != wantRef+"@"+digests["scaler"].String() {
		t.Fatalf("pushed %v; want %s@%s", pushed, wantRef, digests["scaler"])
	}
	// --tag overrides the layout's tag.
	if _, err := push(t.Context(), pushOptions{Out: out, Registry: reg + "/other", Tag: "latest", Components: []string{"scaler"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(mustRef(t, reg+"/other/scaler:latest")); err != nil {
		t.Errorf("the --tag push is not in the registry: %v", err)
	}

	pulled, err := remote.Index(mustRef(t, wantRef))
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, pulled) != digests["scaler"] {
		t.Errorf("pulled index %s, pushed %s", digest(t, pulled), digests["scaler"])
	}
	im, err := pulled.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var platforms []string
	var native v1.Image
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.String())
		img, err := pulled.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if cf.Architecture != d.Platform.Architecture || cf.OS != "linux" {
			t.Errorf("%s: config says %s/%s", d.Platform, cf.OS, cf.Architecture)
		}
		if c.User != "65532:65532" || len(c.Entrypoint) != 1 || c.Entrypoint[0] != "/usr/local/bin/scaler" {
			t.Errorf("%s: user %q entrypoint %q", d.Platform, c.User, c.Entrypoint)
		}
		for k, want := range map[string]string{keySource: m.Source, keyVersion: m.Version, keyRevision: m.Commit, keyCreated: "2025-06-15T15:06:40Z"} {
			if c.Labels[k] != want {
				t.Errorf("%s: label %s = %q, want %q", d.Platform, k, c.Labels[k], want)
			}
		}
		if d.Platform.Architecture == runtime.GOARCH {
			native = img
		}
	}
	if strings.Join(platforms, ",") != "linux/amd64,linux/arm64" {
		t.Errorf("platforms %v; want linux/amd64,linux/arm64", platforms)
	}
	checkPublish(t, dir, rel)
	if native == nil || runtime.GOOS != "linux" {
		t.Skipf("no image for %s/%s to run", runtime.GOOS, runtime.GOARCH)
	}

	bin := filepath.Join(t.TempDir(), "scaler")
	if err := os.WriteFile(bin, fileFromImage(t, native, "usr/local/bin/scaler"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("scaler --version: %v\n%s", err, got)
	}
	if want := "scaler 0.0.0-test.1 (commit c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00)\n"; string(got) != want {
		t.Errorf("scaler --version printed %q, want %q", got, want)
	}
	// Static: no ELF interpreter (a dynamically linked binary names /lib64/ld-linux-*.so).
	if elf := fileFromImage(t, native, "usr/local/bin/scaler"); bytes.Contains(elf[:4096], []byte("ld-linux")) {
		t.Error("the binary names a dynamic loader; want a static binary")
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Every component links the time-zone database and the CA bundle; a module without them fails.
func TestCheckEmbeds(t *testing.T) {
	if err := checkEmbeds(t.Context(), "../..", allComponents); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, body := range map[string]string{
		"go.mod":         "module example.com/bare\n\ngo 1.26\n",
		"scaler/main.go": "package main\n\nfunc main() {}\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkEmbeds(t.Context(), dir, []string{"scaler"}); err == nil || !strings.Contains(err.Error(), "time/tzdata") {
		t.Errorf("a binary without time/tzdata: err = %v", err)
	}
}

// fileFromImage returns a regular file from the image's layers (the last layer that has it wins).
func fileFromImage(t *testing.T, img v1.Image, path string) []byte {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var found []byte
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name == path && h.Typeflag == tar.TypeReg {
				if found, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
			}
		}
		rc.Close()
	}
	if found == nil {
		t.Fatalf("%s is not in the image", path)
	}
	return found
}
