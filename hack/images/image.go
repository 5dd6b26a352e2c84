package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user every image runs as (distroless' "nonroot"); the chart's runAsNonRoot needs a numeric one.
const (
	nonRootID = 65532
	user      = "65532:65532"
	binDir    = "usr/local/bin"
)

// OCI annotation and label keys (https://github.com/opencontainers/image-spec/blob/main/annotations.md).
const (
	keySource   = "org.opencontainers.image.source"
	keyVersion  = "org.opencontainers.image.version"
	keyRevision = "org.opencontainers.image.revision"
	keyCreated  = "org.opencontainers.image.created"
	keyTitle    = "org.opencontainers.image.title"
	keyRefName  = "org.opencontainers.image.ref.name"
)

// Meta is what every image of one build shares. Created is the commit's time, so two builds of one
// commit produce the same bytes.
type Meta struct {
	Version, Commit, Source string
	Created                 time.Time
}

func (m Meta) validate() error {
	switch {
	case m.Version == "" || strings.ContainsAny(m.Version, " \t\n"):
		return fmt.Errorf("version %q: want a non-empty word", m.Version)
	case m.Commit == "":
		return fmt.Errorf("commit must not be empty")
	case m.Source == "":
		return fmt.Errorf("source must not be empty")
	case m.Created.IsZero():
		return fmt.Errorf("created time must be set (the commit time or SOURCE_DATE_EPOCH)")
	}
	return nil
}

// annotations are the OCI labels of an image config and the annotations of its manifest and index.
func (m Meta) annotations(component string) map[string]string {
	return map[string]string{
		keySource:   m.Source,
		keyVersion:  m.Version,
		keyRevision: m.Commit,
		keyCreated:  m.Created.UTC().Format(time.RFC3339),
		keyTitle:    component,
	}
}

// file is one tar entry. Directories have a trailing slash in name and no body.
type file struct {
	name     string
	mode     int64
	uid, gid int
	body     []byte
}

// baseFiles is the scratch image's only content besides the binary: a passwd and group file naming the
// non-root user (so tools that resolve the user find it), its home and a world-writable /tmp.
func baseFiles() []file {
	return []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, body: fmt.Appendf(nil, "root:x:0:\nnonroot:x:%d:\n", nonRootID)},
		{name: "etc/passwd", mode: 0o644, body: fmt.Appendf(nil,
			"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", nonRootID, nonRootID)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonRootID, gid: nonRootID},
		{name: "tmp/", mode: 0o1777},
	}
}

// binaryFiles puts the binary at /usr/local/bin/<name>, owned by root and not writable by the user.
func binaryFiles(name string, binary []byte) []file {
	return []file{
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: binDir + "/", mode: 0o755},
		{name: binDir + "/" + name, mode: 0o755, body: binary},
	}
}

// tarBytes writes files as a tar archive in name order with fixed times, owners and no user or group
// names, so equal files give equal bytes.
func tarBytes(files []file, mtime time.Time) ([]byte, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, f := range files {
		if i > 0 && files[i-1].name == f.name {
			return nil, fmt.Errorf("tar entry %s twice", f.name)
		}
		if path.IsAbs(f.name) || strings.Contains(f.name, "..") {
			return nil, fmt.Errorf("tar entry %s: want a relative path without ..", f.name)
		}
		h := &tar.Header{
			Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid,
			ModTime: mtime.UTC().Truncate(time.Second), Format: tar.FormatPAX,
		}
		if strings.HasSuffix(f.name, "/") {
			if len(f.body) > 0 {
				return nil, fmt.Errorf("tar entry %s: a directory has no body", f.name)
			}
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar entry %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("tar entry %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// layer is an OCI gzip layer of files. Go's compress/gzip writes no name or time in its header, so the
// compressed bytes depend only on the tar bytes, the level and the Go release that compresses them.
func layer(files []file, mtime time.Time) (v1.Layer, error) {
	tb, err := tarBytes(files, mtime)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(
		func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tb)), nil },
		tarball.WithMediaType(types.OCILayer),
		tarball.WithCompressionLevel(gzip.BestCompression),
		tarball.WithCompressedCaching,
	)
}

// Image assembles one component's image for one platform: scratch, the base files, the binary, the
// non-root user, the binary as entrypoint, and the OCI labels of m.
func Image(component string, binary []byte, platform v1.Platform, m Meta) (v1.Image, error) {
	if err := m.validate(); err != nil {
		return nil, err
	}
	if len(binary) == 0 {
		return nil, fmt.Errorf("%s %s: empty binary", component, platform)
	}
	base, err := layer(baseFiles(), m.Created)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	bin, err := layer(binaryFiles(component, binary), m.Created)
	if err != nil {
		return nil, fmt.Errorf("%s layer: %w", component, err)
	}
	created := v1.Time{Time: m.Created.UTC()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: created, CreatedBy: "hack/images: /etc/passwd, /etc/group, /home/nonroot, /tmp"}},
		mutate.Addendum{Layer: bin, History: v1.History{Created: created, CreatedBy: "hack/images: /" + binDir + "/" + component}},
	)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant = platform.OS, platform.Architecture, platform.Variant
	cf.Config.User = user
	cf.Config.Entrypoint = []string{"/" + binDir + "/" + component}
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = m.annotations(component)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, m.annotations(component)).(v1.Image), nil
}

// Index is the multi-platform image of one component: one manifest per platform, in the order given.
func Index(component string, images map[string]v1.Image, platforms []v1.Platform, m Meta) (v1.ImageIndex, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		img, ok := images[p.String()]
		if !ok {
			return nil, fmt.Errorf("%s: no image for %s", component, p)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant}},
		})
	}
	return mutate.Annotations(idx, m.annotations(component)).(v1.ImageIndex), nil
}
