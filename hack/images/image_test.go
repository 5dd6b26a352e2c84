package main

import (
	"archive/tar"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

var (
	amd64 = v1.Platform{OS: "linux", Architecture: "amd64"}
	arm64 = v1.Platform{OS: "linux", Architecture: "arm64"}
	meta  = Meta{Version: "1.2.3", Commit: "0123456789abcdef", Source: "https://example.com/src", Created: time.Unix(1700000000, 0)}
)

func mustImage(t *testing.T, bin string, p v1.Platform, m Meta) v1.Image {
	t.Helper()
	img, err := Image("scaler", []byte(bin), p, m)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func digest(t *testing.T, d interface{ Digest() (v1.Hash, error) }) v1.Hash {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The same inputs give the same digests; every input reaches the digest.
func TestImageReproducible(t *testing.T) {
	first := digest(t, mustImage(t, "binary", amd64, meta))
	if again := digest(t, mustImage(t, "binary", amd64, meta)); again != first {
		t.Fatalf("two assemblies of the same inputs: %s then %s", first, again)
	}
	later, otherCommit := meta, meta
	later.Created = later.Created.Add(time.Second)
	otherCommit.Commit = "fedcba"
	for name, img := range map[string]v1.Image{
		"binary":   mustImage(t, "binary2", amd64, meta),
		"platform": mustImage(t, "binary", arm64, meta),
		"time":     mustImage(t, "binary", amd64, later),
		"commit":   mustImage(t, "binary", amd64, otherCommit),
	} {
		if digest(t, img) == first {
			t.Errorf("changing the %s left the digest at %s", name, first)
		}
	}

	idx := func() v1.Hash {
		i, err := Index("scaler", map[string]v1.Image{
			amd64.String(): mustImage(t, "a", amd64, meta), arm64.String(): mustImage(t, "b", arm64, meta),
		}, []v1.Platform{amd64, arm64}, meta)
		if err != nil {
			t.Fatal(err)
		}
		return digest(t, i)
	}
	if a, b := idx(), idx(); a != b {
		t.Errorf("two indexes of the same inputs: %s then %s", a, b)
	}
}

type tarEntry struct {
	Name     string
	Mode     int64
	Uid, Gid int
	Uname    string
	ModTime  time.Time
	Body     string
}

func layerEntries(t *testing.T, l v1.Layer) []tarEntry {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out []tarEntry
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{h.Name, h.Mode, h.Uid, h.Gid, h.Uname, h.ModTime.UTC(), string(b)})
	}
}

func TestImageContents(t *testing.T) {
	img := mustImage(t, "the-binary", arm64, meta)
	mt, err := img.MediaType()
	if err != nil || mt != types.OCIManifestSchema1 {
		t.Errorf("media type %s, %v; want %s", mt, err, types.OCIManifestSchema1)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	wantLabels := map[string]string{
		keySource: "https://example.com/src", keyVersion: "1.2.3", keyRevision: "0123456789abcdef",
		keyCreated: "2023-11-14T22:13:20Z", keyTitle: "scaler",
	}
	if diff := cmp.Diff(wantLabels, cf.Config.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if cf.Config.User != "65532:65532" || cmp.Diff([]string{"/usr/local/bin/scaler"}, cf.Config.Entrypoint) != "" {
		t.Errorf("user %q entrypoint %q", cf.Config.User, cf.Config.Entrypoint)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" || !cf.Created.Equal(meta.Created) {
		t.Errorf("config os/arch/created = %s/%s/%s", cf.OS, cf.Architecture, cf.Created)
	}
	for _, h := range cf.History {
		if !h.Created.Equal(meta.Created) {
			t.Errorf("history %q created %s, want the commit time", h.CreatedBy, h.Created)
		}
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantLabels, m.Annotations); diff != "" {
		t.Errorf("manifest annotations (-want +got):\n%s", diff)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 2 {
		t.Fatalf("layers: %d, %v; want 2", len(layers), err)
	}
	at := meta.Created.UTC()
	wantLayers := [][]tarEntry{{
		{"etc/", 0o755, 0, 0, "", at, ""},
		{"etc/group", 0o644, 0, 0, "", at, "root:x:0:\nnonroot:x:65532:\n"},
		{"etc/passwd", 0o644, 0, 0, "", at, "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"},
		{"home/", 0o755, 0, 0, "", at, ""},
		{"home/nonroot/", 0o700, 65532, 65532, "", at, ""},
		{"tmp/", 0o1777, 0, 0, "", at, ""},
	}, {
		{"usr/", 0o755, 0, 0, "", at, ""},
		{"usr/local/", 0o755, 0, 0, "", at, ""},
		{"usr/local/bin/", 0o755, 0, 0, "", at, ""},
		{"usr/local/bin/scaler", 0o755, 0, 0, "", at, "the-binary"},
	}}
	for i, want := range wantLayers {
		if diff := cmp.Diff(want, layerEntries(t, layers[i])); diff != "" {
			t.Errorf("layer %d (-want +got):\n%s", i, diff)
		}
	}
	// Every component and platform shares the base layer, so registries store it once.
	other, err := Image("operator", []byte("x"), amd64, meta)
	if err != nil {
		t.Fatal(err)
	}
	otherLayers, _ := other.Layers()
	if digest(t, otherLayers[0]) != digest(t, layers[0]) {
		t.Error("the base layer differs between components")
	}
}

func TestIndexPlatforms(t *testing.T) {
	images := map[string]v1.Image{amd64.String(): mustImage(t, "a", amd64, meta), arm64.String(): mustImage(t, "b", arm64, meta)}
	idx, err := Index("scaler", images, []v1.Platform{amd64, arm64}, meta)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIImageIndex || len(m.Manifests) != 2 {
		t.Fatalf("index %s with %d manifests", m.MediaType, len(m.Manifests))
	}
	for i, want := range []v1.Platform{amd64, arm64} {
		d := m.Manifests[i]
		if d.Platform == nil || d.Platform.String() != want.String() || d.Digest != digest(t, images[want.String()]) {
			t.Errorf("manifest %d: platform %v digest %s; want %s", i, d.Platform, d.Digest, want)
		}
	}
	if m.Annotations[keyRevision] != meta.Commit {
		t.Errorf("index annotations %v lack the revision", m.Annotations)
	}
	if _, err := Index("scaler", images, []v1.Platform{amd64, {OS: "linux", Architecture: "s390x"}}, meta); err == nil {
		t.Error("Index with a platform that has no image: no error")
	}
}

func TestBadInput(t *testing.T) {
	noTime := meta
	noTime.Created = time.Time{}
	spaced := meta
	spaced.Version = "1 2"
	for name, fn := range map[string]func() error{
		"empty binary":  func() error { _, err := Image("scaler", nil, amd64, meta); return err },
		"no time":       func() error { _, err := Image("scaler", []byte("x"), amd64, noTime); return err },
		"bad version":   func() error { _, err := Image("scaler", []byte("x"), amd64, spaced); return err },
		"dup tar entry": func() error { _, err := tarBytes([]file{{name: "a"}, {name: "a"}}, meta.Created); return err },
		"abs tar entry": func() error { _, err := tarBytes([]file{{name: "/etc/x"}}, meta.Created); return err },
		"dir with body": func() error { _, err := tarBytes([]file{{name: "d/", body: []byte("x")}}, meta.Created); return err },
		"platform":      func() error { _, err := parsePlatforms("linux/amd64,windows/amd64"); return err },
		"variant":       func() error { _, err := parsePlatforms("linux/arm64/v8"); return err },
		"component":     func() error { _, err := parseComponents("operator,kubelet"); return err },
		"registry":      func() error { _, err := push(t.Context(), pushOptions{Registry: "https://r.example/x"}); return err },
		"no registry":   func() error { _, err := push(t.Context(), pushOptions{}); return err },
		"missing layout": func() error {
			_, err := push(t.Context(), pushOptions{Registry: "127.0.0.1:1/x", Out: t.TempDir(), Components: []string{"scaler"}})
			return err
		},
	} {
		if err := fn(); err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.TrimSpace(err.Error()) == "" {
			t.Errorf("%s: empty error message", name)
		}
	}
}
