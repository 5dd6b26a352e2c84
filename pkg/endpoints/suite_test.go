package endpoints_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/httpscale/httpscale/pkg/endpoints"
	"github.com/httpscale/httpscale/pkg/testenv/ginkgoenv"
)

func TestEndpoints(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "endpoints suite")
}

var (
	restCfg *rest.Config
	cs      kubernetes.Interface
)

var suite = ginkgoenv.ForSuite(func(cfg *rest.Config) {
	// The test writes thousands of objects; lift client-go's default rate limit of 5/s.
	cfg.QPS, cfg.Burst = 2000, 4000
	restCfg = cfg
	var err error
	cs, err = kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
})

// startCache runs a Cache until the spec ends and checks that it then stops cleanly.
func startCache(opts endpoints.CacheOptions) (*endpoints.Cache, *prometheus.Registry) {
	GinkgoHelper()
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	opts.Log = GinkgoLogr
	c, err := endpoints.NewCacheForConfig(restCfg, opts)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done, 30*time.Second).Should(Receive(BeNil()))
	})
	return c, reg
}

// epSpec describes one endpoint of a test slice.
type epSpec struct {
	ip          string
	ready       *bool
	terminating bool
	zone        string
	forZones    []string
	pod         string // the targetRef's pod (UID "uid-" and the name); none when empty
}

func ready(ip string) epSpec    { return epSpec{ip: ip, ready: ptr.To(true)} }
func notReady(ip string) epSpec { return epSpec{ip: ip, ready: ptr.To(false)} }

// stopping is an endpoint of a terminating pod (deleted, scaled away, rolled).
func stopping(ip string) epSpec { return epSpec{ip: ip, ready: ptr.To(false), terminating: true} }

// sliceFor builds an EndpointSlice of service with one port named portName (unnamed when empty).
func sliceFor(ns, name, service, portName string, port int32, eps ...epSpec) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To(port), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}
	if portName != "" {
		s.Ports[0].Name = ptr.To(portName)
	}
	setEndpoints(s, eps...)
	return s
}

func setEndpoints(s *discoveryv1.EndpointSlice, eps ...epSpec) {
	s.Endpoints = nil
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.terminating {
			ep.Conditions.Terminating = ptr.To(true)
		}
		if e.zone != "" {
			ep.Zone = ptr.To(e.zone)
		}
		if e.pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: s.Namespace, Name: e.pod, UID: types.UID("uid-" + e.pod)}
		}
		if len(e.forZones) > 0 {
			ep.Hints = &discoveryv1.EndpointHints{}
			for _, z := range e.forZones {
				ep.Hints.ForZones = append(ep.Hints.ForZones, discoveryv1.ForZone{Name: z})
			}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
}

func create(ctx context.Context, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	GinkgoHelper()
	out, err := cs.DiscoveryV1().EndpointSlices(s.Namespace).Create(ctx, s, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return out
}

func update(ctx context.Context, s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	GinkgoHelper()
	out, err := cs.DiscoveryV1().EndpointSlices(s.Namespace).Update(ctx, s, metav1.UpdateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return out
}

// addrs returns the sorted "ip:port" of the ready endpoints of k.
func addrs(c *endpoints.Cache, k endpoints.ServiceKey) func() []string {
	return func() []string {
		s := c.Ready(k)
		if s == nil {
			return nil
		}
		out := make([]string, len(s.Endpoints))
		for i, e := range s.Endpoints {
			out[i] = e.Addr()
		}
		sort.Strings(out)
		return out
	}
}

func metricValue(reg *prometheus.Registry, name string) float64 {
	GinkgoHelper()
	families, err := reg.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	Fail(fmt.Sprintf("metric %s not found", name))
	return 0
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}
