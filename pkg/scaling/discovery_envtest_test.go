package scaling

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/kedacore/keda/v2/pkg/scalers/externalscaler"

	"github.com/httpscale/httpscale/pkg/admin"
	"github.com/httpscale/httpscale/pkg/scaling/scalingtest"
	"github.com/httpscale/httpscale/pkg/testenv"
	"github.com/httpscale/httpscale/pkg/trigger"
)

// TestDiscoveryOnAPIServer runs the EndpointSlice discovery specs against a real kube-apiserver.
func TestDiscoveryOnAPIServer(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "scaling discovery (envtest)")
}

var (
	env       *envtest.Environment
	k8s       client.Client
	envCache  cache.Cache
	envCancel context.CancelFunc
)

const installNS = "httpscale-system"

var adminSelector = labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: "httpscale-interceptor-admin"})

var _ = BeforeSuite(func() {
	e, restCfg, err := testenv.Start()
	Expect(err).NotTo(HaveOccurred())
	env = e
	scheme := runtime.NewScheme()
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	k8s, err = client.New(restCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	for _, ns := range []string{installNS, "elsewhere"} {
		Expect(k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	// The same cache restriction the scaler binary uses.
	envCache, err = cache.New(restCfg, cache.Options{Scheme: scheme, ByObject: CacheByObject(installNS, adminSelector)})
	Expect(err).NotTo(HaveOccurred())
	var ctx context.Context
	ctx, envCancel = context.WithCancel(context.Background())
	go func() { _ = envCache.Start(ctx) }()
	Expect(envCache.WaitForCacheSync(ctx)).To(BeTrue())
})

var _ = AfterSuite(func() {
	if envCancel != nil {
		envCancel()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

func endpoint(ip, pod string, ready, terminating bool) discoveryv1.Endpoint {
	return discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(ready), Terminating: ptr.To(terminating)},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: installNS, Name: pod},
	}
}

func slice(ns, name, service string, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr.To("metrics"), Port: ptr.To[int32](9999)},
			{Name: ptr.To("admin"), Port: ptr.To[int32](9090)},
		},
		Endpoints: eps,
	}
}

var _ = Describe("EndpointSliceDiscovery", func() {
	It("polls the admin Service's endpoints, ready or not, and drops those that leave the slice", func(ctx SpecContext) {
		// Pod IPs cannot be loopback (EndpointSlice validation rejects 127.0.0.0/8), so the test range
		// 198.18.0.0/24 is mapped to the fake replicas' loopback listeners by the Address hook.
		ics := map[string]*scalingtest.Interceptor{}
		for _, ip := range []string{"198.18.0.1", "198.18.0.2", "198.18.0.3", "198.18.0.4"} {
			ic := scalingtest.Start(scalingtest.Options{})
			DeferCleanup(ic.Close)
			ics[ip] = ic
		}
		ics["198.18.0.1"].Counts().Set("ns/app", 1, 0)
		ics["198.18.0.2"].Counts().Set("ns/app", 0, 2)   // not ready and terminating: still counted
		ics["198.18.0.3"].Counts().Set("ns/app", 40, 0)  // another Service's slice
		ics["198.18.0.4"].Counts().Set("ns/app", 300, 0) // same label, other namespace
		mapped := func(ip string, port int32) string {
			Expect(port).To(Equal(int32(9090)), "the port named admin is used")
			return net.JoinHostPort("127.0.0.1", strconv.Itoa(ics[ip].Port()))
		}

		admin1 := slice(installNS, "httpscale-interceptor-admin-abc", "httpscale-interceptor-admin",
			endpoint("198.18.0.1", "interceptor-a", true, false), endpoint("198.18.0.2", "interceptor-b", false, true))
		for _, s := range []*discoveryv1.EndpointSlice{
			admin1,
			slice(installNS, "httpscale-interceptor-xyz", "httpscale-interceptor", endpoint("198.18.0.3", "interceptor-c", true, false)),
			slice("elsewhere", "httpscale-interceptor-admin-def", "httpscale-interceptor-admin", endpoint("198.18.0.4", "x", true, false)),
		} {
			Expect(k8s.Create(ctx, s)).To(Succeed())
		}

		disc := &EndpointSliceDiscovery{Reader: envCache, Namespace: installNS, Selector: adminSelector, PortName: "admin", Address: mapped}
		Eventually(func(g Gomega) {
			reps, err := disc.Replicas(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(reps).To(Equal([]Replica{
				{Key: installNS + "/interceptor-a", URL: "http://127.0.0.1:" + strconv.Itoa(ics["198.18.0.1"].Port())},
				{Key: installNS + "/interceptor-b", URL: "http://127.0.0.1:" + strconv.Itoa(ics["198.18.0.2"].Port())},
			}))
		}).WithTimeout(10 * time.Second).Should(Succeed())

		state := NewState(time.Minute)
		cctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		collector := NewCollector(CollectorOptions{
			Discovery: disc, Counts: admin.Client{}, Wake: admin.Client{},
			Interval: 20 * time.Millisecond, Timeout: 200 * time.Millisecond, StaleGrace: 5 * time.Second,
			Log: GinkgoLogr,
		}, state)
		go func() { done <- collector.Start(cctx) }()
		DeferCleanup(func() {
			cancel()
			Eventually(done).WithTimeout(10 * time.Second).Should(Receive(BeNil()))
		})
		md := trigger.Metadata{App: "ns/app", ConcurrencyTarget: 1}.Encode("s:1")
		svc := NewService(state, nil, GinkgoLogr, nil)
		concurrency := func() float64 {
			resp, err := svc.GetMetrics(ctx, &externalscaler.GetMetricsRequest{ScaledObjectRef: ref(md), MetricName: trigger.MetricConcurrency})
			Expect(err).NotTo(HaveOccurred())
			return resp.MetricValues[0].MetricValueFloat
		}
		Eventually(concurrency).WithTimeout(10*time.Second).Should(Equal(3.0), "ready and terminating endpoints of the admin slice")

		By("removing the terminating endpoint from the slice")
		Expect(k8s.Get(ctx, client.ObjectKeyFromObject(admin1), admin1)).To(Succeed())
		admin1.Endpoints = admin1.Endpoints[:1]
		Expect(k8s.Update(ctx, admin1)).To(Succeed())
		Eventually(concurrency).WithTimeout(10*time.Second).Should(Equal(1.0), "the replica that left is no longer counted")
		Expect(state.Snapshot().Replicas).To(HaveLen(1))
	})
})
