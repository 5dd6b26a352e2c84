package endpoints

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/httpscale/httpscale/pkg/testenv"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// decodedSlice is app i's slice as hack/bench/memtable -traffic creates it, decoded from protobuf as
// a watch delivers it.
func decodedSlice(i int) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-%d-bench", i), Namespace: fmt.Sprintf("app-%d", i%100),
			Labels:          map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("web-%d", i)},
			ResourceVersion: "123456", UID: "0b6f0e4c-8b6e-4c32-9d1d-5b3b0e7c9a11", Generation: 1,
			CreationTimestamp: metav1.Now(),
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{fmt.Sprintf("10.255.%d.%d", i/250, i%250)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	b, _ := es.Marshal()
	out := &discoveryv1.EndpointSlice{}
	_ = out.Unmarshal(b)
	return out
}

// TestSliceStoreMemory: what a watch's store holds per slice of one endpoint and one port, against
// what a client-go Indexer with a Service index held of the same slice trimmed (the store before).
func TestSliceStoreMemory(t *testing.T) {
	const n = 10000
	base := testenv.HeapInUse()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{"service": func(obj any) ([]string, error) {
		return []string{obj.(*discoveryv1.EndpointSlice).Labels[discoveryv1.LabelServiceName]}, nil
	}})
	for i := range n {
		_ = idx.Add(trimmedOld(decodedSlice(i)))
	}
	old := int64(testenv.HeapInUse()) - int64(base)
	runtime.KeepAlive(idx)
	idx = nil
	base = testenv.HeapInUse()
	st := newSliceStore(func([]string) {}, func() {})
	for i := range n {
		_ = st.Add(decodedSlice(i))
	}
	nw := int64(testenv.HeapInUse()) - int64(base)
	t.Logf("heap per slice: %d bytes in the store, %d trimmed in an Indexer", nw/n, old/n)
	if nw/n > 512 {
		t.Errorf("the store holds %d bytes per slice, want at most 512 (an Indexer held %d)", nw/n, old/n)
	}
	runtime.KeepAlive(st)
}

// trimmedOld drops what the Indexer-based store dropped before storing a slice.
func trimmedOld(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	s.ManagedFields = nil
	s.Annotations = nil
	s.OwnerReferences = nil
	for i := range s.Endpoints {
		s.Endpoints[i].NodeName, s.Endpoints[i].Hostname, s.Endpoints[i].DeprecatedTopology = nil, nil, nil
	}
	return s
}
