//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/admin"
)

// The internal ports answer only their peers, on the chart's real pods: with the default values the
// interceptors' admin port wants the fleet's own ServiceAccount tokens, and with scaler.tls.enabled
// the scaler's gRPC port wants KEDA's client certificate. A pod in a tenant's namespace, with that
// namespace's default credentials and a token it asks the kubelet for with the admin port's
// audience, reads no counts, status or wake stream and cannot call the scaler; meanwhile the
// operator still proves propagation to every interceptor (it probes them with its token) and a cold
// start still works end to end: the interceptor's wake reaches the scaler, which KEDA reads over
// mutual TLS, and KEDA scales the app up.
var _ = Describe("Internal ports", Ordered, func() {
	It("answer only their peers: a tenant's pod is refused while the scaler, the operator and KEDA over mutual TLS keep working", func(ctx SpecContext) {
		DeferCleanup(func(ctx SpecContext) {
			Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter)).To(Succeed())
			rebalanceInterceptors(ctx)
		})
		Expect(f.Cluster.InstallChart(ctx, f.Images, GinkgoWriter, "--set", "scaler.tls.enabled=true")).To(Succeed())
		rebalanceInterceptors(ctx)

		h, ns, host := scenario(ctx, "ports")
		By("the operator probes every interceptor with its token: the new object is routed 2/2")
		hso := scaledApp(ctx, ns, "app", host, 30) // waits for status routing N/N
		GinkgoWriter.Printf("routing %d/%d\n", hso.Status.Routing.InterceptorsReady, hso.Status.Routing.InterceptorsTotal)

		By("the generated ScaledObject reaches the scaler over mutual TLS")
		Eventually(func(g Gomega) {
			var so kedav1alpha1.ScaledObject
			g.Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &so)).To(Succeed())
			t := so.Spec.Triggers[0]
			g.Expect(t.Metadata).To(HaveKeyWithValue("enableTLS", "true"))
			g.Expect(t.AuthenticationRef).To(Equal(&kedav1alpha1.AuthenticationRef{Name: "httpscale-scaler-tls", Kind: "ClusterTriggerAuthentication"}))
		}).WithContext(ctx).Should(Succeed())

		By("a cold start: held, woken through the scaler and KEDA, answered by a real pod")
		start := time.Now()
		a, err := ask(ctx, h, 0, host, "/cold", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Status).To(Equal(http.StatusOK))
		GinkgoWriter.Printf("cold start with KEDA→scaler mutual TLS: %s\n", time.Since(start))
		Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1))

		By("a tenant's pod: its tokens get 401 or 403 from every interceptor's admin port, and the scaler refuses plain text and TLS without KEDA's certificate")
		var urls []string
		for _, ic := range h.Interceptors {
			base := fmt.Sprintf("http://%s:%d", ic.IP, localcluster.InterceptorAdmin)
			urls = append(urls, base+admin.PathCounts, base+admin.PathWake, base+admin.PathStatus, base+admin.PathMetrics, base+admin.PathReadyz)
		}
		scaler := fmt.Sprintf("httpscale-scaler.%s.svc.cluster.local:9090", localcluster.Namespace)
		results := runPeerProbe(ctx, ns, urls, scaler, ns+"/app")
		for _, r := range results {
			GinkgoWriter.Printf("%+v\n", r)
		}
		checked := 0
		for _, r := range results {
			switch {
			case r.Check == "get" && strings.HasSuffix(r.Target, admin.PathReadyz):
				// The port is reachable from the tenant's pod (the local cluster's bridge enforces no
				// NetworkPolicy): what refuses the others is the authentication.
				Expect(r.Status).To(Equal(http.StatusOK), "%+v", r)
			case r.Check == "get" && r.Token == "audience" && !strings.HasSuffix(r.Target, admin.PathMetrics):
				Expect(r.Status).To(Equal(http.StatusForbidden), "a tenant's token with the admin audience: %+v", r)
			case r.Check == "get" && r.Token == "default" && strings.HasSuffix(r.Target, admin.PathMetrics):
				Expect(r.Status).To(Equal(http.StatusForbidden), "a tenant may not scrape: %+v", r)
			case r.Check == "get":
				Expect(r.Status).To(Equal(http.StatusUnauthorized), "%+v", r)
			case r.Check == "grpc":
				Expect(r.Err).NotTo(BeEmpty(), "the scaler answered a %s call without KEDA's certificate: %+v", r.Mode, r)
				Expect(r.Code).To(Equal("Unavailable"), "%+v", r)
			default:
				Fail(fmt.Sprintf("unexpected probe line %+v", r))
			}
			checked++
		}
		Expect(checked).To(Equal(len(urls)*3 + 2))

		By("the fleet's own identity is let in (the scaler's ServiceAccount, a token bound to the audience)")
		c, err := admin.Client{HTTP: &http.Client{Transport: bearer{fleetToken(ctx), f.HTTP.Transport}}}.
			Counts(ctx, fmt.Sprintf("http://%s:%d", h.Interceptors[0].IP, localcluster.InterceptorAdmin), 0, "")
		Expect(err).NotTo(HaveOccurred())
		found := false
		for _, a := range c.Apps {
			found = found || a.Key == ns+"/app"
		}
		Expect(found).To(BeTrue(), "counts %+v lack %s/app", c, ns)
	})
})

