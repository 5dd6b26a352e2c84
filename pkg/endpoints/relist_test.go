package endpoints

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/httpscale/httpscale/pkg/testenv"
)

// TestRelistForgetsSlicesGoneMeanwhile: when a watch expires (410 Gone), the Reflector lists the
// slices again; a slice deleted while nothing was watching must take its endpoints with it, and one
// added meanwhile must bring its endpoints, though no watch event ever told of either.
func TestRelistForgetsSlicesGoneMeanwhile(t *testing.T) {
	slice := func(name, ip string) *discoveryv1.EndpointSlice {
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: name, Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}
	}
	cs := fake.NewClientset(slice("web-1", "198.18.0.1"))
	first := watch.NewFake()
	var watches atomic.Int32
	cs.PrependWatchReactor("endpointslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) == 1 {
			return true, first, nil // the watch this test expires
		}
		return false, nil, nil // the tracker's own watch
	})
	c, err := NewCache(cs, CacheOptions{Log: logr.Discard(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	defer func() { cancel(); <-done }()

	k := ServiceKey{Namespace: "shop", Service: "web", PortName: "http"}
	c.Track([]ServiceKey{k})
	ips := func() []string {
		var out []string
		if s := c.Ready(k); s != nil {
			for _, e := range s.Endpoints {
				out = append(out, e.IP)
			}
		}
		return out
	}
	testenv.Eventually(t, 20*time.Second, "web-1's endpoint", func() bool { got := ips(); return len(got) == 1 && got[0] == "198.18.0.1" })

	// Changed while the only watch hears nothing: web-1 goes, web-2 comes.
	gvr := discoveryv1.SchemeGroupVersion.WithResource("endpointslices")
	if err := cs.Tracker().Delete(gvr, "shop", "web-1"); err != nil {
		t.Fatal(err)
	}
	if err := cs.Tracker().Create(gvr, slice("web-2", "198.18.0.2"), "shop"); err != nil {
		t.Fatal(err)
	}
	first.Error(&metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	testenv.Eventually(t, 20*time.Second, "only web-2's endpoint after the re-list", func() bool { got := ips(); return len(got) == 1 && got[0] == "198.18.0.2" })
	// The re-list comes before the new watch: the endpoints can be right while the watch is not open yet.
	testenv.Eventually(t, 20*time.Second, "a second watch after the first expired", func() bool { return watches.Load() >= 2 })
}
