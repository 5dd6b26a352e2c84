//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// The first hour of docs/install.md on the suite's install (the OCI chart from the local registry):
// config/samples applied as they are (only the app's image is the local sample app: no internet here),
// the webhook waited for as the docs say, the interceptor reached through kubectl port-forward and a
// LoadBalancer Service's node port (kube-proxy on the real nodes), the Ingress and Gateway API samples
// accepted by the API server, and every component's /metrics compared with docs/metrics.md.
var _ = Describe("A first hour on the cluster", Ordered, func() {
	const host = "hello.example.com"
	samples := filepath.Join(framework.RepoRoot(), "config", "samples")
	sc := setUpScenario("hello")

	It("admits the sample HTTPScaledObject once the webhook answers (dry run), as install.md says to wait", func(ctx SpecContext) {
		Eventually(func() error {
			_, err := f.Cluster.KubectlRun(ctx, "", "apply", "--dry-run=server", "-n", sc.ns, "-f", filepath.Join(samples, "httpscaledobject.yaml"))
			return err
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
	})

	It("applies the sample app at zero and its HTTPScaledObject, which becomes Ready", func(ctx SpecContext) {
		raw, err := os.ReadFile(filepath.Join(samples, "app.yaml"))
		Expect(err).NotTo(HaveOccurred())
		var docs []string
		for _, doc := range strings.Split(string(raw), "\n---\n") {
			obj := map[string]any{}
			Expect(yaml.Unmarshal([]byte(doc), &obj)).To(Succeed())
			if obj["kind"] == "Deployment" {
				dep := &appsv1.Deployment{}
				Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj, dep)).To(Succeed())
				Expect(*dep.Spec.Replicas).To(BeZero(), "the sample app starts at zero")
				// The sample's image is a public one; here the local sample app answers on a port named
				// http, as the sample's container does, so the sample's Service and probe work unchanged.
				local, _ := f.SampleApp(sc.ns, "hello", 0)
				c := local.Spec.Template.Spec.Containers[0]
				c.Name = dep.Spec.Template.Spec.Containers[0].Name
				dep.Spec.Template.Spec.Containers[0] = c
				dep.Spec.Template.Spec.NodeSelector = framework.RealNodeSelector()
				js, err := runtime.DefaultUnstructuredConverter.ToUnstructured(dep)
				Expect(err).NotTo(HaveOccurred())
				out, err := yaml.Marshal(js)
				Expect(err).NotTo(HaveOccurred())
				doc = string(out)
			}
			docs = append(docs, doc)
		}
		_, err = f.Cluster.KubectlRun(ctx, strings.Join(docs, "\n---\n"), "apply", "-n", sc.ns, "-f", "-")
		Expect(err).NotTo(HaveOccurred())
		_, err = f.Cluster.KubectlRun(ctx, "", "apply", "-n", sc.ns, "-f", filepath.Join(samples, "httpscaledobject.yaml"))
		Expect(err).NotTo(HaveOccurred())
		hso := &httpscalev1alpha1.HTTPScaledObject{}
		Eventually(func(g Gomega) {
			g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: sc.ns, Name: "hello"}, hso)).To(Succeed())
			c := meta.FindStatusCondition(hso.Status.Conditions, httpscalev1alpha1.ConditionReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "Ready: %s", c.Message)
		}).WithContext(ctx).WithTimeout(2 * time.Minute).Should(Succeed())
		dep := &appsv1.Deployment{}
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: sc.ns, Name: "hello"}, dep)).To(Succeed())
		Expect(dep.Status.ReadyReplicas).To(BeZero())
	})

	It("answers the first request through kubectl port-forward, waking the app from zero", func(ctx SpecContext) {
		// A local port kubectl picks (a fixed one may be taken in the cluster's namespace), IPv4.
		pf := f.Cluster.Command(ctx, f.Cluster.Kubectl(), "-n", localcluster.Namespace, "port-forward", "--address=127.0.0.1",
			"svc/httpscale-interceptor", fmt.Sprintf(":%d", localcluster.ProxyPort))
		stdout, err := pf.StdoutPipe()
		Expect(err).NotTo(HaveOccurred())
		pf.Stderr = GinkgoWriter
		pf.WaitDelay = 5 * time.Second // Wait must not hang on the output pipes
		Expect(pf.Start()).To(Succeed())
		DeferCleanup(func() {
			_ = pf.Process.Kill()
			_ = pf.Wait()
		})
		ready := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				fmt.Fprintln(GinkgoWriter, "port-forward:", sc.Text())
				if m := reForwarding.FindStringSubmatch(sc.Text()); m != nil {
					ready <- m[1]
				}
			}
		}()
		var local string
		Eventually(ready).WithContext(ctx).WithTimeout(time.Minute).Should(Receive(&local))
		t0 := time.Now()
		resp, err := f.Get(ctx, "http://127.0.0.1:"+local+"/", host)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		Expect(resp.Header.Get("X-Httpscale-Cold-Start")).To(Equal("true"), "the app was at zero")
		AddReportEntry("first request through port-forward", fmt.Sprintf("answered 200 after a cold start in %s", time.Since(t0).Round(time.Millisecond)))
	})

	It("answers through the node port of the LoadBalancer Service the sample values make", func(ctx SpecContext) {
		DeferCleanup(func(ctx SpecContext) {
			Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter)).To(Succeed()) // back to the default ClusterIP Service
		})
		Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter, "--values", filepath.Join(samples, "access", "loadbalancer-values.yaml"))).To(Succeed())
		out, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "service", "httpscale-interceptor",
			"-o", `jsonpath={.spec.type} {.spec.ports[?(@.name=="http")].port} {.spec.ports[?(@.name=="http")].nodePort}`)
		Expect(err).NotTo(HaveOccurred())
		var typ string
		var port, nodePort int
		_, err = fmt.Sscan(out, &typ, &port, &nodePort)
		Expect(err).NotTo(HaveOccurred(), "service: %q", out)
		Expect(typ).To(Equal("LoadBalancer"))
		Expect(port).To(Equal(80))
		for _, n := range f.Cluster.Real {
			Eventually(func(g Gomega) {
				resp, err := f.Get(ctx, fmt.Sprintf("http://%s:%d/", n.IP, nodePort), host)
				g.Expect(err).NotTo(HaveOccurred())
				a, err := readAnswer(resp)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(a.Status).To(Equal(http.StatusOK))
				g.Expect(a.Host).To(Equal(host), "the app sees the client's Host")
			}).WithContext(ctx).WithTimeout(2*time.Minute).Should(Succeed(), "node %s port %d", n.Name, nodePort)
		}
	})

	It("has the Ingress and Gateway API samples accepted by the API server, pointing at the interceptor Service", func(ctx SpecContext) {
		access := filepath.Join(samples, "access")
		DeferCleanup(func(ctx SpecContext) {
			for _, file := range []string{"ingress.yaml", "gateway-api.yaml"} {
				_, err := f.Cluster.KubectlRun(ctx, "", "delete", "-n", localcluster.Namespace, "--ignore-not-found", "-f", filepath.Join(access, file))
				Expect(err).NotTo(HaveOccurred())
			}
		})
		_, err := f.Cluster.KubectlRun(ctx, "", "apply", "-n", localcluster.Namespace, "-f", filepath.Join(access, "ingress.yaml"))
		Expect(err).NotTo(HaveOccurred())
		backends, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "ingress", "httpscale-apps",
			"-o", `jsonpath={range .spec.rules[*]}{.http.paths[0].backend.service.name}:{.http.paths[0].backend.service.port.name} {end}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.Fields(backends)).To(HaveEach("httpscale-interceptor:http"))

		crds, err := gatewayAPICRDs()
		Expect(err).NotTo(HaveOccurred())
		_, err = f.Cluster.KubectlRun(ctx, "", "apply", "--server-side", "-f", crds)
		Expect(err).NotTo(HaveOccurred())
		_, err = f.Cluster.KubectlRun(ctx, "", "wait", "--for=condition=Established", "--timeout=60s",
			"crd/gateways.gateway.networking.k8s.io", "crd/httproutes.gateway.networking.k8s.io")
		Expect(err).NotTo(HaveOccurred())
		_, err = f.Cluster.KubectlRun(ctx, "", "apply", "-n", localcluster.Namespace, "-f", filepath.Join(access, "gateway-api.yaml"))
		Expect(err).NotTo(HaveOccurred())
		ref, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "httproute", "hello",
			"-o", `jsonpath={.spec.hostnames[0]} {.spec.rules[0].backendRefs[0].name}:{.spec.rules[0].backendRefs[0].port}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(ref).To(Equal(fmt.Sprintf("%s httpscale-interceptor:%d", host, localcluster.ProxyPort)))
		port, err := f.Cluster.KubectlRun(ctx, "", "-n", localcluster.Namespace, "get", "service", "httpscale-interceptor",
			"-o", `jsonpath={.spec.ports[?(@.name=="http")].port}`)
		Expect(err).NotTo(HaveOccurred())
		Expect(port).To(Equal(fmt.Sprint(localcluster.ProxyPort)), "the HTTPRoute's backend port is the Service's http port")
	})

	It("serves on every component's /metrics what docs/metrics.md lists", func(ctx SpecContext) {
		expectMetricsAsDocumented(ctx)
	})
})

// reForwarding is kubectl port-forward's line naming the local port it listens on.
var reForwarding = regexp.MustCompile(`^Forwarding from 127\.0\.0\.1:(\d+) -> `)

// gatewayAPICRDs is the folder of Gateway API's standard CRDs (hack/tools.sh gatewayapi copies them
// from its Go module).
func gatewayAPICRDs() (string, error) {
	dir, err := toolsDir("gatewayapi")
	return filepath.Join(dir, "crds"), err
}

// toolsDir runs hack/tools.sh for one set and returns its folder.
func toolsDir(set string) (string, error) {
	out, err := execOutput(context.Background(), filepath.Join(framework.RepoRoot(), "hack", "tools.sh"), set)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return lines[len(lines)-1], nil
}
