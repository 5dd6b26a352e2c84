// Command images builds the operator, interceptor and scaler container images without a container
// engine and pushes them (`make images`, `make images-push`; docs/install.md).
//
//	images build --root . --out bin/images --version 0.1.0
//	images push  --out bin/images --registry registry.example.com/team [--tag 0.1.0]
//
// build compiles static binaries for every platform (CGO_ENABLED=0, -trimpath, -buildid=, version and
// commit stamped into pkg/version), assembles one OCI image per component and platform on an empty base
// (image.go) and writes each component's multi-platform index as an OCI layout under
// <out>/<component>/, tagged with the version. Every timestamp is the commit time (or SOURCE_DATE_EPOCH),
// so building one commit twice gives the same digests. push copies those indexes to
// <registry>/<component>:<tag>.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const versionPkg = "github.com/httpscale/httpscale/pkg/version"

var allComponents = []string{"operator", "interceptor", "scaler"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: images build|push|dist|publish|check|notes|previous [flags]")
	}
	fs := flag.NewFlagSet("images "+args[0], flag.ContinueOnError)
	layoutDir := fs.String("out", "bin/images", "Folder holding one OCI layout per component.")
	components := fs.String("components", strings.Join(allComponents, ","), "Comma-separated components.")
	switch args[0] {
	case "build":
		parse := buildFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		o, err := parse(ctx, *components)
		if err != nil {
			return err
		}
		o.Out = *layoutDir
		digests, err := build(ctx, o)
		if err != nil {
			return err
		}
		for _, c := range o.Components {
			fmt.Fprintf(out, "%s:%s %s\n", filepath.Join(o.Out, c), o.Meta.Version, digests[c])
		}
		return nil
	case "dist", "publish", "check", "notes", "previous":
		return runRelease(ctx, args[0], fs, args[1:], layoutDir, components, out)
	case "push":
		o := pushOptions{}
		fs.StringVar(&o.Registry, "registry", "", "Registry and path prefix, e.g. registry.example.com/team (required); images go to <registry>/<component>:<tag>.")
		fs.StringVar(&o.Tag, "tag", "", "Tag to push (default: the version the layout was built with).")
		fs.BoolVar(&o.Insecure, "insecure", false, "Allow plain HTTP (localhost, 127.0.0.1 and private addresses are always allowed).")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		var err error
		if o.Components, err = parseComponents(*components); err != nil {
			return err
		}
		o.Out = *layoutDir
		refs, err := push(ctx, o, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		for _, r := range refs {
			fmt.Fprintln(out, r)
		}
		return err
	}
	return fmt.Errorf("unknown command %q: want build, push, dist, publish, check, notes or previous", args[0])
}

