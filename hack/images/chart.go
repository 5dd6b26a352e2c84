package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// chartName is the chart's name and the last part of its OCI reference.
const chartName = "httpscale"

var (
	reChartVersion = regexp.MustCompile(`(?m)^version:.*$`)
	reAppVersion   = regexp.MustCompile(`(?m)^appVersion:.*$`)
)

// PackageChart writes the chart in <root>/charts/httpscale as a Helm chart archive for version (chart
// version = app version) whose default images are <registry>/<component>, and returns its bytes. The
// archive is what `helm package` makes (a folder httpscale/ with the chart's files, .helmignore
// honoured), except that it is reproducible: entries sorted, every time mtime, fixed modes, no owner
// names, gzip without name or time.
func PackageChart(root, version, registry string, mtime time.Time) ([]byte, error) {
	dir := filepath.Join(root, "charts", chartName)
	ignore, err := readHelmignore(filepath.Join(dir, ".helmignore"))
	if err != nil {
		return nil, err
	}
	var files []file
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil // helm's archives list files only
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("chart file %s: not a regular file", rel)
		}
		body, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch rel {
		case "Chart.yaml":
			if body, err = setChartVersion(body, version); err != nil {
				return err
			}
		case "values.yaml":
			if body, err = setImageRepositories(body, registry); err != nil {
				return err
			}
		}
		files = append(files, file{name: chartName + "/" + rel, mode: 0o644, body: body})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("packaging the chart: %w", err)
	}
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.body)), Typeflag: tar.TypeReg,
			ModTime: mtime.UTC().Truncate(time.Second), Format: tar.FormatPAX}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// setChartVersion sets both version and appVersion of Chart.yaml to version.
func setChartVersion(chart []byte, version string) ([]byte, error) {
	if len(reChartVersion.FindAll(chart, -1)) != 1 || len(reAppVersion.FindAll(chart, -1)) != 1 {
		return nil, fmt.Errorf("Chart.yaml: want exactly one version and one appVersion line")
	}
	chart = reChartVersion.ReplaceAll(chart, []byte("version: "+version))
	return reAppVersion.ReplaceAll(chart, []byte(`appVersion: "`+version+`"`)), nil
}

// setImageRepositories points the default image of every component at <registry>/<component>. Each
// component's line must be there exactly once, so a reorganised values.yaml fails the release instead
// of shipping a chart that pulls someone else's images.
func setImageRepositories(values []byte, registry string) ([]byte, error) {
	for _, c := range allComponents {
		re := regexp.MustCompile(`(?m)^(\s+repository: )\S+/` + c + `\s*$`)
		if n := len(re.FindAll(values, -1)); n != 1 {
			return nil, fmt.Errorf("values.yaml: want one `repository: <registry>/%s` line, found %d", c, n)
		}
		values = re.ReplaceAll(values, []byte("${1}"+registry+"/"+c))
	}
	return values, nil
}

// ChartVersion reads version and appVersion from a Chart.yaml.
func ChartVersion(chart []byte) (version, appVersion string) {
	field := func(re *regexp.Regexp) string {
		line := string(re.Find(chart))
		_, v, _ := strings.Cut(line, ":")
		return strings.Trim(strings.TrimSpace(v), `"'`)
	}
	return field(reChartVersion), field(reAppVersion)
}

// readHelmignore returns a matcher for the patterns of a .helmignore: blank lines and # comments are
// skipped, "dir/" matches folders, anything else matches a file or folder by its base name or its
// path inside the chart (the patterns the chart uses; Helm's full rules are a superset).
func readHelmignore(file string) (func(rel string, dir bool) bool, error) {
	raw, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return func(string, bool) bool { return false }, nil
	}
	if err != nil {
		return nil, err
	}
	var patterns []string
	for line := range strings.SplitSeq(string(raw), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			if strings.HasPrefix(line, "!") {
				return nil, fmt.Errorf("%s: negated patterns are not supported", file)
			}
			patterns = append(patterns, line)
		}
	}
	return func(rel string, dir bool) bool {
		for _, p := range patterns {
			onlyDir := strings.HasSuffix(p, "/")
			p = strings.TrimSuffix(p, "/")
			if onlyDir && !dir {
				continue
			}
			if ok, _ := path.Match(p, path.Base(rel)); ok {
				return true
			}
			if ok, _ := path.Match(p, rel); ok {
				return true
			}
		}
		return false
	}, nil
}
