//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
)

// EnvWakes sets how many timed wakes the cold-start spec measures after its first (default 5; the
// figures in docs/benchmarks.md are from 20).
const EnvWakes = "HTTPSCALE_E2E_WAKES"

// Real cold starts: a request through the interceptor Service's ClusterIP (kube-proxy) for an app at
// zero is held by an interceptor pod until KEDA (through the scaler pod) has scaled the app, its real
// pod has started and passed its readiness probe; then it is answered, marked as a cold start.
var _ = Describe("Cold starts on real pods", Ordered, func() {
	var (
		h          *framework.HTTPScale
		ns         string
		scalerName string
		host       string
		url        string
	)

	BeforeAll(func(ctx SpecContext) {
		h, ns, host = scenario(ctx, "wake")
		hso := routedApp(ctx, ns, "app", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.ScaledownPeriod = ptr.To[int32](5)
			s.Replicas.Max = ptr.To[int32](2)
		})
		// KEDA reaches the scaler pod by the chart's default address, the scaler Service's DNS name, which
		// the cluster's DNS resolves to that Service's ClusterIP (the cold starts below need KEDA to have
		// reached it; the first one checks CoreDNS's log for KEDA's query).
		scalerName = fmt.Sprintf("httpscale-scaler.%s.svc.%s", localcluster.Namespace, localcluster.ClusterDomain)
		var so kedav1alpha1.ScaledObject
		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(hso), &so)).To(Succeed())
		Expect(so.Spec.Triggers).To(HaveLen(1))
		Expect(so.Spec.Triggers[0].Metadata).To(HaveKeyWithValue("scalerAddress", fmt.Sprintf("%s:%d", scalerName, localcluster.ScalerGRPCPort)))
		var scalerSvc corev1.Service
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: localcluster.Namespace, Name: "httpscale-scaler"}, &scalerSvc)).To(Succeed())
		Expect(scalerSvc.Spec.ClusterIP).NotTo(BeEmpty())
		Expect(clusterLookup(ctx, scalerName)).To(Equal([]string{scalerSvc.Spec.ClusterIP}), "%s at the cluster's DNS", scalerName)
		url = fmt.Sprintf("http://%s:%d/hello", h.InterceptorService, localcluster.ProxyPort)
	})

	// cold sends one request while the app has no pods and checks it was held until a real pod was
	// Ready and answered; it returns the time to the answer.
	cold := func(ctx context.Context) time.Duration {
		GinkgoHelper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		Expect(err).NotTo(HaveOccurred())
		req.Host = host
		start := time.Now()
		resp, err := f.HTTP.Do(req)
		Expect(err).NotTo(HaveOccurred())
		a, err := readAnswer(resp)
		took := time.Since(start)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Status).To(Equal(http.StatusOK))
		Expect(a.Host).To(Equal(host))
		Expect(a.Path).To(Equal("/hello"))
		Expect(resp.Header.Get("X-Httpscale-Cold-Start")).To(Equal("true"), "the request was held")
		Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1))
		var pods corev1.PodList
		Expect(f.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{"app": "app"})).To(Succeed())
		Expect(pods.Items).To(ContainElement(And(
			HaveField("Spec.NodeName", HavePrefix("real-")), HaveField("Status.PodIP", a.PodIP))),
			"answered by a real pod of the app")
		fmt.Fprintf(GinkgoWriter, "cold start answered by pod %s after %s (interceptor wait %s)\n",
			a.PodIP, took.Round(time.Millisecond), resp.Header.Get("X-Httpscale-Cold-Start-Wait"))
		return took
	}

	It("holds a request at zero until a real pod is Ready, and KEDA scales the app back to zero", func(ctx SpecContext) {
		Expect(replicas(ctx, ns, "app")).To(BeEquivalentTo(0))
		first := cold(ctx)
		// KEDA resolved the scaler's name over UDP (this spec's own lookup above went over TCP).
		queries, err := os.ReadFile(filepath.Join(f.Cluster.LogDir(), "coredns.log"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(queries)).To(MatchRegexp(`"A IN %s\. udp [^"]*" NOERROR`, regexp.QuoteMeta(scalerName)),
			"CoreDNS's log has no answered UDP query for %s", scalerName)
		t0 := time.Now()
		atZero(ctx, ns, "app", 2*time.Minute)
		toZero := time.Since(t0)
		AddReportEntry("real cold start: first request -> answered", first.String())
		AddReportEntry("real cold start: KEDA back to zero after", toZero.String())
	})

	It("wakes the app from zero again and again", func(ctx SpecContext) {
		var wakes []time.Duration
		for range wakesFromEnv() {
			backToZero(ctx, ns, "app")
			wakes = append(wakes, cold(ctx))
		}
		rep := fmt.Sprintf("%d wakes from zero, request -> answered: p50 %s, p99 %s, max %s", len(wakes),
			percentile(wakes, 50).Round(time.Millisecond), percentile(wakes, 99).Round(time.Millisecond), slices.Max(wakes).Round(time.Millisecond))
		AddReportEntry("real cold starts", rep)
		fmt.Fprintln(GinkgoWriter, rep)
	})
})

// wakesFromEnv is how many timed wakes a cold-start spec measures: EnvWakes, default 5.
func wakesFromEnv() int {
	GinkgoHelper()
	n := 5
	if v := os.Getenv(EnvWakes); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		Expect(err).NotTo(HaveOccurred(), EnvWakes)
	}
	return n
}

// percentile returns the nearest-rank percentile p (0-100] of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}
