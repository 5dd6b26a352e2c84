package localcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// PushImage assembles a one-layer image holding the static binary bin at /<name of bin>, with that as
// its entrypoint, and pushes it as ref to the local registry (real nodes only). crane runs inside the
// namespace, where the registry listens.
func (c Config) PushImage(ctx context.Context, ref, bin string) error {
	dir := c.path("images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := filepath.Base(bin)
	layer := filepath.Join(dir, name+".tar")
	if err := writeLayer(layer, bin, name); err != nil {
		return fmt.Errorf("building the layer of %s: %w", ref, err)
	}
	crane := filepath.Join(c.NodeDir, "crane")
	for _, args := range [][]string{
		{"append", "--insecure", "--new_layer=" + layer, "--new_tag=" + ref},
		{"mutate", "--insecure", "--set-platform=linux/amd64", "--entrypoint=/" + name, "--tag=" + ref, ref},
	} {
		cmd := c.Command(ctx, crane, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("crane %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
		}
	}
	return nil
}

// writeLayer writes a tar holding bin as /name (mode 0755, owned by root).
func writeLayer(file, bin, name string) error {
	src, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return err
	}
	out, err := os.Create(file)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: st.Size(), Typeflag: tar.TypeReg, ModTime: st.ModTime()}); err != nil {
		out.Close()
		return err
	}
	if _, err := io.Copy(tw, src); err != nil {
		out.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
