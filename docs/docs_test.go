// Package docs_test keeps the documentation true to the code: the flag reference in configuration.md
// is each binary's own --help, every relative link and anchor in the Markdown files resolves, and
// install.md's compatibility matrix and sizing table name what the tests run and the chart sets.
package docs_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// TestFlagReference builds the three binaries and compares what `<binary> --help` prints with the
// block under "### <binary>" in docs/configuration.md. Fix a difference by pasting the binary's output.
func TestFlagReference(t *testing.T) {
	root := testenv.RepoRoot()
	bins := t.TempDir()
	build := exec.Command("go", "build", "-o", bins+string(filepath.Separator), "./operator", "./interceptor", "./scaler")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"operator", "interceptor", "scaler"} {
		cmd := exec.Command(filepath.Join(bins, name), "--help")
		// The defaults printed must be the built-in ones, not this machine's environment.
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "HTTPSCALE_") && !strings.HasPrefix(kv, "POD_NAMESPACE=") &&
				!strings.HasPrefix(kv, "NODE_NAME=") && !strings.HasPrefix(kv, "KUBECONFIG=") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		_ = cmd.Run() // --help exits non-zero (flag.ErrHelp)
		help := stderr.String()
		if !strings.HasPrefix(help, "Usage of "+name+":\n") {
			t.Fatalf("%s --help printed:\n%s", name, help)
		}
		help = help[:strings.LastIndex(help, "\n")+1] // drop the error line after the usage
		help = strings.TrimSuffix(help, name+": parsing flags: flag: help requested\n")
		documented := regexp.MustCompile("(?s)\n### " + name + "\n\n```\n(Usage of " + name + ":\n.*?)```\n").FindSubmatch(doc)
		if documented == nil {
			t.Errorf("docs/configuration.md has no ```-block under \"### %s\" starting with \"Usage of %s:\"", name, name)
			continue
		}
		if diff := cmp.Diff(string(documented[1]), help); diff != "" {
			t.Errorf("docs/configuration.md's flags of %s differ from `%s --help` (-doc +binary):\n%s", name, name, diff)
		}
	}
}

var (
	reLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	reHeading = regexp.MustCompile(`(?m)^#{1,6} +(.+?)\s*$`)
	reFence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is GitHub's anchor of a heading: lower case, everything but letters, digits, -, _ and spaces
// removed, spaces turned into -.
func slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings (duplicates get -1, -2, ... as on GitHub).
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	text = reFence.ReplaceAllString(text, "")
	for _, m := range reHeading.FindAllStringSubmatch(text, -1) {
		h := strings.NewReplacer("`", "", "*", "").Replace(m[1])
		h = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`).ReplaceAllString(h, "$1")
		s := slug(h)
		a := s
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", s, i)
		}
		out[a] = true
	}
	return out
}

// TestLinks checks every relative link of README.md, CHANGELOG.md, docs/, charts/ and e2e/ Markdown:
// the file exists and, for #anchors into Markdown, the heading does.
func TestLinks(t *testing.T) {
	root := testenv.RepoRoot()
	var files []string
	for _, pattern := range []string{"*.md", "docs/*.md", "docs/*/*.md", "charts/*.md", "charts/*/*.md", "e2e/*.md", "config/samples/*.md"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	cache := map[string]map[string]bool{}
	anchorsOf := func(file string) map[string]bool {
		if a, ok := cache[file]; ok {
			return a
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		cache[file] = anchors(string(raw))
		return cache[file]
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := reFence.ReplaceAllString(string(raw), "")
		rel, _ := filepath.Rel(root, file)
		for _, m := range reLink.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(link, "#")
			path := file
			if target != "" {
				path = filepath.Join(filepath.Dir(file), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s: link %s: %s does not exist", rel, link, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchorsOf(path)[anchor] {
				t.Errorf("%s: link %s: no heading with anchor #%s in %s", rel, link, anchor, filepath.Base(path))
			}
		}
	}
}

// TestVersionsInDocs keeps the install commands current: every `--version` given with the published
// chart, every sample URL's tag and every `make release VERSION=` in the docs is the chart's version
// (Chart.yaml, whose appVersion is the same), which CHANGELOG.md has a section for.
func TestVersionsInDocs(t *testing.T) {
	root := testenv.RepoRoot()
	chart, err := os.ReadFile(filepath.Join(root, "charts", "httpscale", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version: (\S+)$`).FindSubmatch(chart)
	if m == nil {
		t.Fatal("Chart.yaml has no version")
	}
	version := string(m[1])
	appVersion := ""
	if app := regexp.MustCompile(`(?m)^appVersion: "?([^"\s]+)"?$`).FindSubmatch(chart); app != nil {
		appVersion = string(app[1])
	}
	if appVersion != version {
		t.Errorf("Chart.yaml: appVersion %q, version %s; the chart's version is always the app's (CHANGELOG.md)", appVersion, version)
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(version) + ` - `).Match(changelog) {
		t.Errorf("CHANGELOG.md has no section for the chart's version %s", version)
	}
	uses := []*regexp.Regexp{
		regexp.MustCompile(`charts/httpscale\S* --version ([0-9][0-9A-Za-z.+-]*)`),
		regexp.MustCompile(`httpscale/httpscale/v([^/\s]+)/config/samples`),
		regexp.MustCompile(`VERSION=([0-9][^\s` + "`" + `]*)`),
		regexp.MustCompile(`ghcr\.io/httpscale/(?:operator|interceptor|scaler):([0-9][^\s` + "`" + `]*)`),
	}
	var files []string
	for _, pattern := range []string{"README.md", "docs/*.md", "charts/httpscale/README.md", "config/samples/*.md", "config/samples/*/*.yaml"} {
		found, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, found...)
	}
	seen := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for _, re := range uses {
			for _, u := range re.FindAllStringSubmatch(string(raw), -1) {
				seen++
				if u[1] != version {
					t.Errorf("%s: %q names version %s; the chart is %s", rel, strings.TrimSpace(u[0]), u[1], version)
				}
			}
		}
	}
	if seen == 0 {
		t.Error("no install command with a version found: the patterns no longer match the docs")
	}
}
