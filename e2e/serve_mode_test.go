//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	httpscalev1alpha1 "github.com/httpscale/httpscale/api/v1alpha1"
	"github.com/httpscale/httpscale/e2e/framework"
	"github.com/httpscale/httpscale/hack/cluster/localcluster"
	"github.com/httpscale/httpscale/pkg/admin"
)

// Serve mode: callers use the app's own Service (cluster IP, through kube-proxy on the real nodes).
var _ = Describe("Serve mode", Ordered, func() {
	var (
		h    *framework.HTTPScale
		ns   string
		hso  *httpscalev1alpha1.HTTPScaledObject
		svc  corev1.Service
		fqdn string
		// direct dials a new connection per request, so kube-proxy picks an endpoint every time.
		direct *http.Client
	)

	BeforeAll(func(ctx SpecContext) {
		var host string
		h, ns, host = scenario(ctx, "serve")
		hso = routedApp(ctx, ns, "app", 0, func(s *httpscalev1alpha1.HTTPScaledObjectSpec) {
			s.Hosts = []httpscalev1alpha1.Host{httpscalev1alpha1.Host(host)}
			s.Mode = httpscalev1alpha1.ModeServe
			s.ScaledownPeriod = ptr.To[int32](600)
			// Admission wants a trigger that sees warm traffic at min 0; this one is never active
			// (1 January, 00:00-00:01), so only the interceptor's trigger scales here.
			s.Scaling = &httpscalev1alpha1.Scaling{Triggers: []httpscalev1alpha1.ScalingTrigger{{Type: "cron", Metadata: map[string]string{
				"timezone": "Etc/UTC", "start": "0 0 1 1 *", "end": "1 0 1 1 *", "desiredReplicas": "1",
			}}}}
		})
		Expect(f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &svc)).To(Succeed())
		fqdn = "app." + ns + ".svc.cluster.local"
		direct = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{
			DialContext: localcluster.DialContext(f.Cluster.NetNS), DisableKeepAlives: true}}
	})

	get := func(ctx context.Context, host, path string) (answer, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s%s", svc.Spec.ClusterIP, path), nil)
		if err != nil {
			return answer{}, err
		}
		if host != "" {
			req.Host = host
		}
		resp, err := direct.Do(req)
		if err != nil {
			return answer{}, err
		}
		return readAnswer(resp)
	}
	serving := func(ctx context.Context) string {
		cur := &httpscalev1alpha1.HTTPScaledObject{}
		if err := f.Client.Get(ctx, client.ObjectKeyFromObject(hso), cur); err != nil {
			return err.Error()
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, httpscalev1alpha1.ConditionServing); c != nil {
			return string(c.Status) + " " + c.Reason
		}
		return "none"
	}
	redirect := func(ctx context.Context) bool {
		err := f.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app-httpscale-redirect"}, &discoveryv1.EndpointSlice{})
		return !apierrors.IsNotFound(err)
	}
	// interceptorRequests sums the interceptors' request counters of the app.
	interceptorRequests := func(ctx context.Context) uint64 {
		var sum uint64
		for _, ic := range h.Interceptors {
			resp, err := f.Get(ctx, fmt.Sprintf("http://%s:%d%s?since=0", ic.IP, localcluster.InterceptorAdmin, admin.PathCounts), "")
			Expect(err).NotTo(HaveOccurred())
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var c admin.Counts
			Expect(json.Unmarshal(body, &c)).To(Succeed(), string(body))
			for _, a := range c.Apps {
				if a.Key == ns+"/app" {
					sum += a.Requests
				}
			}
		}
		return sum
	}

	It("answers a burst sent to the Service's cluster IP and DNS name at zero, each request once, then leaves the path", func(ctx SpecContext) {
		Eventually(func() string { return serving(ctx) }).WithContext(ctx).Should(Equal("False Proxying"))
		Expect(redirect(ctx)).To(BeTrue())
		Expect(replicas(ctx, ns, "app")).To(BeEquivalentTo(0))

		const n = 200
		start := time.Now()
		errs := make([]error, n)
		answers := make([]answer, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				host := "" // the cluster IP itself
				if i%2 == 1 {
					host = fqdn
				}
				answers[i], errs[i] = get(ctx, host, fmt.Sprintf("/serve?rid=%d", i))
			}()
		}
		wg.Wait()
		answered := time.Since(start)
		for i := range n {
			Expect(errs[i]).NotTo(HaveOccurred(), "request %d", i)
			Expect(answers[i].Status).To(Equal(http.StatusOK), "request %d", i)
		}
		counts := requestCounts(ctx, ns, "app")
		Expect(counts).To(HaveLen(n), "requests that reached the app")
		for rid, c := range counts {
			Expect(c).To(BeEquivalentTo(1), "request %s reached the app %d times", rid, c)
		}
		Expect(replicas(ctx, ns, "app")).To(BeNumerically(">=", 1))
		AddReportEntry("serve mode: 200 requests at zero through the Service answered after", answered.String())

		// The redirect goes once the pod is ready and nothing is held.
		Eventually(func() string { return serving(ctx) }).WithContext(ctx).WithTimeout(time.Minute).Should(Equal("True Direct"))
		removedAt := time.Now()
		Expect(redirect(ctx)).To(BeFalse())

		// Once kube-proxy has the change, requests reach the pods without the interceptor: no
		// X-Forwarded-For from it, and its request counter stops.
		Eventually(func(g Gomega) {
			a, err := get(ctx, fqdn, "/direct")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(a.Headers).NotTo(HaveKey("X-Forwarded-For"))
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		AddReportEntry("serve mode: redirect removed -> first direct answer", time.Since(removedAt).String())
		before := interceptorRequests(ctx)
		for i := range 50 {
			a, err := get(ctx, "", fmt.Sprintf("/direct?i=%d", i))
			Expect(err).NotTo(HaveOccurred())
			Expect(a.Status).To(Equal(http.StatusOK))
		}
		Expect(interceptorRequests(ctx)).To(Equal(before), "the interceptors saw none of 50 warm requests")
	})

	It("restores the Service when the object is deleted", func(ctx SpecContext) {
		Expect(f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso)).To(Succeed())
		// Back to zero first (the workload watch puts the redirect in place at once), then delete.
		updateDeployment(ctx, ns, "app", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](0) })
		Eventually(func() bool { return redirect(ctx) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
		Expect(f.Client.Delete(ctx, hso)).To(Succeed())
		Eventually(func() bool { return redirect(ctx) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeFalse())
		Eventually(func() bool {
			return apierrors.IsNotFound(f.Client.Get(ctx, client.ObjectKeyFromObject(hso), hso))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeTrue())
	})
})