// bearer adds a token to every request.
type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// fleetToken returns the fleet's own admin-port token (framework.FleetToken).
func fleetToken(ctx context.Context) string {
	GinkgoHelper()
	tok, err := f.FleetToken(ctx)
	Expect(err).NotTo(HaveOccurred())
	return tok
}

// adminTokenGet GETs path of an interceptor's admin port from the test process as the fleet's own peers
// do (see fleetToken).
func adminTokenGet(ctx context.Context, ip, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s:%d%s", ip, localcluster.InterceptorAdmin, path), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+fleetToken(ctx))
	return f.HTTP.Do(req)
}

// peerResult is one line of e2e/peerprobe.
type peerResult struct {
	Check, Target, Token, Mode, Body, Code, Err string
	Status                                      int
}

// runPeerProbe runs e2e/peerprobe as a pod of ns with the namespace's default ServiceAccount, its
// automounted token and a projected token with the admin port's audience, and returns its lines.
func runPeerProbe(ctx context.Context, ns string, urls []string, scaler, app string) []peerResult {
	GinkgoHelper()
	bin := buildStatic(ctx, "peerprobe")
	image := f.Cluster.RegistryHost() + "/peerprobe:e2e"
	Expect(f.Cluster.PushImage(ctx, image, bin)).To(Succeed())

	args := []string{"-token", "default=/var/run/secrets/kubernetes.io/serviceaccount/token", "-token", "audience=/var/run/secrets/tenant/token",
		"-grpc", scaler, "-app", app, "-timeout", "5s"}
	for _, u := range urls {
		args = append(args, "-get", u)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "peerprobe", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:                  framework.RealNodeSelector(),
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []corev1.Container{{Name: "probe", Image: image, Args: args,
				VolumeMounts: []corev1.VolumeMount{{Name: "tenant-token", MountPath: "/var/run/secrets/tenant", ReadOnly: true}}}},
			// Any pod may ask the kubelet for a token of its own ServiceAccount with any audience.
			Volumes: []corev1.Volume{{Name: "tenant-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
				Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{
					Audience: admin.DefaultTokenAudience, ExpirationSeconds: ptr.To[int64](3600), Path: "token"}}},
			}}}},
		},
	}
	logs := runToCompletion(ctx, pod, 3*time.Minute)
	var res []peerResult
	dec := json.NewDecoder(strings.NewReader(logs))
	for {
		var r peerResult
		if err := dec.Decode(&r); err == io.EOF {
			break
		} else {
			Expect(err).NotTo(HaveOccurred(), logs)
		}
		Expect(r.Check).NotTo(Equal("token"), "peerprobe could not read a token: %+v", r)
		res = append(res, r)
	}
	return res
}
