//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// documentedMetric is one row of docs/metrics.md's tables.
type documentedMetric struct {
	Type   string
	Labels []string
	// Lazy: the row says the series appears only with its first event (a vector with no child yet).
	Lazy bool
}

var (
	reDocSection = regexp.MustCompile(`(?m)^## (Operator|Interceptor|Scaler)\s*$`)
	reDocRow     = regexp.MustCompile("(?m)^\\| `(httpscale_[a-z_]+)` \\| (counter|gauge|histogram) \\|([^|]*)\\| ([^\n]*)\\|\\s*$")
	reDocPrefix  = regexp.MustCompile("`([a-z_]+_)`")
	reTypeLine   = regexp.MustCompile(`(?m)^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$`)
	reSample     = regexp.MustCompile(`(?m)^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? `)
	reLabelName  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"`)
)

// metricsDoc reads docs/metrics.md: the httpscale metrics of each component, and the prefixes of the
// other families ("Also served").
func metricsDoc() (map[string]map[string]documentedMetric, []string) {
	GinkgoHelper()
	raw, err := os.ReadFile(filepath.Join(framework.RepoRoot(), "docs", "metrics.md"))
	Expect(err).NotTo(HaveOccurred())
	doc := string(raw)
	out := map[string]map[string]documentedMetric{}
	idx := reDocSection.FindAllStringSubmatchIndex(doc, -1)
	for i, m := range idx {
		end := len(doc)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		if j := strings.Index(doc[m[1]:end], "\n## "); j >= 0 {
			end = m[1] + j
		}
		comp := strings.ToLower(doc[m[2]:m[3]])
		out[comp] = map[string]documentedMetric{}
		for _, row := range reDocRow.FindAllStringSubmatch(doc[m[1]:end], -1) {
			var labels []string
			for _, l := range strings.Split(row[3], ",") {
				if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
					labels = append(labels, l)
				}
			}
			slices.Sort(labels)
			out[comp][row[1]] = documentedMetric{Type: row[2], Labels: labels, Lazy: strings.Contains(row[4], "appears with its first")}
		}
	}
	also := doc[strings.Index(doc, "## Also served"):]
	also = also[:strings.Index(also[3:], "\n## ")+3]
	var prefixes []string
	for _, m := range reDocPrefix.FindAllStringSubmatch(also, -1) {
		prefixes = append(prefixes, m[1])
	}
	return out, prefixes
}

// servedMetric is one family of a scrape: its type and the label names of its samples.
type servedMetric struct {
	Type   string
	Labels []string
}

// scrape parses a Prometheus text exposition: family name → type and label names (histogram series'
// le, _bucket, _sum and _count folded into the family).
func scrape(body string) map[string]servedMetric {
	out := map[string]servedMetric{}
	for _, m := range reTypeLine.FindAllStringSubmatch(body, -1) {
		out[m[1]] = servedMetric{Type: m[2]}
	}
	for _, m := range reSample.FindAllStringSubmatch(body, -1) {
		name := m[1]
		if _, ok := out[name]; !ok {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base := strings.TrimSuffix(name, suffix); base != name && out[base].Type == "histogram" {
					name = base
				}
			}
		}
		fam := out[name]
		for _, l := range reLabelName.FindAllStringSubmatch(m[2], -1) {
			if l[1] != "le" && !slices.Contains(fam.Labels, l[1]) {
				fam.Labels = append(fam.Labels, l[1])
			}
		}
		slices.Sort(fam.Labels)
		out[name] = fam
	}
	return out
}

// expectMetricsAsDocumented scrapes /metrics of one pod of every component (the operator's leader,
// whose propagation metrics are live) and checks them against docs/metrics.md: every httpscale_* family
// served is in the component's table with that type and those labels, every family of the table is
// served (unless the row says it appears with its first event), and every other family has a prefix
// the page lists.
func expectMetricsAsDocumented(ctx context.Context) {
	GinkgoHelper()
	documented, prefixes := metricsDoc()
	Expect(documented).To(HaveKey("operator"))
	Expect(documented).To(HaveKey("interceptor"))
	Expect(documented).To(HaveKey("scaler"))
	leader, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "lease", "operator.httpscale.dev", "-o", "jsonpath={.spec.holderIdentity}")
	Expect(err).NotTo(HaveOccurred())
	ports := map[string]int{"operator": localcluster.OperatorMetrics, "interceptor": localcluster.InterceptorAdmin, "scaler": localcluster.ScalerMetricsPort}
	for comp, port := range ports {
		pods, err := f.Cluster.Pods(ctx, localcluster.Namespace, "app.kubernetes.io/component="+comp)
		Expect(err).NotTo(HaveOccurred())
		// Every Ready replica (the operator: its leader): per-app series appear only on the replicas
		// that served the app, and one just rolled by a chart upgrade may have served none, so a listed
		// family must be served by one of them, and what each serves must be listed.
		var ips []string
		for _, p := range pods {
			if p.Ready && !p.Deleting && (comp != "operator" || strings.HasPrefix(leader, p.Name)) {
				ips = append(ips, p.IP)
			}
		}
		Expect(ips).NotTo(BeEmpty(), "a Ready %s pod (leader %q)", comp, leader)
		served := map[string]servedMetric{}
		var problems []string
		var body []byte
		for _, ip := range ips {
			var resp *http.Response
			if comp == "interceptor" {
				resp, err = adminTokenGet(ctx, ip, "/metrics") // the admin port wants a token
			} else {
				resp, err = f.Get(ctx, fmt.Sprintf("http://%s:%d/metrics", ip, port), "")
			}
			Expect(err).NotTo(HaveOccurred())
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.StatusCode).To(Equal(http.StatusOK))
			for name, s := range scrape(string(body)) {
				served[name] = s
				if !strings.HasPrefix(name, "httpscale_") {
					if !slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(name, p) }) {
						problems = append(problems, fmt.Sprintf("%s %s serves %s, whose prefix docs/metrics.md does not list", comp, ip, name))
					}
					continue
				}
				d, ok := documented[comp][name]
				switch {
				case !ok:
					problems = append(problems, fmt.Sprintf("%s %s serves %s (%s, labels %v), which docs/metrics.md does not list under %s", comp, ip, name, s.Type, s.Labels, comp))
				case d.Type != s.Type || !slices.Equal(d.Labels, s.Labels):
					problems = append(problems, fmt.Sprintf("%s %s serves %s as a %s with labels %v; docs/metrics.md says %s with %v", comp, ip, name, s.Type, s.Labels, d.Type, d.Labels))
				}
			}
		}
		for name, d := range documented[comp] {
			if _, ok := served[name]; !ok && !d.Lazy {
				problems = append(problems, fmt.Sprintf("docs/metrics.md lists %s for the %s, which none of its %d Ready replicas serves", name, comp, len(ips)))
			}
		}
		slices.Sort(problems)
		Expect(problems).To(BeEmpty(), "%s's /metrics (%d families) against docs/metrics.md", comp, len(served))
		rss := regexp.MustCompile(`(?m)^process_resident_memory_bytes (\S+)$`).FindStringSubmatch(string(body))
		if rss != nil {
			var b float64
			_, _ = fmt.Sscan(rss[1], &b)
			AddReportEntry(comp+" resident memory", fmt.Sprintf("%.1f MiB", b/(1<<20)))
		}
		fmt.Fprintf(GinkgoWriter, "%s: %d metric families served, as docs/metrics.md lists; resident memory %v bytes\n", comp, len(served), rss)
	}
}

// execOutput runs a command on the host and returns its standard output.
func execOutput(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}
