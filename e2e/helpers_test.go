//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/endpoints"
)

// expectProxying fails the calling container unless every interceptor serves its proxy port within
// 30 s (one may still be restarting after an earlier scenario). A broken component is a failed
// scenario, never a skipped one.
func expectProxying(ctx context.Context, h *framework.HTTPScale) {
	GinkgoHelper()
	for _, ic := range h.Interceptors {
		addr := net.JoinHostPort(ic.IP, fmt.Sprint(localcluster.ProxyPort))
		Eventually(func() error {
			conn, err := localcluster.DialContext(f.Cluster.NetNS)(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
			}
			return err
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "interceptor proxy port %s", addr)
	}
}

// scenario waits until the chart's pods are all Ready (an earlier scenario may have deleted or restarted
// some), fails the calling container when an interceptor does not proxy, and gives it the interceptor
// pods, a namespace of its own (deleted afterwards) and a host named after it.
func scenario(ctx context.Context, prefix string) (h *framework.HTTPScale, ns, host string) {
	h, err := f.HTTPScale(ctx)
	Expect(err).NotTo(HaveOccurred())
	expectProxying(ctx, h)
	ns, err = f.CreateNamespace(ctx, prefix)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) { Expect(f.DeleteNamespace(ctx, ns)).To(Succeed()) })
	return h, ns, ns + ".example"
}

// proxyURL is the URL of path on the interceptor pod of the given zone index.
func proxyURL(h *framework.HTTPScale, zone int, path string) string {
	return fmt.Sprintf("http://%s:%d%s", h.Interceptors[zone].IP, localcluster.ProxyPort, path)
}

// scaledApp creates the sample app at zero replicas and an HTTPScaledObject routing host to it, and
// waits until every interceptor routes it.
func scaledApp(ctx context.Context, ns, name, host string, scaledown int32) *httpscalev1alpha1.HTTPScaledObject {
	return routedApp(ctx, ns, name, 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
		s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
		s.ScaledownPeriod = ptr.To(scaledown)
	})
}

// routedApp creates the sample app (Deployment with the given replicas, Service) and an
// HTTPScaledObject for it (min 0, max 4 unless spec changes them), and waits until every interceptor
// routes it.
func routedApp(ctx context.Context, ns, name string, replicas int32, spec func(*httpscalev1alpha1.HTTPScaledObjectSpec)) *httpscalev1alpha1.HTTPScaledObject {
	GinkgoHelper()
	return routedAppOf(ctx, ns, name, replicas, nil, spec)
}

// routedAppOf is routedApp with the sample app's Deployment changed by dep (nil: as it is).
func routedAppOf(ctx context.Context, ns, name string, replicas int32, change func(*appsv1.Deployment), spec func(*httpscalev1alpha1.HTTPScaledObjectSpec)) *httpscalev1alpha1.HTTPScaledObject {
	GinkgoHelper()
	dep, svc := f.SampleApp(ns, name, replicas)
	if change != nil {
		change(dep)
	}
	Expect(f.Client.Create(ctx, dep)).To(Succeed())
	Expect(f.Client.Create(ctx, svc)).To(Succeed())
	hso := &httpscalev1alpha1.HTTPScaledObject{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: httpscalev1alpha1.HTTPScaledObjectSpec{
			ScaleTargetRef: httpscalev1alpha1.ScaleTargetRef{
				APIVersion: "apps/v1", Kind: "Deployment", Name: name, Service: name, Port: ptr.To[int32](80),
			},
			Replicas: &httpscalev1alpha1.ReplicaBounds{Min: ptr.To[int32](0), Max: ptr.To[int32](4)},
		},
	}
	spec(&hso.Spec)
	Expect(f.Client.Create(ctx, hso)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso)).To(Succeed())
		g.Expect(hso.Status.Routing).NotTo(BeNil())
		g.Expect(hso.Status.Routing.InterceptorsTotal).To(BeEquivalentTo(len(f.Cluster.Real)))
		g.Expect(hso.Status.Routing.InterceptorsReady).To(Equal(hso.Status.Routing.InterceptorsTotal))
	}).WithContext(ctx).Should(Succeed())
	return hso
}

