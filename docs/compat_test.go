package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/httpscale/httpscale/operator/controller"
	"github.com/httpscale/httpscale/pkg/testenv"
)

func readRepoFile(t *testing.T, rel string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// mdSection returns the Markdown of the section under heading (up to the next heading of its level).
func mdSection(t *testing.T, doc, heading string) string {
	t.Helper()
	level := strings.IndexFunc(heading, func(r rune) bool { return r != '#' })
	start := strings.Index(doc, "\n"+heading+"\n")
	if start < 0 {
		t.Fatalf("no section %q", heading)
	}
	body := doc[start+len(heading)+2:]
	if end := regexp.MustCompile(`(?m)^#{1,` + string(rune('0'+level)) + `} `).FindStringIndex(body); end != nil {
		body = body[:end[0]]
	}
	return body
}

// tableRows maps the first cell of each row of the Markdown tables in section to its cells.
func tableRows(section string) map[string][]string {
	rows := map[string][]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		rows[cells[0]] = cells
	}
	return rows
}

// TestCompatibilityMatrix keeps docs/install.md#compatibility true to what the tests run: the tested
// versions are the ones hack/tools.sh builds for envtest and the end-to-end suite, and the minimum
// KEDA and Kubernetes versions everywhere a user reads them (README, docs, the chart's README and
// notes) are the operator's KEDAMinVersion and the chart's kubeVersion.
func TestCompatibilityMatrix(t *testing.T) {
	tools := readRepoFile(t, "hack/tools.sh")
	toolVersion := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `=(\S+)$`).FindStringSubmatch(tools)
		if m == nil {
			t.Fatalf("hack/tools.sh sets no %s", name)
		}
		return m[1]
	}
	rows := tableRows(mdSection(t, readRepoFile(t, "docs/install.md"), "## Compatibility"))
	for component, variable := range map[string]string{
		"Kubernetes": "K8S_VERSION", "KEDA": "KEDA_VERSION", "Helm": "HELM_VERSION",
		"containerd / runc": "CONTAINERD_VERSION", "Gateway API": "GATEWAY_API_VERSION",
	} {
		row, ok := rows[component]
		if !ok || len(row) < 3 {
			t.Errorf("docs/install.md#compatibility has no row %q with tested and supported columns", component)
			continue
		}
		if want := toolVersion(variable); !strings.HasPrefix(row[1], want+" ") {
			t.Errorf("docs/install.md#compatibility: %s tested %q; the tests run %s (hack/tools.sh %s)", component, row[1], want, variable)
		}
	}

	// KEDA's minimum: major.minor of KEDAMinVersion, which the operator's messages name.
	kedaMin := regexp.MustCompile(`^\d+\.\d+`).FindString(controller.KEDAMinVersion)
	if !strings.HasPrefix(toolVersion("KEDA_VERSION"), "v"+kedaMin+".") {
		t.Errorf("the suite runs KEDA %s, not the minimum the docs name (%s): the minimum would be untested", toolVersion("KEDA_VERSION"), controller.KEDAMinVersion)
	}
	// Kubernetes' minimum: the chart's kubeVersion.
	kube := regexp.MustCompile(`(?m)^kubeVersion: ">=(\d+\.\d+)\.0-0"$`).FindStringSubmatch(readRepoFile(t, "charts/httpscale/Chart.yaml"))
	if kube == nil {
		t.Fatal(`charts/httpscale/Chart.yaml has no kubeVersion ">=X.Y.0-0"`)
	}
	minimums := []struct {
		what, want string
		re         *regexp.Regexp
	}{
		{"KEDA", kedaMin, regexp.MustCompile(`KEDA\W[^\n|]{0,40}?(\d+\.\d+(?:\.\d+)?)\**\s+or newer`)},
		{"KEDA", kedaMin, regexp.MustCompile(`\| KEDA \| [^|]* \| (\d+\.\d+(?:\.\d+)?) or newer`)},
		{"Kubernetes", kube[1], regexp.MustCompile(`Kubernetes (\d+\.\d+(?:\.\d+)?) or newer`)},
		{"Kubernetes", kube[1], regexp.MustCompile(`Kubernetes ≥ ?(\d+\.\d+(?:\.\d+)?)`)},
		{"Kubernetes", kube[1], regexp.MustCompile(`\| Kubernetes \| [^|]* \| (\d+\.\d+(?:\.\d+)?) or newer`)},
	}
	seen := map[string]map[string]bool{}
	for _, rel := range []string{"README.md", "docs/install.md", "docs/troubleshooting.md", "charts/httpscale/README.md", "charts/httpscale/templates/NOTES.txt"} {
		text := readRepoFile(t, rel)
		for _, m := range minimums {
			for _, found := range m.re.FindAllStringSubmatch(text, -1) {
				if seen[m.what] == nil {
					seen[m.what] = map[string]bool{}
				}
				seen[m.what][rel] = true
				if found[1] != m.want {
					t.Errorf("%s: %q names %s %s as the minimum; it is %s", rel, found[0], m.what, found[1], m.want)
				}
			}
		}
	}
	// Where the minimums must be said: the chart's own README and notes, the README and install.md.
	for what, files := range map[string][]string{
		"KEDA":       {"README.md", "docs/install.md", "charts/httpscale/README.md", "charts/httpscale/templates/NOTES.txt"},
		"Kubernetes": {"docs/install.md", "charts/httpscale/README.md"},
	} {
		for _, rel := range files {
			if !seen[what][rel] {
				t.Errorf("%s does not name the minimum %s version", rel, what)
			}
		}
	}
}

// TestSizingDefaults keeps the "chart default" column of docs/install.md#sizing equal to the chart's
// values.yaml, so the sizing advice is about the resources a user actually gets.
func TestSizingDefaults(t *testing.T) {
	var values map[string]struct {
		Resources struct {
			Requests map[string]string `json:"requests"`
			Limits   map[string]string `json:"limits"`
		} `json:"resources"`
	}
	// Only the components' resources are read; the other top-level values do not fit the struct.
	var raw map[string]any
	if err := yaml.Unmarshal([]byte(readRepoFile(t, "charts/httpscale/values.yaml")), &raw); err != nil {
		t.Fatal(err)
	}
	components := map[string]any{}
	for _, c := range []string{"operator", "interceptor", "scaler"} {
		components[c] = raw[c]
	}
	js, err := yaml.Marshal(components)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(js, &values); err != nil {
		t.Fatal(err)
	}
	rows := tableRows(mdSection(t, readRepoFile(t, "docs/install.md"), "## Sizing"))
	for c, v := range values {
		row, ok := rows[c]
		if !ok {
			t.Errorf("docs/install.md#sizing has no row for the %s", c)
			continue
		}
		r := v.Resources
		want := r.Requests["cpu"] + " / " + r.Requests["memory"] + ", limit " + r.Limits["memory"]
		if got := row[len(row)-1]; got != want {
			t.Errorf("docs/install.md#sizing: the %s's chart default is %q; values.yaml has %q", c, got, want)
		}
	}
}
