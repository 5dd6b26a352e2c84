package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// runRelease runs the release commands:
//
//	images dist     --root . --out bin/release --registry ghcr.io/httpscale --version 0.2.0 [--platforms ...]
//	images publish  --out bin/release [--helm helm] [--insecure]
//	images check    --root . --version 0.2.0      (may this version be published?)
//	images notes    --root . --version 0.2.0      (its CHANGELOG.md section)
//	images previous --root . --version 0.2.0      (the release before it: "<version> <commit>")
//
// fs already has --out (the release folder for dist and publish) and --components.
func runRelease(ctx context.Context, cmd string, fs *flag.FlagSet, args []string, dir, components *string, out io.Writer) error {
	switch cmd {
	case "dist":
		parse := buildFlags(fs)
		registry := fs.String("registry", "ghcr.io/httpscale", "Registry and path prefix the images and chart will be pushed to; the chart's default images point there.")
		if err := fs.Parse(args); err != nil {
			return err
		}
		bo, err := parse(ctx, *components)
		if err != nil {
			return err
		}
		r, err := dist(ctx, distOptions{buildOptions: withOut(bo, *dir), Registry: *registry})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "release %s of commit %s in %s:\n", r.Version, r.Commit, *dir)
		for _, c := range sortedKeys(r.Images) {
			fmt.Fprintf(out, "  image %s/%s:%s@%s\n", r.Registry, c, r.Version, r.Images[c])
		}
		fmt.Fprintf(out, "  chart %s (sha256:%s) for oci://%s\n", r.Chart, r.ChartDigest, r.ChartRepository())
		fmt.Fprintf(out, "  %d SBOMs, %s, %s\n", len(r.SBOMs), fileProvenance, fileSums)
		return nil
	case "publish":
		o := publishOptions{}
		fs.StringVar(&o.Helm, "helm", "helm", "The helm binary that pushes the chart.")
		fs.BoolVar(&o.Insecure, "insecure", false, "Allow plain HTTP (localhost, 127.0.0.1 and private addresses are always allowed).")
		if err := fs.Parse(args); err != nil {
			return err
		}
		o.Dir = *dir
		pushed, err := publish(ctx, o, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		for _, p := range pushed {
			fmt.Fprintln(out, p)
		}
		return err
	}
	root := fs.String("root", ".", "Root of the httpscale checkout.")
	version := fs.String("version", "", "The version (required).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *version == "" {
		return fmt.Errorf("%s: --version is required", cmd)
	}
	switch cmd {
	case "check":
		if err := CheckReleasable(*root, *version); err != nil {
			return err
		}
		fmt.Fprintf(out, "%s may be released: Chart.yaml and CHANGELOG.md agree\n", *version)
		return nil
	case "notes":
		notes, err := ReleaseNotes(*root, *version)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, notes)
		return err
	default: // previous
		prev, commit, err := PreviousRelease(ctx, *root, *version)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, prev, commit)
		return err
	}
}

func withOut(o buildOptions, out string) buildOptions {
	o.Out = out
	return o
}
