package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// CHANGELOG.md holds one section per version, newest first:
//
//	## 0.2.0 - 2026-12-01        (a release; "## 0.2.0 - Unreleased" until it is cut)
//	Commit: <40 hex digits>      (optional: the release's commit where no tag v0.2.0 records it)
//
// The release workflow publishes a version only when Chart.yaml's version and appVersion are that
// version and its section is dated; the section's text is the GitHub release's notes.

var (
	reSection = regexp.MustCompile(`^## \[?([0-9][0-9A-Za-z.+-]*)\]? - (Unreleased|\d{4}-\d{2}-\d{2})\s*$`)
	reCommit  = regexp.MustCompile(`(?m)^Commit: ([0-9a-f]{40})\s*$`)
)

// Section is one version's entry in CHANGELOG.md.
type Section struct {
	Version string
	// Date is YYYY-MM-DD, or "" while the version is unreleased.
	Date string
	// Body is the text under the heading, trimmed.
	Body string
	// Commit is the release's commit as recorded in the section, if it is.
	Commit string
}

// ParseChangelog returns the sections of a changelog in file order (newest first).
func ParseChangelog(text string) ([]Section, error) {
	var out []Section
	var body []string
	flush := func() {
		if len(out) > 0 {
			out[len(out)-1].Body = strings.TrimSpace(strings.Join(body, "\n"))
			if m := reCommit.FindStringSubmatch(out[len(out)-1].Body); m != nil {
				out[len(out)-1].Commit = m[1]
			}
		}
		body = nil
	}
	seen := map[string]bool{}
	for line := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(line, "## ") {
			m := reSection.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("changelog heading %q: want `## <version> - <YYYY-MM-DD or Unreleased>`", line)
			}
			if !reSemver.MatchString(m[1]) {
				return nil, fmt.Errorf("changelog heading %q: %s is not a semantic version", line, m[1])
			}
			if seen[m[1]] {
				return nil, fmt.Errorf("changelog: version %s twice", m[1])
			}
			seen[m[1]] = true
			flush()
			date := m[2]
			if date == "Unreleased" {
				date = ""
			}
			out = append(out, Section{Version: m[1], Date: date})
			continue
		}
		body = append(body, line)
	}
	flush()
	if len(out) == 0 {
		return nil, errors.New("changelog: no `## <version> - <date>` section")
	}
	return out, nil
}

func readChangelog(root string) ([]Section, error) {
	raw, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return nil, err
	}
	return ParseChangelog(string(raw))
}

func findSection(sections []Section, version string) (int, error) {
	for i, s := range sections {
		if s.Version == version {
			return i, nil
		}
	}
	return -1, fmt.Errorf("CHANGELOG.md has no section for %s", version)
}

// CheckReleasable fails unless version may be published from root: Chart.yaml's version and appVersion
// are version and CHANGELOG.md has a dated section for it.
func CheckReleasable(root, version string) error {
	chart, err := os.ReadFile(filepath.Join(root, "charts", chartName, "Chart.yaml"))
	if err != nil {
		return err
	}
	var errs []error
	if v, app := ChartVersion(chart); v != version || app != version {
		errs = append(errs, fmt.Errorf("charts/httpscale/Chart.yaml has version %q and appVersion %q, want both %q (chart version = app version)", v, app, version))
	}
	sections, err := readChangelog(root)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if i, err := findSection(sections, version); err != nil {
		errs = append(errs, err)
	} else if sections[i].Date == "" {
		errs = append(errs, fmt.Errorf("CHANGELOG.md: %s is still Unreleased; give it the release date", version))
	}
	return errors.Join(errs...)
}

// ReleaseNotes returns the CHANGELOG.md text of version.
func ReleaseNotes(root, version string) (string, error) {
	sections, err := readChangelog(root)
	if err != nil {
		return "", err
	}
	i, err := findSection(sections, version)
	if err != nil {
		return "", err
	}
	return sections[i].Body, nil
}

// PreviousRelease returns the newest released version older than version and its commit: the tag
// v<that version> when the repository has it, else the commit its section records.
func PreviousRelease(ctx context.Context, root, version string) (prev, commit string, err error) {
	sections, err := readChangelog(root)
	if err != nil {
		return "", "", err
	}
	i, err := findSection(sections, version)
	if err != nil {
		return "", "", err
	}
	for _, s := range sections[i+1:] {
		if s.Date == "" {
			continue
		}
		if rev, err := gitOutput(ctx, root, "rev-parse", "--verify", "--quiet", "refs/tags/v"+s.Version+"^{commit}"); err == nil && rev != "" {
			return s.Version, rev, nil
		}
		if s.Commit == "" {
			return "", "", fmt.Errorf("release %s has no tag v%s and its CHANGELOG.md section records no `Commit:`", s.Version, s.Version)
		}
		return s.Version, s.Commit, nil
	}
	return "", "", fmt.Errorf("CHANGELOG.md lists no release before %s", version)
}