func parseComponents(s string) ([]string, error) {
	var out []string
	for c := range strings.SplitSeq(s, ",") {
		if !slices.Contains(allComponents, c) {
			return nil, fmt.Errorf("unknown component %q: want some of %s", c, strings.Join(allComponents, ","))
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for p := range strings.SplitSeq(s, ",") {
		pl, err := v1.ParsePlatform(p)
		if err != nil || pl.OS != "linux" || (pl.Architecture != "amd64" && pl.Architecture != "arm64") {
			return nil, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", p)
		}
		if pl.Variant != "" || pl.OSVersion != "" {
			return nil, fmt.Errorf("platform %q: variants are not supported", p)
		}
		out = append(out, *pl)
	}
	return out, nil
}

// buildFlags defines the flags of build and dist on fs; the returned function reads them (after
// fs.Parse) into buildOptions, filling the commit and time from git.
func buildFlags(fs *flag.FlagSet) func(ctx context.Context, components string) (buildOptions, error) {
	o := buildOptions{}
	fs.StringVar(&o.Root, "root", ".", "Root of the httpscale module.")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "Comma-separated os/arch[/variant] list.")
	fs.StringVar(&o.Meta.Version, "version", "", "Version stamped into the binaries, labels and the layout's tag (required).")
	fs.StringVar(&o.Meta.Commit, "commit", "", "Commit stamped into binaries and labels (default: git HEAD, -dirty when the tree has changes).")
	fs.StringVar(&o.Meta.Source, "source", "https://github.com/httpscale/httpscale", "org.opencontainers.image.source label.")
	epoch := fs.String("source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "Unix time of every timestamp (default: the commit's time).")
	return func(ctx context.Context, components string) (buildOptions, error) {
		var err error
		if o.Components, err = parseComponents(components); err != nil {
			return o, err
		}
		if o.Platforms, err = parsePlatforms(*platforms); err != nil {
			return o, err
		}
		return o, o.fillFromGit(ctx, *epoch)
	}
}

type buildOptions struct {
	Root, Out  string
	Components []string
	Platforms  []v1.Platform
	Meta       Meta
	// OnImage, when set, is called with every platform image as it is assembled, and its binary (the
	// release writes an SBOM of each).
	OnImage func(component string, p v1.Platform, binary []byte, img v1.Image) error
}

// fillFromGit defaults the commit and the timestamp from the git checkout at Root.
func (o *buildOptions) fillFromGit(ctx context.Context, epoch string) error {
	if o.Meta.Commit == "" {
		rev, err := gitOutput(ctx, o.Root, "rev-parse", "HEAD")
		if err != nil {
			return fmt.Errorf("finding the commit (or pass --commit): %w", err)
		}
		o.Meta.Commit = rev
		status, err := gitOutput(ctx, o.Root, "status", "--porcelain", "--untracked-files=no")
		if err != nil {
			return err
		}
		if status != "" {
			o.Meta.Commit += "-dirty"
		}
	}
	if epoch == "" {
		var err error
		if epoch, err = gitOutput(ctx, o.Root, "log", "-1", "--format=%ct", "HEAD"); err != nil {
			return fmt.Errorf("finding the commit time (or set SOURCE_DATE_EPOCH): %w", err)
		}
	}
	sec, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil || sec <= 0 {
		return fmt.Errorf("source date epoch %q: want seconds since 1970", epoch)
	}
	o.Meta.Created = time.Unix(sec, 0).UTC()
	return nil
}

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(string(b)), nil
}

// build compiles, assembles and writes every component's layout; it returns each index's digest.
func build(ctx context.Context, o buildOptions) (map[string]v1.Hash, error) {
	if err := o.Meta.validate(); err != nil {
		return nil, err
	}
	if _, err := name.NewTag("example.com/x:" + o.Meta.Version); err != nil {
		return nil, fmt.Errorf("version %q is not a valid image tag: %w", o.Meta.Version, err)
	}
	if err := checkEmbeds(ctx, o.Root, o.Components); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "httpscale-images-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	for _, p := range o.Platforms {
		if err := compile(ctx, o, p, filepath.Join(work, p.OS+"-"+p.Architecture)); err != nil {
			return nil, err
		}
	}
	digests := map[string]v1.Hash{}
	for _, c := range o.Components {
		images := map[string]v1.Image{}
		for _, p := range o.Platforms {
			bin, err := os.ReadFile(filepath.Join(work, p.OS+"-"+p.Architecture, c))
			if err != nil {
				return nil, err
			}
			if images[p.String()], err = Image(c, bin, p, o.Meta); err != nil {
				return nil, err
			}
			if o.OnImage != nil {
				if err := o.OnImage(c, p, bin, images[p.String()]); err != nil {
					return nil, err
				}
			}
		}
		idx, err := Index(c, images, o.Platforms, o.Meta)
		if err != nil {
			return nil, err
		}
		if digests[c], err = writeLayout(filepath.Join(o.Out, c), idx, o.Meta.Version); err != nil {
			return nil, fmt.Errorf("%s: %w", c, err)
		}
	}
	return digests, nil
}

// embeds are the packages a binary on an empty base needs: the time-zone database and a CA bundle
// (pkg/component imports both).
var embeds = []string{"time/tzdata", "golang.org/x/crypto/x509roots/fallback"}

// checkEmbeds fails unless every component links embeds.
func checkEmbeds(ctx context.Context, root string, components []string) error {
	for _, c := range components {
		cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f", "{{.ImportPath}}", "./"+c)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("listing %s's packages: %w: %s", c, err, bytes.TrimSpace(stderr.Bytes()))
		}
		deps := strings.Fields(string(out))
		for _, e := range embeds {
			if !slices.Contains(deps, e) {
				return fmt.Errorf("%s does not link %s, which its scratch image needs (import it as pkg/component does)", c, e)
			}
		}
	}
	return nil
}