// answer is what the sample app reports.
type answer struct {
	Status int
	PodIP  string `json:"podIP"`
	Zone   string `json:"zone"`
	// Headers are the request headers the app received (first value each).
	Headers map[string]string `json:"headers"`
	Host    string            `json:"host"`
	Path    string            `json:"path"`
	// StartedAt and ListeningAt are when the app's process started and began to listen (RFC 3339).
	StartedAt   string `json:"startedAt"`
	ListeningAt string `json:"listeningAt"`
}

// ask sends one GET through an interceptor (zone index) with the given Host and headers.
func ask(ctx context.Context, h *framework.HTTPScale, zone int, host, path string, headers map[string]string) (answer, error) {
	return askURL(ctx, proxyURL(h, zone, path), host, headers)
}

// askURL sends one GET to url with the given Host and headers and reads the sample app's answer.
func askURL(ctx context.Context, url, host string, headers map[string]string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return answer{}, err
	}
	req.Host = host
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := f.HTTP.Do(req)
	if err != nil {
		return answer{}, err
	}
	return readAnswer(resp)
}

// readAnswer reads (and closes) a response of the sample app.
func readAnswer(resp *http.Response) (answer, error) {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{Status: resp.StatusCode}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &a); err != nil {
			return a, fmt.Errorf("decoding %q: %w", body, err)
		}
	}
	return a, nil
}

// podIPs returns the IPs of the pods labelled app=<name> in ns.
func podIPs(ctx context.Context, ns, name string) []string {
	var pods corev1.PodList
	Expect(f.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": name})).To(Succeed())
	var ips []string
	for _, p := range pods.Items {
		if p.Status.PodIP != "" {
			ips = append(ips, p.Status.PodIP)
		}
	}
	return ips
}

// readyEndpoints returns the ready endpoints (address, zone, topology hints) that the EndpointSlices
// of Service name in ns list: what an interceptor balances over once its watch has them.
func readyEndpoints(ctx context.Context, ns, name string) *endpoints.Set {
	var list discoveryv1.EndpointSliceList
	Expect(f.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name})).To(Succeed())
	set := &endpoints.Set{}
	for _, s := range list.Items {
		for _, e := range s.Endpoints {
			if !ptr.Deref(e.Conditions.Ready, false) {
				continue
			}
			var hints []string
			if e.Hints != nil {
				for _, z := range e.Hints.ForZones {
					hints = append(hints, z.Name)
				}
			}
			for _, ip := range e.Addresses {
				set.Endpoints = append(set.Endpoints, endpoints.Endpoint{IP: ip, Zone: ptr.Deref(e.Zone, ""), ForZones: hints})
			}
		}
	}
	return set
}

// replicas returns the Deployment's desired replica count.
func replicas(ctx context.Context, ns, name string) (int32, error) {
	var d appsv1.Deployment
	if err := f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		return 0, err
	}
	return ptr.Deref(d.Spec.Replicas, 1), nil
}

// requestCounts sums the count of requests per ?rid= over the pods of the sample app <name> in ns:
// each pod answers GET /requests on its admin port with the requests it saw.
func requestCounts(ctx context.Context, ns, name string) map[string]int64 {
	GinkgoHelper()
	counts := map[string]int64{}
	for _, ip := range podIPs(ctx, ns, name) {
		resp, err := f.Get(ctx, fmt.Sprintf("http://%s:%d/requests", ip, framework.SampleAppAdmin), "")
		Expect(err).NotTo(HaveOccurred())
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK), string(body))
		var pod map[string]int64
		Expect(json.Unmarshal(body, &pod)).To(Succeed())
		for rid, n := range pod {
			counts[rid] += n
		}
	}
	return counts
}