// compile builds the components' static binaries for p into dir. Everything that reaches the bytes is
// fixed here rather than taken from the caller's environment (GOFLAGS, GOAMD64, CGO).
func compile(ctx context.Context, o buildOptions, p v1.Platform, dir string) error {
	ldflags := fmt.Sprintf("-s -w -buildid= -X %s.Version=%s -X %s.Commit=%s", versionPkg, o.Meta.Version, versionPkg, o.Meta.Commit)
	args := []string{"build", "-trimpath", "-buildvcs=false", "-mod=readonly", "-ldflags", ldflags, "-o", dir + "/"}
	for _, c := range o.Components {
		args = append(args, "./"+c)
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=", "GOEXPERIMENT=")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s for %s: %w", strings.Join(o.Components, ","), p, err)
	}
	return nil
}

// writeLayout replaces dir with an OCI layout holding idx, tagged tag (org.opencontainers.image.ref.name,
// which skopeo's oci:<dir>:<tag> and crane read).
func writeLayout(dir string, idx v1.ImageIndex, tag string) (v1.Hash, error) {
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{keyRefName: tag})); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}

type pushOptions struct {
	Out, Registry, Tag string
	Components         []string
	Insecure           bool
}

// readLayout returns the one index a layout written by build holds and the tag it was written with.
func readLayout(dir string) (v1.ImageIndex, string, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, "", fmt.Errorf("reading %s (run `make images` first): %w", dir, err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, "", err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, "", err
	}
	if len(m.Manifests) != 1 || !m.Manifests[0].MediaType.IsIndex() {
		return nil, "", fmt.Errorf("%s: want exactly one image index, found %d manifests", dir, len(m.Manifests))
	}
	idx, err := top.ImageIndex(m.Manifests[0].Digest)
	if err != nil {
		return nil, "", err
	}
	return idx, m.Manifests[0].Annotations[keyRefName], nil
}

// push copies each component's index to <registry>/<component>:<tag> and returns the pushed references
// with their digests.
func push(ctx context.Context, o pushOptions, opts ...remote.Option) ([]string, error) {
	if o.Registry == "" {
		return nil, errors.New("--registry is required, e.g. registry.example.com/team")
	}
	if strings.Contains(o.Registry, "://") || strings.HasSuffix(o.Registry, "/") {
		return nil, fmt.Errorf("registry %q: want host[:port][/path] without a scheme or trailing slash", o.Registry)
	}
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	opts = append(opts, remote.WithContext(ctx))
	var pushed []string
	for _, c := range o.Components {
		idx, tag, err := readLayout(filepath.Join(o.Out, c))
		if err != nil {
			return pushed, err
		}
		if o.Tag != "" {
			tag = o.Tag
		}
		ref, err := name.NewTag(o.Registry+"/"+c+":"+tag, append(nameOpts, name.StrictValidation)...)
		if err != nil {
			return pushed, fmt.Errorf("image reference for %s: %w", c, err)
		}
		if err := remote.WriteIndex(ref, idx, opts...); err != nil {
			return pushed, fmt.Errorf("pushing %s: %w", ref, err)
		}
		d, err := idx.Digest()
		if err != nil {
			return pushed, err
		}
		pushed = append(pushed, ref.String()+"@"+d.String())
	}
	return pushed, nil
}