// watchReplicas records when the Deployment first has at least min desired replicas, polling every
// 100ms until ctx ends.
func watchReplicas(ctx context.Context, ns, name string, min int32) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		defer GinkgoRecover()
		for ctx.Err() == nil {
			if n, err := replicas(ctx, ns, name); err == nil && n >= min {
				ch <- time.Now()
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	return ch
}

// updateDeployment changes a Deployment as a user's retrying client does: read, change, write, and
// again on a conflict (the Deployment controller or KEDA may have written it in between).
func updateDeployment(ctx context.Context, ns, name string, change func(*appsv1.Deployment)) {
	GinkgoHelper()
	Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d appsv1.Deployment
		if err := f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return err
		}
		change(&d)
		return f.Client.Update(ctx, &d)
	})).To(Succeed(), "updating Deployment %s/%s", ns, name)
}

// buildProbe builds e2e/dnsprobe (static) into a temporary directory and returns the binary's path.
func buildProbe(ctx context.Context) string { return buildStatic(ctx, "dnsprobe") }

// buildStatic builds the static binary of e2e/<name> into a temporary directory and returns its path.
func buildStatic(ctx context.Context, name string) string {
	GinkgoHelper()
	bin := filepath.Join(GinkgoT().TempDir(), name)
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./e2e/"+name)
	build.Dir, build.Env = f.Cluster.RepoRoot, append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "building %s: %s", name, out)
	return bin
}

// runToCompletion creates pod, waits up to limit for it to succeed and returns its logs.
func runToCompletion(ctx context.Context, pod *corev1.Pod, limit time.Duration) string {
	GinkgoHelper()
	Expect(f.Client.Create(ctx, pod)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
		g.Expect(pod.Status.Phase).NotTo(Equal(corev1.PodFailed), "%s pod failed: %+v", pod.Name, pod.Status)
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded))
	}).WithContext(ctx).WithTimeout(limit).Should(Succeed())
	out, err := f.Cluster.KubectlRun(ctx, "", "-n", pod.Namespace, "logs", pod.Name)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// runProbe runs dnsprobe with args as pod name of ns on a real node (a client pod with the cluster's
// DNS and kube-proxy's Service addresses), waits up to limit for it to finish and returns its results.
func runProbe(ctx context.Context, ns, name string, limit time.Duration, args ...string) probeResults {
	GinkgoHelper()
	image := f.Cluster.RegistryHost() + "/dnsprobe:e2e"
	Expect(f.Cluster.PushImage(ctx, image, buildProbe(ctx))).To(Succeed())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  framework.RealNodeSelector(),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "probe", Image: image, Args: args}},
		},
	}
	return parseProbe(runToCompletion(ctx, pod, limit))
}

// atZero waits until app name of ns has no pods and no ready endpoints, so that the next request is
// a cold one.
func atZero(ctx context.Context, ns, name string, within time.Duration) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		g.Expect(replicas(ctx, ns, name)).To(BeEquivalentTo(0))
		var pods corev1.PodList
		g.Expect(f.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": name})).To(Succeed())
		g.Expect(pods.Items).To(BeEmpty())
		var eps discoveryv1.EndpointSliceList
		g.Expect(f.Client.List(ctx, &eps, client.InNamespace(ns), client.MatchingLabels{discoveryv1.LabelServiceName: name})).To(Succeed())
		for _, s := range eps.Items {
			for _, e := range s.Endpoints {
				g.Expect(ptr.Deref(e.Conditions.Ready, true)).To(BeFalse())
			}
		}
	}).WithContext(ctx).WithTimeout(within).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// backToZero takes app name of ns back to zero the quick way: once KEDA reports its ScaledObject
// inactive (nothing in flight or held), the Deployment is scaled to 0 instead of waiting for KEDA's
// polling and cooldown.
func backToZero(ctx context.Context, ns, name string) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var so kedav1alpha1.ScaledObject
		g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &so)).To(Succeed())
		g.Expect(so.Status.Conditions.GetActiveCondition().Status).To(Equal(metav1.ConditionFalse))
	}).WithContext(ctx).WithTimeout(time.Minute).Should(Succeed())
	updateDeployment(ctx, ns, name, func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](0) })
	atZero(ctx, ns, name, time.Minute)
}
